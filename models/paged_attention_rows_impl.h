// The bodies of models/paged_attention_rows.h, in ATen's vector types, for the CPU_CAPABILITY the including file
// is compiled for (DEFAULT or AVX512). Include it only from models/cpu_kernels_*.cpp: it defines functions, and it
// must see no other headers that the rest of loom compiles differently.
#pragma once
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <c10/util/BFloat16.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/cpu_kernel_vec.h"
#include "models/paged_attention_rows.h"

namespace loom::paged_attention_rows::CPU_CAPABILITY {
namespace {

using namespace ::loom::CPU_CAPABILITY;  // core/cpu_kernel_vec.h

// Row `index` (of D values) of a float or bf16 array as floats: the array's own memory, or `buf` converted.
const float* pool_row(const void* pool, bool bf16, int64_t index, int64_t D, float* buf) {
  if (!bf16) return static_cast<const float*>(pool) + index * D;
  at::vec::convert(static_cast<const c10::BFloat16*>(pool) + index * D, buf, D);
  return buf;
}

float paged_dot(const float* a, const float* b, int64_t n) {
  FloatVec sum(0.0f);
  int64_t d = 0;
  for (; d + kFloatLanes <= n; d += kFloatLanes)
    sum = at::vec::fmadd(FloatVec::loadu(a + d), FloatVec::loadu(b + d), sum);
  // the lanes' sum by shuffles (lane_sum's store and 16 scalar adds cost as much as the products at D = 64)
  float total = at::vec::vec_reduce_all<float>([](FloatVec& x, FloatVec& y) { return x + y; }, sum);
  for (; d < n; ++d) total += a[d] * b[d];
  return total;
}

// acc[0, n) += p * x[0, n)
void paged_axpy(float* acc, float p, const float* x, int64_t n) {
  const FloatVec vp(p);
  int64_t d = 0;
  for (; d + kFloatLanes <= n; d += kFloatLanes)
    at::vec::fmadd(vp, FloatVec::loadu(x + d), FloatVec::loadu(acc + d)).store(acc + d);
  for (; d < n; ++d) acc[d] += p * x[d];
}

}  // namespace

void decode_rows(const DecodeRows& r, int64_t begin, int64_t end) {
  const int64_t H = r.heads, K = r.kv_heads, D = r.head_dim, G = H / K;
  std::vector<float> scores, buf(static_cast<size_t>(D)), acc(static_cast<size_t>(G * D));
  std::vector<float> inverse(static_cast<size_t>(G));
  for (int64_t task = begin; task < end; ++task) {
    const int64_t b = task / K, g = task % K;
    const int64_t* slots = r.slots + r.offsets[b];
    const int64_t n = r.offsets[b + 1] - r.offsets[b];
    const float* q = r.q + (b * H + g * G) * D;  // the group's G query heads, one after another
    float* out = r.out + (b * H + g * G) * D;
    if (n == 0) {  // no key (not reached: a row sees at least its new one)
      std::fill(out, out + G * D, 0.0f);
      continue;
    }
    scores.resize(static_cast<size_t>(G * n));
    // Scores: each key row is read once for the group's heads.
    for (int64_t j = 0; j < n; ++j) {
      const float* key = pool_row(r.keys, r.bf16, slots[j] * K + g, D, buf.data());
      for (int64_t i = 0; i < G; ++i) {
        float s = paged_dot(q + i * D, key, D) * r.scale;
        if (r.alibi_slopes != nullptr) s -= r.alibi_slopes[g * G + i] * static_cast<float>(n - 1 - j);
        scores[static_cast<size_t>(i * n + j)] = s;
      }
    }
    // Softmax of each head's row, unnormalized (divided at the end).
    for (int64_t i = 0; i < G; ++i) {
      float* x = scores.data() + i * n;
      const float m = *std::max_element(x, x + n);
      const FloatVec vm(m);
      FloatVec vsum(0.0f);
      int64_t j = 0;
      for (; j + kFloatLanes <= n; j += kFloatLanes) {
        const FloatVec e = (FloatVec::loadu(x + j) - vm).exp();
        e.store(x + j);
        vsum = vsum + e;
      }
      float sum = lane_sum(vsum);
      for (; j < n; ++j) {
        x[j] = std::exp(x[j] - m);
        sum += x[j];
      }
      inverse[static_cast<size_t>(i)] = 1.0f / sum;
    }
    // Weighted sum of the values, each value row read once for the group.
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t j = 0; j < n; ++j) {
      const float* value = pool_row(r.values, r.bf16, slots[j] * K + g, D, buf.data());
      for (int64_t i = 0; i < G; ++i) paged_axpy(acc.data() + i * D, scores[static_cast<size_t>(i * n + j)], value, D);
    }
    for (int64_t i = 0; i < G; ++i) {
      const float norm = inverse[static_cast<size_t>(i)];
      for (int64_t d = 0; d < D; ++d) out[i * D + d] = acc[static_cast<size_t>(i * D + d)] * norm;
    }
  }
}

}  // namespace loom::paged_attention_rows::CPU_CAPABILITY
