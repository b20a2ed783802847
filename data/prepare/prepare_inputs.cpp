#include "data/prepare/prepare_inputs.h"

#include <glob.h>

#include <algorithm>
#include <set>

#include "core/error.h"
#include "core/strings.h"

namespace loom {
namespace fs = std::filesystem;
namespace {

const char* kExtensions = ".txt, .jsonl, .txt.gz, .jsonl.gz, .txt.zst, .jsonl.zst";

InputFile describe(const fs::path& path, const std::string& argument) {
  const auto kind = input_kind(path);
  if (!kind)
    throw Error(argument + ": " + path.string() + " is not a corpus file loom prepare reads (extensions: " +
                kExtensions + ")");
  std::error_code error;
  const auto bytes = fs::file_size(path, error);
  if (error) throw Error(path.string() + ": cannot read its size: " + error.message());
  return {path, kind->format, kind->compression, bytes};
}

std::vector<fs::path> directory_files(const fs::path& dir) {
  std::vector<fs::path> files;
  std::error_code error;
  for (fs::recursive_directory_iterator it(dir, fs::directory_options::follow_directory_symlink, error), end;
       !error && it != end; it.increment(error))
    if (it->is_regular_file() && input_kind(it->path())) files.push_back(it->path());
  if (error) throw Error(dir.string() + ": cannot list the directory: " + error.message());
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<fs::path> glob_matches(const std::string& pattern) {
  glob_t matches{};
  const int rc = ::glob(pattern.c_str(), GLOB_ERR, nullptr, &matches);
  std::vector<fs::path> files;
  if (rc == 0)
    for (size_t i = 0; i < matches.gl_pathc; ++i) files.emplace_back(matches.gl_pathv[i]);
  ::globfree(&matches);
  if (rc != 0 && rc != GLOB_NOMATCH) throw Error(pattern + ": cannot expand the pattern (a directory unreadable?)");
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

const char* format_name(InputFormat format) { return format == InputFormat::kJsonl ? "jsonl" : "text"; }

const char* compression_name(Compression compression) {
  switch (compression) {
    case Compression::kGzip: return "gzip";
    case Compression::kZstd: return "zstd";
    case Compression::kNone: break;
  }
  return "none";
}

std::optional<InputKind> input_kind(const fs::path& path) {
  std::string name = path.filename().string();
  Compression compression = Compression::kNone;
  if (ends_with(name, ".gz")) {
    compression = Compression::kGzip;
    name.resize(name.size() - 3);
  } else if (ends_with(name, ".zst")) {
    compression = Compression::kZstd;
    name.resize(name.size() - 4);
  }
  if (ends_with(name, ".jsonl")) return InputKind{InputFormat::kJsonl, compression};
  if (ends_with(name, ".txt")) return InputKind{InputFormat::kText, compression};
  return std::nullopt;
}

std::vector<InputFile> expand_inputs(const std::vector<std::string>& arguments) {
  std::vector<InputFile> inputs;
  std::set<fs::path> seen;
  for (const auto& argument : arguments) {
    std::vector<InputFile> found;
    if (fs::is_directory(argument)) {
      for (const auto& path : directory_files(argument)) found.push_back(describe(path, argument));
      if (found.empty())
        throw Error(argument + ": the directory holds no corpus file (extensions: " + kExtensions + ")");
    } else if (fs::exists(argument)) {
      found.push_back(describe(argument, argument));
    } else if (argument.find_first_of("*?[") != std::string::npos) {
      for (const auto& path : glob_matches(argument))
        if (!fs::is_directory(path)) found.push_back(describe(path, argument));
      if (found.empty()) throw Error(argument + ": no file matches the pattern");
    } else {
      throw Error(argument + ": no such file or directory");
    }
    for (auto& input : found) {
      const auto key = fs::weakly_canonical(input.path);
      if (!seen.insert(key).second)
        throw Error(argument + ": " + input.path.string() + " is already an input (named twice, or by two arguments)");
      inputs.push_back(std::move(input));
    }
  }
  LOOM_CHECK(!inputs.empty(), "loom prepare: no input files");
  return inputs;
}

}  // namespace loom
