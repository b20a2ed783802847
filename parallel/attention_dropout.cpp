#include "parallel/attention_dropout.h"

#include <ATen/Parallel.h>

#include <cmath>
#include <vector>

#include "core/error.h"

namespace loom {
namespace {

// The hash: a 32-bit integer mix (two multiply-xorshift rounds). As tensor ops on int64 values in [0, 2^32)
// (a product with the multiplier, < 2^27, stays below 2^59) and on uint32 scalars (wrapping), alike.
constexpr int64_t kLow32 = 0xffffffffLL;
constexpr uint32_t kMultiplier = 0x45d9f3bU;
constexpr int64_t kKeyOffset = 0x9e3779b9LL;  // keys hash apart from queries at the same position

torch::Tensor mix32(torch::Tensor x) {
  for (int round = 0; round < 2; ++round) {
    x = torch::bitwise_xor(x, torch::bitwise_right_shift(x, 16));
    x.mul_(static_cast<int64_t>(kMultiplier)).bitwise_and_(kLow32);
  }
  return torch::bitwise_xor(x, torch::bitwise_right_shift(x, 16));
}

inline uint32_t mix32(uint32_t x) {
  for (int round = 0; round < 2; ++round) {
    x ^= x >> 16;
    x *= kMultiplier;
  }
  return x ^ (x >> 16);
}

// The pair's hash is mix32(row ^ key): row (B * H * Lq) hashes (seed, batch row, head) then the query
// position, key (Lk) the key position, both as int64 in [0, 2^32).
struct Hashes {
  torch::Tensor rows, keys;
};
Hashes hashes(int64_t seed, int64_t B, int64_t H, const torch::Tensor& query_positions,
              const torch::Tensor& key_positions) {
  LOOM_CHECK(seed >= 0 && seed <= kLow32, "attention dropout seed ", seed, " is not in [0, 2^32)");
  const auto longs = query_positions.options().dtype(torch::kLong);
  const int64_t Lq = query_positions.numel(), Lk = key_positions.numel();
  const auto heads = mix32(torch::bitwise_xor(mix32(torch::arange(B * H, longs)), seed)).view({B * H, 1});
  const auto rows = mix32(torch::bitwise_xor(heads, mix32(query_positions.to(torch::kLong)).view({1, Lq})));
  const auto keys = mix32(key_positions.to(torch::kLong).add(kKeyOffset).bitwise_and_(kLow32));
  return {rows.reshape({B * H * Lq}), keys.reshape({Lk})};
}

// Pairs whose hash is at least this are kept: a fraction 1 - p of the 2^32 values.
int64_t keep_threshold(double p) {
  LOOM_CHECK(p >= 0 && p < 1, "attention dropout probability ", p, " is not in [0, 1)");
  return static_cast<int64_t>(std::llround(p * 4294967296.0));
}

}  // namespace

namespace detail {
torch::Tensor attention_dropout_scale_by_tensor_ops(int64_t seed, double p, int64_t B, int64_t H,
                                                    const torch::Tensor& query_positions,
                                                    const torch::Tensor& key_positions) {
  const int64_t threshold = keep_threshold(p);
  const auto h = hashes(seed, B, H, query_positions, key_positions);
  const auto bits = mix32(torch::bitwise_xor(h.rows.view({-1, 1}), h.keys.view({1, -1})));
  const auto kept = (bits >= threshold).to(torch::kFloat).mul_(1.0 / (1.0 - p));
  return kept.view({B, H, query_positions.numel(), key_positions.numel()});
}
}  // namespace detail

torch::Tensor attention_dropout_scale(int64_t seed, double p, int64_t B, int64_t H, const torch::Tensor& query_positions,
                                      const torch::Tensor& key_positions) {
  if (!query_positions.device().is_cpu())
    return detail::attention_dropout_scale_by_tensor_ops(seed, p, B, H, query_positions, key_positions);
  const auto threshold = static_cast<uint64_t>(keep_threshold(p));
  const auto h = hashes(seed, B, H, query_positions, key_positions);
  const auto rows = h.rows.contiguous(), keys = h.keys.contiguous();
  const int64_t Lq = query_positions.numel(), Lk = key_positions.numel(), n_rows = rows.numel();
  std::vector<uint32_t> key_hash(keys.data_ptr<int64_t>(), keys.data_ptr<int64_t>() + Lk);  // each < 2^32
  auto out = torch::empty({B, H, Lq, Lk}, torch::kFloat);
  const float scale = static_cast<float>(1.0 / (1.0 - p));
  const auto* row_hash = rows.data_ptr<int64_t>();
  float* o = out.data_ptr<float>();
  at::parallel_for(0, n_rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(Lk, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const auto row = static_cast<uint32_t>(row_hash[r]);
      float* out_row = o + r * Lk;
      for (int64_t j = 0; j < Lk; ++j) out_row[j] = mix32(row ^ key_hash[static_cast<size_t>(j)]) >= threshold ? scale : 0.0f;
    }
  });
  return out;
}

int64_t draw_attention_dropout_seed(const torch::Device& device) {
  return torch::randint(0, int64_t{1} << 31, {1}, torch::TensorOptions().dtype(torch::kLong).device(device))
      .item<int64_t>();
}

}  // namespace loom
