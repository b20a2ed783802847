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
  FloatVec sum(0.0f), odd(0.0f);  // two chains of multiply-adds
  int64_t d = 0;
  for (; d + 2 * kFloatLanes <= n; d += 2 * kFloatLanes) {
    sum = at::vec::fmadd(FloatVec::loadu(a + d), FloatVec::loadu(b + d), sum);
    odd = at::vec::fmadd(FloatVec::loadu(a + d + kFloatLanes), FloatVec::loadu(b + d + kFloatLanes), odd);
  }
  for (; d + kFloatLanes <= n; d += kFloatLanes)
    sum = at::vec::fmadd(FloatVec::loadu(a + d), FloatVec::loadu(b + d), sum);
  sum = sum + odd;
  // the lanes' sum by shuffles (lane_sum's store and 16 scalar adds cost as much as the products at D = 64)
  float total = at::vec::vec_reduce_all<float>([](FloatVec& x, FloatVec& y) { return x + y; }, sum);
  for (; d < n; ++d) total += a[d] * b[d];
  return total;
}

}  // namespace

void decode_rows(const DecodeRows& r, int64_t begin, int64_t end) {
  const int64_t H = r.heads, K = r.kv_heads, D = r.head_dim, G = H / K, T = r.queries, tiles = r.tiles();
  static_assert(kKeyBlock % kFloatLanes == 0, "a key block is whole vectors");
  std::vector<float> scores, buf(static_cast<size_t>(D)), kt(static_cast<size_t>(D * kKeyBlock)), vbuf, inverse;
  std::vector<const float*> value_rows;
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
    float* score = scores.data();  // (G, tq, span): head i, query t0 + u, key base + c; invisible ones unused
    if (tq * G < kKeyBlockRows) {
      // Few query rows (decoding): a dot product a key row and query row, each key row read once.
      for (int64_t j = base; j < base + span; ++j) {
        const float* key = pool_row(r.keys, r.bf16, slots[j] * K + g, D, buf.data());
        for (int64_t i = 0; i < G; ++i)
          for (int64_t u = 0; u < tq; ++u)
            score[(i * tq + u) * span + (j - base)] = paged_dot(r.q + at(i, t0 + u) * D, key, D);
      }
    } else {
      // Many (prefill chunks, verification with grouped heads): a block of kKeyBlock key rows transposed to
      // (D, kKeyBlock), so a query row's scores against the block are D vector multiply-adds, no lane sums.
      for (int64_t j0 = base; j0 < base + span; j0 += kKeyBlock) {
        const int64_t kb = std::min(kKeyBlock, base + span - j0);
        for (int64_t c = 0; c < kb; ++c) {
          const float* key = pool_row(r.keys, r.bf16, slots[j0 + c] * K + g, D, buf.data());
          for (int64_t d = 0; d < D; ++d) kt[static_cast<size_t>(d * kKeyBlock + c)] = key[d];
        }
        // Four query rows at a time, two sums a row (even and odd d): eight independent multiply-add chains.
        const int64_t rows = G * tq;  // row = i * tq + u
        for (int64_t row0 = 0; row0 < rows; row0 += 4) {
          const int64_t nr = std::min<int64_t>(4, rows - row0);
          const float* q[4];
          for (int64_t k = 0; k < 4; ++k) {
            const int64_t row = row0 + std::min(k, nr - 1);  // a short group repeats its last row (not stored)
            q[k] = r.q + at(row / tq, t0 + row % tq) * D;
          }
          for (int64_t c = 0; c < kb; c += kFloatLanes) {
            FloatVec s[4][2] = {{FloatVec(0.0f), FloatVec(0.0f)}, {FloatVec(0.0f), FloatVec(0.0f)},
                                {FloatVec(0.0f), FloatVec(0.0f)}, {FloatVec(0.0f), FloatVec(0.0f)}};
            int64_t d = 0;
            for (; d + 2 <= D; d += 2) {
              const FloatVec k0 = FloatVec::loadu(kt.data() + d * kKeyBlock + c);
              const FloatVec k1 = FloatVec::loadu(kt.data() + (d + 1) * kKeyBlock + c);
              for (int64_t k = 0; k < 4; ++k) {
                s[k][0] = at::vec::fmadd(FloatVec(q[k][d]), k0, s[k][0]);
                s[k][1] = at::vec::fmadd(FloatVec(q[k][d + 1]), k1, s[k][1]);
              }
            }
            if (d < D) {
              const FloatVec k0 = FloatVec::loadu(kt.data() + d * kKeyBlock + c);
              for (int64_t k = 0; k < 4; ++k) s[k][0] = at::vec::fmadd(FloatVec(q[k][d]), k0, s[k][0]);
            }
            for (int64_t k = 0; k < 4; ++k)  // constant bounds: the sums stay in registers
              if (k < nr)
                store_floats(s[k][0] + s[k][1], score + (row0 + k) * span + (j0 - base) + c,
                             std::min(kFloatLanes, kb - c));
          }
        }
      }
    }
    // Scale, ALiBi's bias and the softmax of each (head, query) over its visible keys.
    inverse.resize(static_cast<size_t>(G * tq));
    for (int64_t i = 0; i < G; ++i)
      for (int64_t u = 0; u < tq; ++u) {
        const int64_t lo = first(t0 + u), count = last(t0 + u) - lo + 1;
        float* x = score + (i * tq + u) * span + (lo - base);
        const FloatVec scale(r.scale);
        int64_t j = 0;
        for (; j + kFloatLanes <= count; j += kFloatLanes) (FloatVec::loadu(x + j) * scale).store(x + j);
        for (; j < count; ++j) x[j] *= r.scale;
        if (r.alibi_slopes != nullptr) {
          const float slope = r.alibi_slopes[g * G + i];
          for (j = 0; j < count; ++j) x[j] -= slope * static_cast<float>(count - 1 - j);  // key lo + j's distance
        }
        FloatVec vmax(-std::numeric_limits<float>::infinity());
        for (j = 0; j + kFloatLanes <= count; j += kFloatLanes) vmax = at::vec::maximum(vmax, FloatVec::loadu(x + j));
        float m = lane_max(vmax);
        for (; j < count; ++j) m = std::max(m, x[j]);
        const FloatVec vm(m);
        FloatVec vsum(0.0f);
        for (j = 0; j + kFloatLanes <= count; j += kFloatLanes) {
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
    // The values: each output row's lanes accumulate in a register over its visible keys (bf16 rows converted
    // once for the tile).
    value_rows.resize(static_cast<size_t>(span));
    if (r.bf16) vbuf.resize(static_cast<size_t>(span * D));
    for (int64_t c = 0; c < span; ++c)
      value_rows[static_cast<size_t>(c)] =
          pool_row(r.values, r.bf16, slots[base + c] * K + g, D, r.bf16 ? vbuf.data() + c * D : nullptr);
    for (int64_t i = 0; i < G; ++i)
      for (int64_t u = 0; u < tq; ++u) {
        const int64_t lo = first(t0 + u) - base, hi = last(t0 + u) - base;
        const float* p = score + (i * tq + u) * span;
        const FloatVec norm(inverse[static_cast<size_t>(i * tq + u)]);
        float* out = r.out + at(i, t0 + u) * D;
        // Up to four vectors of the row at a time, keys in pairs: eight independent multiply-add chains.
        for (int64_t d0 = 0; d0 < D; d0 += 4 * kFloatLanes) {
          const int64_t nv = std::min<int64_t>(4, (D - d0 + kFloatLanes - 1) / kFloatLanes);
          int64_t lanes[4];
          for (int64_t v = 0; v < 4; ++v) lanes[v] = std::max<int64_t>(0, std::min(kFloatLanes, D - d0 - v * kFloatLanes));
          FloatVec acc[2][4] = {{FloatVec(0.0f), FloatVec(0.0f), FloatVec(0.0f), FloatVec(0.0f)},
                                {FloatVec(0.0f), FloatVec(0.0f), FloatVec(0.0f), FloatVec(0.0f)}};
          int64_t c = lo;
          for (; c + 1 <= hi; c += 2)
            for (int64_t e = 0; e < 2; ++e) {
              const FloatVec pc(p[c + e]);
              const float* value = value_rows[static_cast<size_t>(c + e)] + d0;
              for (int64_t v = 0; v < 4; ++v)  // constant bounds: the sums stay in registers
                if (v < nv) acc[e][v] = at::vec::fmadd(pc, load_floats(value + v * kFloatLanes, lanes[v]), acc[e][v]);
            }
          if (c <= hi) {
            const FloatVec pc(p[c]);
            const float* value = value_rows[static_cast<size_t>(c)] + d0;
            for (int64_t v = 0; v < 4; ++v)
              if (v < nv) acc[0][v] = at::vec::fmadd(pc, load_floats(value + v * kFloatLanes, lanes[v]), acc[0][v]);
          }
          for (int64_t v = 0; v < 4; ++v)
            if (v < nv) store_floats((acc[0][v] + acc[1][v]) * norm, out + d0 + v * kFloatLanes, lanes[v]);
        }
      }
  }
}

}  // namespace loom::paged_attention_rows::CPU_CAPABILITY
