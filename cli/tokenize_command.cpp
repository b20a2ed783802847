// `loom tokenize`: text -> token file. One line per document (a verse), each ended by EOS; with
// --target, line i of TEXT_FILE and of the target file form translation pair i (data/pairs/pair_file.h).
#include <spdlog/spdlog.h>

#include <fstream>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/tokenizer_args.h"
#include "core/error.h"
#include "data/pairs/pair_file.h"
#include "data/pairs/seq2seq_batch.h"
#include "data/corpus/token_file.h"

namespace loom::cli {
namespace {

std::vector<std::vector<int32_t>> encode_lines(const Tokenizer& tokenizer, const std::string& path) {
  std::ifstream in(path);
  LOOM_CHECK(in, path, ": cannot open the text file");
  std::vector<std::vector<int32_t>> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(tokenizer.encode(line));
  return lines;
}

void write_pairs(const Tokenizer& tokenizer, const std::string& source_path, const std::string& target_path,
                 const std::string& out) {
  // The encoder-decoder starts every target with id 1 and ends it with id 2 (data/pairs/seq2seq_batch.h).
  const auto id_text = [](std::optional<int32_t> id) { return id ? std::to_string(*id) : std::string("none"); };
  LOOM_CHECK(tokenizer.bos_id() == kBosId && tokenizer.eos_id() == kEosId, "the tokenizer has bos id ",
             id_text(tokenizer.bos_id()), " and eos id ", id_text(tokenizer.eos_id()),
             "; translation pairs need sentencepiece's defaults ", kBosId, " and ", kEosId,
             " (spm_train without --bos_id/--eos_id)");
  const auto sources = encode_lines(tokenizer, source_path);
  const auto targets = encode_lines(tokenizer, target_path);
  LOOM_CHECK(sources.size() == targets.size(), source_path, " has ", sources.size(), " lines but ", target_path,
             " has ", targets.size(), ": line i of each must be the two sides of pair i");
  for (size_t i = 0; i < sources.size(); ++i)
    LOOM_CHECK(!sources[i].empty() && !targets[i].empty(), "line ", i + 1, " of ",
               sources[i].empty() ? source_path : target_path, " is empty: drop empty pairs before tokenizing");
  write_pair_file(out, sources, targets, tokenizer.vocab_size(), tokenizer.checksum());
  size_t source_tokens = 0, target_tokens = 0;
  for (size_t i = 0; i < sources.size(); ++i) source_tokens += sources[i].size(), target_tokens += targets[i].size();
  spdlog::info("{} + {}: {} pairs -> {} source + {} target tokens in {}", source_path, target_path, sources.size(),
               source_tokens, target_tokens, out);
}

}  // namespace

int tokenize_command(const Argv& argv, const ProcessGroup&) {
  const std::string usage =
      std::string("loom tokenize ") + kTokenizerUsage + " --out FILE.bin [--target TARGET_TEXT] TEXT_FILE";
  auto options = tokenizer_options();
  options.insert({"out", "target"});
  const auto args = parse_args(argv, options, {}, 1, usage);
  const auto out = args.option("out");
  if (!out) throw ConfigError("--out FILE.bin is required\nusage: " + usage);
  const auto loaded = tokenizer_from_args(args, usage);
  const Tokenizer& tokenizer = *loaded;
  if (const auto target = args.option("target")) {
    write_pairs(tokenizer, args.positional[0], *target, *out);
    return 0;
  }
  // One line per document (a verse); EOS ends each, so the model learns where a line stops.
  const int32_t eos = tokenizer.require_eos();
  std::vector<int32_t> tokens;
  int64_t lines = 0;
  for (const auto& ids : encode_lines(tokenizer, args.positional[0])) {
    tokens.insert(tokens.end(), ids.begin(), ids.end());
    tokens.push_back(eos);
    ++lines;
  }
  write_token_file(*out, tokens, tokenizer.vocab_size(), tokenizer.checksum());
  spdlog::info("{}: {} lines -> {} tokens in {}", args.positional[0], lines, tokens.size(), *out);
  return 0;
}

}  // namespace loom::cli
