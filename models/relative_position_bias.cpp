#include "models/relative_position_bias.h"

#include <cmath>

#include "core/error.h"

namespace loom {

torch::Tensor relative_position_buckets(const torch::Tensor& relative, bool bidirectional, int64_t buckets,
                                        int64_t max_distance) {
  auto out = torch::zeros_like(relative);
  torch::Tensor distance;  // >= 0
  if (bidirectional) {
    buckets /= 2;
    out = out + (relative > 0).to(torch::kLong) * buckets;  // keys after the query: the upper half
    distance = relative.abs();
  } else {
    distance = -torch::clamp_max(relative, 0);  // keys after the query (masked anyway) share bucket 0
  }
  const int64_t exact = buckets / 2;
  // Computed in float as Hugging Face does (log of distance / exact, truncated), so the buckets are its own.
  const auto large = exact + (torch::log(distance.to(torch::kFloat) / static_cast<double>(exact)) /
                              std::log(static_cast<double>(max_distance) / static_cast<double>(exact)) *
                              static_cast<double>(buckets - exact))
                                 .to(torch::kLong);
  const auto capped = torch::clamp_max(large, buckets - 1);
  return out + torch::where(distance < exact, distance, capped);
}

RelativePositionBiasImpl::RelativePositionBiasImpl(const RelativePositionBiasOptions& options) : options_(options) {
  LOOM_CHECK(options.n_heads % options.tp.size() == 0, "the tensor-parallel size ", options.tp.size(),
             " must divide n_heads=", options.n_heads);
  auto full = torch::empty({options.buckets, options.n_heads});
  torch::nn::init::normal_(full, 0.0, options.init_std);  // the whole table's draws, then this rank's heads
  weight = register_parameter(
      "weight", take_shard(full, {1, {options.n_heads}}, options.tp.size(), options.tp.rank()));
}

torch::Tensor RelativePositionBiasImpl::forward(int64_t first, int64_t T, int64_t key_first, int64_t S) {
  const auto longs = torch::TensorOptions().dtype(torch::kLong).device(weight.device());
  const auto queries = torch::arange(first, first + T, longs).unsqueeze(1);  // (T, 1)
  const auto keys = torch::arange(key_first, key_first + S, longs).unsqueeze(0);  // (1, S)
  const auto buckets =
      relative_position_buckets(keys - queries, options_.bidirectional, options_.buckets, options_.max_distance);
  // (T, S, H_r) -> (1, H_r, T, S)
  return torch::embedding(weight, buckets).permute({2, 0, 1}).unsqueeze(0);
}

}  // namespace loom
