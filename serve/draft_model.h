// The draft model of speculative decoding (serve/drafter.h, `--draft RUN_DIR`): a smaller GPT with the target's
// vocabulary proposes k tokens a step, each sampled with the sequence's own generator from the draft's
// distribution q after the request's temperature / top-k / top-p (greedy: its argmax). It keeps its keys and
// values in a paged cache of its own (models/paged_kv_cache.h: its own KVBlockPool, a BlockTable per sequence).
// Each propose() first trims a sequence's cache to the tokens the target accepted (the longest common prefix of
// what it fed and the sequence's tokens: rejected drafts go, their blocks back to the pool), feeds the tokens it
// has not seen in one forward (the whole prompt on the first step; rows with as many new tokens share it), then
// decodes the k - 1 further proposals over the batch. A sequence whose draft cannot get blocks gets no draft
// (the target then decodes it alone) and its draft cache is dropped.
#pragma once
#include <map>
#include <memory>

#include "models/gpt.h"
#include "models/paged_kv_cache.h"
#include "serve/drafter.h"

namespace loom {

class DraftModelDrafter final : public Drafter {
 public:
  // blocks of block_size positions for the draft's pool (its layers and heads size each block).
  DraftModelDrafter(Gpt draft, int64_t blocks, int64_t block_size);
  // Throws loom::Error unless the draft can propose for the target: the same vocabulary size and a context no
  // shorter than the target's (what it names for the user: draft_name, target_name).
  static void check_compatible(const ModelConfig& draft, const ModelConfig& target, const std::string& draft_name,
                               const std::string& target_name);

  std::vector<Draft> propose(const std::vector<DraftRow>& rows, int64_t k) override;
  void release(int64_t id) override;
  const char* name() const override { return "draft model"; }
  const KVBlockPool& pool() const { return *pool_; }

 private:
  struct State {
    BlockTable table;
    std::vector<int64_t> fed;  // the tokens whose keys and values the table holds
  };
  Gpt model_;
  std::unique_ptr<KVBlockPool> pool_;
  std::map<int64_t, State> states_;
};

// Gives positions [length, table.length) of table back: its length becomes `length` and the blocks past it
// return to the pool (the rollback of rejected speculative positions).
void truncate_table(KVBlockPool& pool, BlockTable& table, int64_t length);

}  // namespace loom
