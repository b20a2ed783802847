// What `loom prepare` reads: its INPUT arguments (files, directories searched recursively, glob patterns)
// expanded into an ordered list of corpus files, each with its format and compression taken from its
// extension: .txt or .jsonl, either optionally followed by .gz or .zst.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace loom {

enum class InputFormat { kText, kJsonl };
enum class Compression { kNone, kGzip, kZstd };
const char* format_name(InputFormat format);            // "text", "jsonl"
const char* compression_name(Compression compression);  // "none", "gzip", "zstd"

struct InputFile {
  std::filesystem::path path;
  InputFormat format = InputFormat::kText;
  Compression compression = Compression::kNone;
  uint64_t bytes = 0;  // on disk (compressed)
};

struct InputKind {
  InputFormat format;
  Compression compression;
};
// From the file name; nothing when it is not a corpus file name.
std::optional<InputKind> input_kind(const std::filesystem::path& path);

// Each argument in order: a file as named (its extension must be a corpus one), a directory's corpus
// files recursively in sorted order (other files are left out), a glob pattern's matches in sorted
// order. Throws loom::Error naming the argument when it matches nothing, names an unknown extension,
// or a file comes twice.
std::vector<InputFile> expand_inputs(const std::vector<std::string>& arguments);

}  // namespace loom
