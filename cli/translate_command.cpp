// `loom translate RUN_DIR [--beam N] [--step S] [--set decode.*=...]`: source lines on stdin, their
// translations on stdout, one line each and in order. Lines are tokenized with the run's tokenizer.model
// and translations detokenized with it; a run without a tokenizer (the synthetic tasks) reads and writes
// token ids separated by spaces. Sources are decoded decode.batch_size at a time, sorted by length so
// that a batch pads little. An empty line translates to an empty line.
#include <algorithm>
#include <iostream>
#include <numeric>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/tokenizer_args.h"
#include "core/error.h"
#include "data/tokenizers/tokenizer.h"
#include "models/beam_search.h"
#include "train/inference.h"
#include "train/translation_eval.h"

namespace loom::cli {

int translate_command(const Argv& argv, const ProcessGroup&) {
  const auto args = parse_args(argv, {"beam", "step"}, {"no-cache"}, 1,
                               "loom translate RUN_DIR [--beam N] [--step S] [--set decode.key=value ...] < source.txt");
  for (const auto& s : args.sets)
    if (s.rfind("decode.", 0) != 0) throw ConfigError("--set " + s + ": loom translate takes decode.* keys only");
  std::optional<int64_t> step;
  if (args.option("step")) step = args.int_option("step", 0);
  const auto loaded = load_trained_model(args.positional[0], step);
  auto model = loaded.as<EncoderDecoder>();
  LOOM_CHECK(model, args.positional[0], " is a model.arch=", enum_name(loaded.config.model.arch),
             " run; loom translate needs a model.arch=transformer run (loom generate samples a GPT)");
  // --beam N is decode.beam=N, validated (and bounded) with the other keys.
  auto sets = args.sets;
  if (const auto beam = args.option("beam")) sets.push_back("decode.beam=" + *beam);
  const Config config = parse_config(to_yaml(loaded.config), args.positional[0] + "/config.yaml", sets);
  BeamOptions options = beam_options(config.decode);
  options.use_cache = !args.flag("no-cache");

  std::unique_ptr<Tokenizer> tokenizer;
  if (!config.tokenizer.model.empty()) tokenizer = load_tokenizer(config.tokenizer);
  std::vector<std::vector<int64_t>> sources;
  for (std::string line; std::getline(std::cin, line);) {
    if (tokenizer) {
      const auto ids = tokenizer->encode(line);
      sources.emplace_back(ids.begin(), ids.end());
    } else {
      sources.push_back(
          parse_token_ids(line, "stdin line " + std::to_string(sources.size() + 1), config.model.vocab_size));
    }
    if (static_cast<int64_t>(sources.back().size()) > config.model.max_seq_len)
      throw ConfigError("stdin line " + std::to_string(sources.size()) + ": the source has " +
                        std::to_string(sources.back().size()) + " tokens, more than model.max_seq_len=" +
                        std::to_string(config.model.max_seq_len) + " of this model: split it into shorter lines");
  }
  // Longest first, so that the first batch shows at once whether memory suffices.
  std::vector<size_t> order(sources.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return sources[a].size() > sources[b].size(); });
  std::vector<std::vector<int64_t>> translations(sources.size());
  const auto batch_size = static_cast<size_t>(config.decode.batch_size);
  for (size_t first = 0; first < order.size(); first += batch_size) {
    std::vector<std::vector<int64_t>> batch;
    for (size_t i = first; i < std::min(order.size(), first + batch_size); ++i) batch.push_back(sources[order[i]]);
    const auto found = translate(model, batch, options);
    for (size_t i = 0; i < found.size(); ++i) translations[order[first + i]] = found[i].tokens;
  }
  for (const auto& ids : translations) std::cout << translation_text(ids, tokenizer.get()) << '\n';
  std::cout.flush();
  return 0;
}

}  // namespace loom::cli
