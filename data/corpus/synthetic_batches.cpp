// SyntheticBatches (declared in lm_batches.h): random token windows for benchmarks.
#include "core/error.h"
#include "data/corpus/lm_batches.h"
#include "data/corpus/splitmix.h"

namespace loom {
namespace {

// The SplitMix64 stream: hash of the state, then advance it.
uint64_t next_random(uint64_t& state) {
  const uint64_t value = splitmix64(state);
  state += kSplitMixIncrement;
  return value;
}

}  // namespace

SyntheticBatches::SyntheticBatches(uint64_t seed, int64_t seq_len, int64_t vocab_size)
    : seed_(seed), seq_len_(seq_len), vocab_size_(vocab_size) {
  LOOM_CHECK(vocab_size > 0, "synthetic batches need model.vocab_size > 0");
}

LmBatch SyntheticBatches::train_batch(int64_t step, int64_t first, int64_t count) const {
  auto windows = torch::empty({count, seq_len_ + 1}, torch::kLong);  // (B, T + 1)
  auto* out = windows.data_ptr<int64_t>();
  for (int64_t i = 0; i < count; ++i) {
    uint64_t state = seed_ ^ (static_cast<uint64_t>(step) << 32) ^ static_cast<uint64_t>(first + i) * 0xD1B54A32D192ED03ull;
    next_random(state);
    for (int64_t t = 0; t <= seq_len_; ++t)
      out[i * (seq_len_ + 1) + t] = static_cast<int64_t>(next_random(state) % static_cast<uint64_t>(vocab_size_));
  }
  using torch::indexing::Slice;
  LmBatch batch;
  batch.inputs = windows.index({Slice(), Slice(0, seq_len_)}).contiguous();
  batch.targets = windows.index({Slice(), Slice(1, seq_len_ + 1)}).contiguous();
  return batch;
}

}  // namespace loom
