// Paged attention (models/paged_decode_attention.h): the kernel that reads each sequence's keys and values through
// its slots in the pool, against attention computed in double from the gathered keys (ragged rows, one query a row
// (decoding) or several (prefill chunks, speculative verification: causal, more than one tile of queries),
// grouped-query heads, a window, ALiBi; float and bf16 pools, the portable and the AVX-512 build), and the paged
// cache's append_and_attend against its own gather (append, key_padding) with SDPA, decode steps and chunks that
// start at several offsets and cross blocks: the same outputs and the same pool contents after.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>

#include "core/cpu_kernels.h"
#include "models/paged_decode_attention.h"
#include "models/paged_kv_cache.h"
#include "models/positions.h"

namespace {

// Attention of row b's T queries (H, T, D) to the row's keys and values at its slots, in double: query t is at
// the row's key n - T + t and sees the keys up to it (the last `window` with window > 0);
// softmax(q.k * scale - slope * distance) v.
torch::Tensor reference_attention(const torch::Tensor& q, const torch::Tensor& keys, const torch::Tensor& values,
                                  const std::vector<int64_t>& slots, const std::vector<int64_t>& offsets,
                                  double scale, const torch::Tensor& slopes, int64_t window) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3), K = keys.size(1);
  auto out = torch::zeros({B, H, T, D}, torch::kDouble);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = offsets[b + 1] - offsets[b];
    const auto index = torch::tensor(std::vector<int64_t>(slots.begin() + offsets[b], slots.begin() + offsets[b + 1]));
    // (n, K, D) -> (H, n, D): each query head reads its group's kv head
    const auto k = keys.index_select(0, index).to(torch::kDouble).repeat_interleave(H / K, 1).transpose(0, 1);
    const auto v = values.index_select(0, index).to(torch::kDouble).repeat_interleave(H / K, 1).transpose(0, 1);
    auto scores = torch::matmul(q[b].to(torch::kDouble), k.transpose(1, 2)) * scale;  // (H, T, n)
    // query t's distance to key j
    const auto distance = (torch::arange(n - T, n, torch::kDouble).view({T, 1}) -
                           torch::arange(n, torch::kDouble).view({1, n}));
    if (slopes.defined()) scores = scores - slopes.to(torch::kDouble).view({H, 1, 1}) * distance.unsqueeze(0);
    auto hidden = distance < 0;
    if (window > 0) hidden = hidden | (distance >= window);
    scores = scores.masked_fill(hidden.unsqueeze(0), -std::numeric_limits<double>::infinity());
    out[b] = torch::matmul(torch::softmax(scores, -1), v);
  }
  return out;
}

}  // namespace

