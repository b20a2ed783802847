// Where the Trainer's language-model batches come from: a token file through the deterministic
// LmSampler (training), or synthetic uniform random tokens (`loom bench`, which needs no data and must
// measure exactly the step `loom train` runs). Both are pure functions of (seed, step, sequence index),
// so the Trainer never cares which one it has.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <memory>

#include "data/lm_sampler.h"
#include "data/token_file.h"

namespace loom {

class LmBatches {
 public:
  virtual ~LmBatches() = default;
  // Sequences [first, first + count) of the global batch of `step`.
  virtual LmBatch train_batch(int64_t step, int64_t first, int64_t count) const = 0;
};

// Windows of a token file, placed by the LmSampler.
class TokenFileBatches : public LmBatches {
 public:
  TokenFileBatches(const TokenFile& file, LmSampler sampler) : file_(file), sampler_(sampler) {}
  LmBatch train_batch(int64_t step, int64_t first, int64_t count) const override {
    return sampler_.train_batch(file_, step, first, count);
  }

 private:
  const TokenFile& file_;
  LmSampler sampler_;
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
