// Where the Trainer's language-model batches come from: token files or prepared directories, one or a
// weighted mixture, through the deterministic LmSampler (data/corpus/lm_mixture.h), or synthetic uniform random
// tokens (`loom bench`, which needs no data and must measure exactly the step `loom train` runs). Both are
// pure functions of (seed, step, sequence index), so the LM task never cares which one it has.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/corpus/lm_sampler.h"

namespace loom {

class LmBatches {
 public:
  virtual ~LmBatches() = default;
  // Sequences [first, first + count) of the global batch of `step`.
  virtual LmBatch train_batch(int64_t step, int64_t first, int64_t count) const = 0;
  // A mixture's sources (empty when the data is one source), and per source the tokens of the whole
  // global batch of `step` (metrics.jsonl's tokens_by_source).
  virtual std::vector<std::string> source_names() const { return {}; }
  virtual std::vector<int64_t> source_tokens(int64_t) const { return {}; }
};

// Uniform random tokens in [0, vocab_size): sequence i of step s depends only on (seed, s, i).
class SyntheticBatches : public LmBatches {
 public:
  SyntheticBatches(uint64_t seed, int64_t seq_len, int64_t vocab_size);
  LmBatch train_batch(int64_t step, int64_t first, int64_t count) const override;

 private:
  uint64_t seed_;
  int64_t seq_len_;
  int64_t vocab_size_;
};

}  // namespace loom
