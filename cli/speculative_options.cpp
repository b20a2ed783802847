#include "cli/speculative_options.h"

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "serve/draft_broadcast.h"
#include "serve/draft_model.h"
#include "serve/drafter.h"

namespace loom::cli {
namespace {

std::string spec_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError("cannot read the tokenizer " + path);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

}  // namespace

const std::set<std::string> kSpeculativeOptions{"draft", "speculate", "speculate-k", "ngram-max", "ngram-min"};
const char* const kSpeculativeUsage =
    "[--draft RUN_DIR | --speculate ngram [--ngram-max N] [--ngram-min N]] [--speculate-k K] [--speculate-adaptive]";

std::set<std::string> with_speculative_options(std::set<std::string> value_options) {
  value_options.insert(kSpeculativeOptions.begin(), kSpeculativeOptions.end());
  return value_options;
}

std::set<std::string> with_speculative_flags(std::set<std::string> flag_options) {
  flag_options.insert("speculate-adaptive");
  return flag_options;
}

std::string configure_speculation(const Args& args, const LoadedModel& target, const std::string& target_dir,
                                  EngineOptions& options) {
  const auto draft_dir = args.option("draft");
  const std::string kind = args.option_or("speculate", draft_dir ? "draft" : "");
  if (kind.empty()) {
    for (const char* name : {"speculate-k", "ngram-max", "ngram-min"})
      if (args.option(name)) throw ConfigError(std::string("--") + name + " needs --draft RUN_DIR or --speculate ngram");
    if (args.flag("speculate-adaptive"))
      throw ConfigError("--speculate-adaptive needs --draft RUN_DIR or --speculate ngram");
    return "";
  }
  options.speculate_k = args.int_option("speculate-k", 4, 1, 64);
  options.adaptive_k = args.flag("speculate-adaptive");
  const std::string k_text = (options.adaptive_k ? "k adaptive in 1.." : "k=") + std::to_string(options.speculate_k);
  if (kind == "ngram") {
    if (draft_dir) throw ConfigError("--speculate ngram drafts without a model: give it or --draft RUN_DIR, not both");
    const int64_t most = args.int_option("ngram-max", 3, 1, 64);
    const int64_t least = args.int_option("ngram-min", 1, 1, most);
    options.drafter = std::make_shared<NgramDrafter>(most, least);
    return "speculative decoding: n-gram prompt lookup (n " + std::to_string(most) + ".." + std::to_string(least) +
           "), " + k_text;
  }
  if (kind != "draft") throw ConfigError("--speculate " + kind + ": expected ngram (or --draft RUN_DIR)");
  if (!draft_dir) throw ConfigError("--speculate draft needs --draft RUN_DIR");
  for (const char* name : {"ngram-max", "ngram-min"})
    if (args.option(name)) throw ConfigError(std::string("--") + name + " is for --speculate ngram, not --draft");
  const auto loaded = load_trained_model(*draft_dir);
  auto draft = loaded.as<Gpt>();
  if (!draft)
    throw ConfigError("--draft " + *draft_dir + " is a model.arch=" + enum_name(loaded.config.model.arch) +
                      " run: a draft is a decoder-only (GPT-family) model");
  auto gpt = target.as<Gpt>();
  const auto& mine = target.config.tokenizer;
  const auto& theirs = loaded.config.tokenizer;
  if (theirs.model.empty() || mine.type != theirs.type || mine.pattern != theirs.pattern ||
      (mine.model != theirs.model && spec_file_bytes(mine.model) != spec_file_bytes(theirs.model)))
    throw ConfigError("--draft " + *draft_dir + " was trained with tokenizer.model '" + theirs.model + "', not " +
                      target_dir + "'s '" + mine.model + "': a draft must use the target's tokenizer");
  DraftModelDrafter::check_compatible(draft->config(), gpt->config(), *draft_dir, target_dir);
  LOOM_CHECK(draft->parameters().front().device() == gpt->parameters().front().device(), "--draft ", *draft_dir,
             " runs on ", draft->parameters().front().device(), " but the target on ",
             gpt->parameters().front().device(), ": give both runs the same runtime.device");
  const auto& c = draft->config();
  const int64_t per_block = KVBlockPool::block_bytes(draft->n_blocks(), options.block_size, c.kv_heads(),
                                                     c.head_dim(), draft->parameters().front().scalar_type());
  const int64_t needed = (c.max_seq_len + options.speculate_k + options.block_size - 1) / options.block_size;
  const int64_t blocks = std::max(needed, options.kv_bytes / per_block);
  // Under TP every rank verifies rank 0's logits, so the ranks agree as long as they propose alike: n-gram lookup
  // does (a function of the tokens); a draft model runs whole on rank 0, which broadcasts its proposals
  // (serve/draft_broadcast.h). Every rank loaded and checked it above (a refusal is every rank's); the others drop it.
  auto* tp = gpt->tp_group();
  if (tp != nullptr && tp->size() > 1) {
    const auto device = gpt->parameters().front().device();
    options.drafter = std::make_shared<BroadcastDrafter>(
        tp->rank() == 0 ? std::make_shared<DraftModelDrafter>(draft, blocks, options.block_size) : nullptr, *tp,
        device);
  } else {
    options.drafter = std::make_shared<DraftModelDrafter>(draft, blocks, options.block_size);
  }
  return "speculative decoding: draft model " + *draft_dir + " (" + std::to_string(draft->n_blocks()) + " layers, " +
         std::to_string(blocks) + " KV blocks" +
         (tp != nullptr && tp->size() > 1 ? ", on rank 0, its proposals broadcast" : "") + "), " + k_text;
}

}  // namespace loom::cli
