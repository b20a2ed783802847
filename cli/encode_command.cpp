// `loom encode` and `loom decode`: text lines on stdin <-> space-separated token ids on stdout, one
// line each, with any tokenizer loom reads. For users (what does my tokenizer do with this text?) and
// for the golden tests, which compare these ids with Hugging Face tokenizers' and tiktoken's.
#include <spdlog/spdlog.h>

#include <chrono>
#include <ctime>
#include <iostream>
#include <sstream>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/tokenizer_args.h"
#include "core/error.h"
#include "core/parse_number.h"

namespace loom::cli {
namespace {
double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}
}  // namespace

int encode_command(const Argv& argv, const ProcessGroup&) {
  const std::string usage = std::string("loom encode ") + kTokenizerUsage +
                            " [--add-special-tokens] [--no-special-in-text] [--info] [--stats] < TEXT";
  const auto args =
      parse_args(argv, tokenizer_options(), {"add-special-tokens", "no-special-in-text", "info", "stats"}, 0, usage);
  const auto tokenizer = tokenizer_from_args(args, usage);
  if (args.flag("info")) {
    const auto role = [](std::optional<int32_t> id) { return id ? std::to_string(*id) : std::string("none"); };
    std::cout << "type " << tokenizer->type_name() << "\nvocab_size " << tokenizer->vocab_size() << "\nchecksum "
              << tokenizer->checksum() << "\nbos " << role(tokenizer->bos_id()) << "\neos " << role(tokenizer->eos_id())
              << "\npad " << role(tokenizer->pad_id()) << "\nspecial_tokens " << tokenizer->special_tokens().size()
              << std::endl;
    return 0;
  }
  EncodeOptions options;
  options.add_special_tokens = args.flag("add-special-tokens");
  options.special_in_text = !args.flag("no-special-in-text");
  // --stats: reads all of stdin first and times encode() alone over it (not reading, printing or loading), in
  // wall-clock and CPU seconds (on a shared machine the CPU rate varies less), for scripts/bench_tokenizer.sh.
  // Without it each line is printed as soon as it is read.
  const bool stats = args.flag("stats");
  std::vector<std::string> lines;
  std::vector<int32_t> ids;
  std::vector<size_t> ends;  // ends[i]: the end of line i's ids in `ids`
  double seconds = 0, cpu_seconds = 0;
  int64_t bytes = 0, line_count = 0, tokens = 0;
  const auto encode_and_print = [&] {
    ids.clear(), ends.clear();
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = thread_cpu_seconds();
    for (const auto& line : lines) tokenizer->encode_to(line, ids, options), ends.push_back(ids.size());
    cpu_seconds += thread_cpu_seconds() - cpu_start;
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    tokens += static_cast<int64_t>(ids.size());
    std::string out;
    for (size_t i = 0, first = 0; i < lines.size(); first = ends[i++]) {
      bytes += static_cast<int64_t>(lines[i].size()) + 1, ++line_count;
      for (size_t k = first; k < ends[i]; ++k) out += (k > first ? " " : "") + std::to_string(ids[k]);
      out += '\n';
    }
    std::cout.write(out.data(), static_cast<std::streamsize>(out.size()));
    lines.clear();
  };
  for (std::string line; std::getline(std::cin, line);) {
    lines.push_back(std::move(line));
    if (!stats) encode_and_print();
  }
  encode_and_print();
  std::cout.flush();
  if (stats)
    spdlog::info("encoded {} lines, {} bytes -> {} tokens in {:.3f} s of encode ({:.3f} s CPU): {:.2f} MB/s, "
                 "{:.2f} MB/s CPU",
                 line_count, bytes, tokens, seconds, cpu_seconds, seconds > 0 ? bytes / seconds / 1e6 : 0.0,
                 cpu_seconds > 0 ? bytes / cpu_seconds / 1e6 : 0.0);
  return 0;
}

int decode_command(const Argv& argv, const ProcessGroup&) {
  const std::string usage = std::string("loom decode ") + kTokenizerUsage + " < IDS";
  const auto args = parse_args(argv, tokenizer_options(), {}, 0, usage);
  const auto tokenizer = tokenizer_from_args(args, usage);
  size_t number = 0;
  for (std::string line; std::getline(std::cin, line);) {
    ++number;
    std::istringstream words(line);
    std::vector<int32_t> ids;
    for (std::string word; words >> word;) {
      const int64_t id = parse_int64(word).value_or(-1);
      if (id < 0 || id >= tokenizer->vocab_size())
        throw ConfigError("stdin line " + std::to_string(number) + ": '" + word + "' is not a token id in [0, " +
                          std::to_string(tokenizer->vocab_size()) + ")");
      ids.push_back(static_cast<int32_t>(id));
    }
    std::cout << tokenizer->decode(ids) << '\n';
  }
  std::cout.flush();
  return 0;
}

}  // namespace loom::cli