TEST_CASE("paged decode attention: the kernel against attention in double over the gathered keys", "[models][serve]") {
  torch::NoGradGuard no_grad;
  const auto pool_dtype = GENERATE(torch::kFloat, torch::kBFloat16);
  const bool alibi = GENERATE(false, true);
  const int64_t window = GENERATE(0, 6);
  const int64_t D = GENERATE(16, 24);  // 24: a row that does not fill the last vector
  const int64_t T = GENERATE(1, 5, 19);  // decoding; a verification; a chunk of two query tiles
  const int64_t H = 6, K = 2, N = 320, B = 5;
  INFO("pool " << c10::toString(pool_dtype) << ", alibi " << alibi << ", window " << window << ", D " << D << ", T "
               << T);
  torch::manual_seed(3);
  const auto keys = torch::randn({N, K, D}).to(pool_dtype), values = torch::randn({N, K, D}).to(pool_dtype);
  const auto q = torch::randn({B, H, T, D});
  // Ragged rows of T to T + 39 positions at scattered slots (a row's blocks anywhere in the pool); a window keeps
  // the last 6 before each query.
  std::mt19937 rng(5);
  std::vector<int64_t> all(N);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  const std::vector<int64_t> lengths{1, 7, 40, 16, 3};
  std::vector<int64_t> slots, offsets{0};
  int64_t next = 0;
  for (int64_t history : lengths) {
    const int64_t length = history + T - 1;
    const int64_t seen = window > 0 ? std::min(length, window + T - 1) : length;
    for (int64_t j = 0; j < seen; ++j) slots.push_back(all[static_cast<size_t>(next++)]);
    next += length - seen;
    offsets.push_back(static_cast<int64_t>(slots.size()));
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const auto slopes = alibi ? loom::alibi_slopes(H) : torch::Tensor();
  const auto expected = reference_attention(q, keys, values, slots, offsets, scale, slopes, window);
  for (const bool portable : {true, false}) {
    if (!portable && !loom::cpu_has_avx512()) continue;  // the AVX-512 build needs the CPU's instructions
    INFO("portable build " << portable);
    const auto got = loom::paged_decode_attention(q, keys, values, slots, offsets, scale, slopes, window, portable);
    CHECK(got.scalar_type() == torch::kFloat);
    // fp32 accumulation of fp32 or bf16 inputs (the reference rounds the same bf16 values): fp32's error
    CHECK(torch::allclose(got.to(torch::kDouble), expected, 1e-5, 1e-5));
    // a bf16 query gives a bf16 output: bf16's error (8 bits)
    const auto half = loom::paged_decode_attention(q.to(torch::kBFloat16), keys, values, slots, offsets, scale, slopes,
                                                   window, portable);
    CHECK(half.scalar_type() == torch::kBFloat16);
    const auto expected_half =
        reference_attention(q.to(torch::kBFloat16), keys, values, slots, offsets, scale, slopes, window);
    CHECK(torch::allclose(half.to(torch::kDouble), expected_half, 2e-2, 2e-2));
    CHECK_FALSE(torch::allclose(got.to(torch::kDouble), torch::zeros_like(expected), 1e-2, 1e-2));
  }
  // The double path of the tests' models.
  const auto doubles = loom::paged_decode_attention(q.to(torch::kDouble), keys.to(torch::kDouble),
                                                    values.to(torch::kDouble), slots, offsets, scale, slopes, window);
  CHECK(torch::allclose(doubles, expected, 1e-12, 1e-12));
}

TEST_CASE("paged decode attention: the paged cache attends through its tables as its gather and SDPA do",
          "[models][serve]") {
  // A ragged batch (one row empty) takes forwards of 5, 1, 3, 6 and 1 new positions a row: prefill chunks and
  // verifications that start at several offsets and cross the 4-position blocks, and decode steps.
  torch::NoGradGuard no_grad;
  const auto dtype = GENERATE(torch::kFloat, torch::kBFloat16);
  const int64_t window = GENERATE(0, 5);
  const bool alibi = GENERATE(false, true);
  INFO("dtype " << c10::toString(dtype) << ", window " << window << ", alibi " << alibi);
  const int64_t H = 4, K = 2, D = 16, layers = 2;
  torch::manual_seed(9);
  // Two pools filled alike: one decodes through the kernel, the other through the gather.
  loom::KVBlockPool kernel_pool(layers, 60, 4, K, D, dtype), gather_pool(layers, 60, 4, K, D, dtype);
  for (auto* pool : {&kernel_pool, &gather_pool})  // the slots never written compare equal too
    for (int64_t l = 0; l < layers; ++l) {
      pool->keys(l).zero_();
      pool->values(l).zero_();
    }
  const std::vector<int64_t> lengths{2, 9, 13, 0}, steps{5, 1, 3, 6, 1};
  std::vector<loom::BlockTable> kernel_tables(4), gather_tables(4);
  for (size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] == 0) continue;
    const auto k = torch::randn({layers, 1, K, lengths[i], D}).to(dtype), v = torch::randn_like(k);
    for (auto* tables : {&kernel_tables, &gather_tables}) {
      auto& pool = tables == &kernel_tables ? kernel_pool : gather_pool;
      auto caches = loom::paged_kv_caches(pool, {&(*tables)[i]}, window);
      for (int64_t l = 0; l < layers; ++l) caches[static_cast<size_t>(l)].append(k[l], v[l]);
    }
  }
  const auto slopes = alibi ? loom::alibi_slopes(H) : torch::Tensor();
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  int64_t fed = 0;
  for (const int64_t T : steps) {
    INFO("a forward of " << T << " positions a row after " << fed);
    const std::vector<loom::BlockTable*> by_kernel_rows{&kernel_tables[0], &kernel_tables[1], &kernel_tables[2],
                                                        &kernel_tables[3]};
    const std::vector<loom::BlockTable*> by_gather_rows{&gather_tables[0], &gather_tables[1], &gather_tables[2],
                                                        &gather_tables[3]};
    auto by_kernel = loom::paged_kv_caches(kernel_pool, by_kernel_rows, window);
    auto by_gather = loom::paged_kv_caches(gather_pool, by_gather_rows, window);
    const auto first = by_gather.seen_rows();
    for (int64_t l = 0; l < layers; ++l) {
      const auto q = torch::randn({4, H, T, D}).to(dtype), k = torch::randn({4, K, T, D}).to(dtype);
      const auto v = torch::randn_like(k);
      loom::KVCache::DecodeAttention how;
      how.scale = scale;
      how.window = window;
      how.alibi_slopes = slopes;
      const auto got = by_kernel[static_cast<size_t>(l)].append_and_attend(q, k, v, how);
      REQUIRE(got.defined());
      auto& gather = by_gather[static_cast<size_t>(l)];
      const auto [keys, values] = gather.append(k, v);  // (4, K, S, D) right-aligned
      const int64_t S = keys.size(2);
      // What attention.cpp's mask would hide: later keys (causal), keys beyond the window, padding; ALiBi's bias
      // by distance (query t is at key S - T + t).
      const auto distance = (torch::arange(S - T, S, torch::kFloat).view({T, 1}) -
                             torch::arange(S, torch::kFloat).view({1, S}))
                                .view({1, 1, T, S});
      auto bias = torch::zeros({4, H, T, S});
      if (alibi) bias = bias - slopes.view({1, H, 1, 1}) * distance;
      const auto padding = gather.key_padding();
      auto hidden = (distance < 0).expand({4, H, T, S});
      if (window > 0) hidden = hidden | (distance >= window);
      if (padding.defined()) hidden = hidden | padding.view({4, 1, 1, S});
      bias = bias.masked_fill(hidden, -std::numeric_limits<float>::infinity());
      const auto expected = at::scaled_dot_product_attention(q.to(torch::kFloat), keys.to(torch::kFloat),
                                                             values.to(torch::kFloat), bias, 0.0, false, scale,
                                                             /*enable_gqa=*/true);
      const double tolerance = dtype == torch::kFloat ? 1e-5 : 2e-2;
      CHECK(torch::allclose(got.to(torch::kFloat), expected, tolerance, tolerance));
      CHECK(got.scalar_type() == dtype);
    }
    CHECK(torch::equal(by_kernel.seen_rows(), first.defined() ? first + T : torch::tensor(lengths) + fed + T));
    fed += T;
  }
  for (size_t i = 0; i < lengths.size(); ++i) {
    CHECK(kernel_tables[i].length == lengths[i] + fed);
    CHECK(kernel_tables[i].blocks == gather_tables[i].blocks);  // the same blocks kept, and freed by the window
  }
  for (int64_t l = 0; l < layers; ++l) {
    CHECK(torch::equal(kernel_pool.keys(l), gather_pool.keys(l)));
    CHECK(torch::equal(kernel_pool.values(l), gather_pool.values(l)));
  }
}
