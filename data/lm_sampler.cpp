#include "data/lm_sampler.h"

#include "core/error.h"
#include "data/splitmix.h"

namespace loom {
namespace {

// A pair file is a token file too, but its stream is not a text to model.
void check_stream(const TokenFile& file) {
  LOOM_CHECK(file.layout() == TokenLayout::kStream, file.path().string(), " holds ", layout_name(file.layout()),
             ": a language model trains on a token stream (loom tokenize without --target)");
}

}  // namespace

int64_t LmSampler::window_start(const TokenFile& file, int64_t step, int64_t index) const {
  check_stream(file);
  const int64_t positions = file.size() - seq_len_;  // valid starts: [0, size - seq_len - 1]
  LOOM_CHECK(positions > 0, file.path().string(), ": ", file.size(), " tokens are too few for data.seq_len=", seq_len_);
  const uint64_t h = splitmix64(splitmix64(splitmix64(seed_) ^ static_cast<uint64_t>(step)) ^ static_cast<uint64_t>(index));
  return static_cast<int64_t>(h % static_cast<uint64_t>(positions));
}

LmBatch LmSampler::train_batch(const TokenFile& file, int64_t step, int64_t first, int64_t count) const {
  std::vector<int64_t> starts;
  for (int64_t i = first; i < first + count; ++i) starts.push_back(window_start(file, step, i));
  return gather(file, starts);
}

LmBatch LmSampler::eval_batch(const TokenFile& file, int64_t first, int64_t count) const {
  check_stream(file);
  const int64_t windows = (file.size() - 1) / seq_len_;
  LOOM_CHECK(windows > 0, file.path().string(), ": ", file.size(), " tokens are too few for data.seq_len=", seq_len_);
  std::vector<int64_t> starts;
  for (int64_t i = first; i < first + count; ++i) starts.push_back((i % windows) * seq_len_);
  return gather(file, starts);
}

LmBatch LmSampler::gather(const TokenFile& file, const std::vector<int64_t>& starts) const {
  std::vector<torch::Tensor> rows;
  for (int64_t s : starts) rows.push_back(file.slice(s, seq_len_ + 1));
  auto windows = torch::stack(rows);  // (B, T + 1)
  using torch::indexing::Slice;
  return {windows.index({Slice(), Slice(0, seq_len_)}).contiguous(),
          windows.index({Slice(), Slice(1, seq_len_ + 1)}).contiguous()};
}

}  // namespace loom
