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
  const int64_t H = r.heads, K = r.kv_heads, D = r.head_dim, G = H / K, T = r.queries, tiles = r.tiles();
  std::vector<float> scores, buf(static_cast<size_t>(D)), acc, inverse;
  for (int64_t task = begin; task < end; ++task) {
    const int64_t b = task / (K * tiles), g = task / tiles % K, t0 = task % tiles * kQueryTile;
    const int64_t tq = std::min(kQueryTile, T - t0);  // this tile's queries t0 .. t0 + tq - 1
    const int64_t* slots = r.slots + r.offsets[b];
    const int64_t n = r.offsets[b + 1] - r.offsets[b];
    // Query t's visible keys are [first(t), last(t)]; the tile reads [base, last(t0 + tq - 1)].
    const auto last = [&](int64_t t) { return n - T + t; };
    const auto first = [&](int64_t t) { return r.window > 0 ? std::max<int64_t>(0, last(t) - r.window + 1) : 0; };
    const int64_t base = first(t0), span = last(t0 + tq - 1) - base + 1;
    const auto at = [&](int64_t i, int64_t t) { return (b * H + g * G + i) * T + t; };  // (b, h, t) of q and out
    scores.resize(static_cast<size_t>(G * tq * span));
    acc.assign(static_cast<size_t>(G * tq * D), 0.0f);
    inverse.resize(static_cast<size_t>(G * tq));
    float* score = scores.data();  // (G, tq, span): head i, query t0 + u, key base + c
    // Scores: each key row is read (and converted) once for the tile's queries and the group's heads.
    for (int64_t j = base; j < base + span; ++j) {
      const float* key = pool_row(r.keys, r.bf16, slots[j] * K + g, D, buf.data());
      for (int64_t u = 0; u < tq; ++u) {
        const int64_t t = t0 + u;
        if (j < first(t) || j > last(t)) continue;
        for (int64_t i = 0; i < G; ++i) {
          float s = paged_dot(r.q + at(i, t) * D, key, D) * r.scale;
          if (r.alibi_slopes != nullptr) s -= r.alibi_slopes[g * G + i] * static_cast<float>(last(t) - j);
          score[(i * tq + u) * span + (j - base)] = s;
        }
      }
    }
    // Softmax of each (head, query) over its visible keys, unnormalized (divided at the end).
    for (int64_t i = 0; i < G; ++i)
      for (int64_t u = 0; u < tq; ++u) {
        const int64_t lo = first(t0 + u) - base, count = last(t0 + u) - first(t0 + u) + 1;
        float* x = score + (i * tq + u) * span + lo;
        const float m = *std::max_element(x, x + count);
        const FloatVec vm(m);
        FloatVec vsum(0.0f);
        int64_t j = 0;
        for (; j + kFloatLanes <= count; j += kFloatLanes) {
          const FloatVec e = (FloatVec::loadu(x + j) - vm).exp();
          e.store(x + j);
          vsum = vsum + e;
        }
        float sum = lane_sum(vsum);
        for (; j < count; ++j) {
          x[j] = std::exp(x[j] - m);
          sum += x[j];
        }
        inverse[static_cast<size_t>(i * tq + u)] = 1.0f / sum;
      }
    // Weighted sum of the values, each value row read once for the tile and the group.
    for (int64_t j = base; j < base + span; ++j) {
      const float* value = pool_row(r.values, r.bf16, slots[j] * K + g, D, buf.data());
      for (int64_t u = 0; u < tq; ++u) {
        const int64_t t = t0 + u;
        if (j < first(t) || j > last(t)) continue;
        for (int64_t i = 0; i < G; ++i)
          paged_axpy(acc.data() + (i * tq + u) * D, score[(i * tq + u) * span + (j - base)], value, D);
      }
    }
    for (int64_t i = 0; i < G; ++i)
      for (int64_t u = 0; u < tq; ++u) {
        const float norm = inverse[static_cast<size_t>(i * tq + u)];
        const float* a = acc.data() + (i * tq + u) * D;
        float* out = r.out + at(i, t0 + u) * D;
        for (int64_t d = 0; d < D; ++d) out[d] = a[d] * norm;
      }
  }
}

}  // namespace loom::paged_attention_rows::CPU_CAPABILITY
