#include <spdlog/spdlog.h>

#include <fstream>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "data/token_file.h"
#include "data/tokenizer.h"

namespace loom::cli {

int tokenize_command(const Argv& argv, const ProcessGroup&) {
  const auto args =
      parse_args(argv, {"tokenizer", "out"}, {}, 1, "loom tokenize --tokenizer MODEL --out FILE.bin TEXT_FILE");
  const auto model = args.option("tokenizer");
  const auto out = args.option("out");
  if (!model || !out) throw ConfigError("loom tokenize needs --tokenizer MODEL and --out FILE.bin");
  const Tokenizer tokenizer(*model);
  std::ifstream in(args.positional[0]);
  LOOM_CHECK(in, args.positional[0], ": cannot open the text file");
  // One line per document (a verse); EOS ends each, so the model learns where a line stops.
  std::vector<int32_t> tokens;
  int64_t lines = 0;
  for (std::string line; std::getline(in, line); ++lines) {
    const auto ids = tokenizer.encode(line);
    tokens.insert(tokens.end(), ids.begin(), ids.end());
    tokens.push_back(tokenizer.eos_id());
  }
  write_token_file(*out, tokens, tokenizer.vocab_size(), tokenizer.checksum());
  spdlog::info("{}: {} lines -> {} tokens in {}", args.positional[0], lines, tokens.size(), *out);
  return 0;
}

}  // namespace loom::cli
