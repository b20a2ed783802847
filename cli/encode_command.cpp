// `loom encode` and `loom decode`: text lines on stdin <-> space-separated token ids on stdout, one
// line each, with any tokenizer loom reads. For users (what does my tokenizer do with this text?) and
// for the golden tests, which compare these ids with Hugging Face tokenizers' and tiktoken's.
#include <spdlog/spdlog.h>

#include <chrono>
#include <iostream>
#include <sstream>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/tokenizer_args.h"
#include "core/error.h"
#include "core/parse_number.h"

namespace loom::cli {
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
  std::string out;
  // --stats: the time spent in encode() alone (not reading, printing or loading), for scripts/bench_tokenizer.sh.
  double seconds = 0;
  int64_t bytes = 0, lines = 0, tokens = 0;
  std::vector<int32_t> ids;
  for (std::string line; std::getline(std::cin, line);) {
    out.clear();
    ids.clear();
    const auto start = std::chrono::steady_clock::now();
    tokenizer->encode_to(line, ids, options);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    bytes += static_cast<int64_t>(line.size()) + 1, tokens += static_cast<int64_t>(ids.size()), ++lines;
    for (int32_t id : ids) {
      if (!out.empty()) out += ' ';
      out += std::to_string(id);
    }
    out += '\n';
    std::cout.write(out.data(), static_cast<std::streamsize>(out.size()));
  }
  std::cout.flush();
  if (args.flag("stats"))
    spdlog::info("encoded {} lines, {} bytes -> {} tokens in {:.3f} s of encode: {:.2f} MB/s", lines, bytes, tokens,
                 seconds, seconds > 0 ? bytes / seconds / 1e6 : 0.0);
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
