// The bodies of models/blocked_attention_rows.h, in ATen's vector types, for the CPU_CAPABILITY the
// including file is compiled for (DEFAULT or AVX512). Include it only from models/cpu_kernels_*.cpp: it defines
// functions, and it must see no other headers that the rest of loom compiles differently.
#pragma once
#include <ATen/cpu/vec/vec.h>
#include <c10/util/BFloat16.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/cpu_kernel_vec.h"
#include "models/blocked_attention_rows.h"

namespace loom::blocked_attention_rows::CPU_CAPABILITY {
namespace {

using namespace ::loom::CPU_CAPABILITY;  // core/cpu_kernel_vec.h
using Vec = FloatVec;
constexpr int64_t kLanes = kFloatLanes;

// A row as floats: the block's own memory when it is float, else `buf` filled from the bf16 row.
float* as_floats(void* block, bool bf16, int64_t offset, int64_t n, std::vector<float>& buf) {
  if (!bf16) return static_cast<float*>(block) + offset;
  at::vec::convert(static_cast<const c10::BFloat16*>(block) + offset, buf.data(), n);
  return buf.data();
}

// The first key row r's query sees (0 without packed documents).
int64_t first_key(const Rows& rows, int64_t r, int64_t t) {
  if (rows.key_begin == nullptr) return 0;
  return rows.key_begin[(r / rows.rows_per_head / rows.heads) * rows.seq + t];
}

// Writes x[0, n) into the row and zeros into [n, cols) (the keys after the query: probability 0).
void store_row(void* block, bool bf16, int64_t offset, const float* x, int64_t n, int64_t cols) {
  if (bf16) {
    auto* dst = static_cast<c10::BFloat16*>(block) + offset;
    at::vec::convert(x, dst, n);
    std::fill(dst + n, dst + cols, c10::BFloat16(0.0f));
  } else {
    auto* dst = static_cast<float*>(block) + offset;
    if (dst != x) std::copy(x, x + n, dst);
    std::fill(dst + n, dst + cols, 0.0f);
  }
}

float row_max(const float* x, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  int64_t j = 0;
  if (n >= kLanes) {
    Vec vm = Vec::loadu(x);
    for (j = kLanes; j + kLanes <= n; j += kLanes) vm = at::vec::maximum(vm, Vec::loadu(x + j));
    m = lane_max(vm);
  }
  for (; j < n; ++j) m = std::max(m, x[j]);
  return m;
}

// rowsum(a * b) over n values of a row at `offset` in the float or bf16 arrays a and b, in fp32.
float dot(const void* a, const void* b, bool bf16, int64_t offset, int64_t n) {
  float sum = 0.0f;
  if (bf16) {
    const auto *x = static_cast<const c10::BFloat16*>(a) + offset, *y = static_cast<const c10::BFloat16*>(b) + offset;
    for (int64_t j = 0; j < n; ++j) sum += static_cast<float>(x[j]) * static_cast<float>(y[j]);
  } else {
    const auto *x = static_cast<const float*>(a) + offset, *y = static_cast<const float*>(b) + offset;
    for (int64_t j = 0; j < n; ++j) sum += x[j] * y[j];
  }
  return sum;
}

}  // namespace

void forward_rows(const Rows& rows, void* scores, float* lse) {
  std::vector<float> buf(rows.bf16 ? rows.cols : 0);
  for (int64_t r = rows.row_begin; r < rows.row_end; ++r) {
    const int64_t h = r / rows.rows_per_head, t = rows.first + r % rows.rows_per_head;
    const int64_t n = t + 1, k0 = first_key(rows, r, t);  // keys [k0, t]
    float* row = as_floats(scores, rows.bf16, r * rows.cols, n, buf);
    std::fill(row, row + k0, 0.0f);  // keys of earlier documents: probability 0
    float* x = row + k0;
    const int64_t m = n - k0;
    const float shift = row_max(x, m) * rows.scale;  // scale > 0: the max of the scaled scores
    const Vec vscale(rows.scale), vshift(shift);
    Vec vsum(0.0f);
    int64_t j = 0;
    for (; j + kLanes <= m; j += kLanes) {
      const Vec e = (Vec::loadu(x + j) * vscale - vshift).exp_u20();
      e.store(x + j);
      vsum = vsum + e;
    }
    float sum = lane_sum(vsum);
    for (; j < m; ++j) {
      x[j] = std::exp(x[j] * rows.scale - shift);
      sum += x[j];
    }
    const Vec vinv(1.0f / sum);
    for (j = 0; j + kLanes <= m; j += kLanes) (Vec::loadu(x + j) * vinv).store(x + j);
    for (; j < m; ++j) x[j] *= 1.0f / sum;
    store_row(scores, rows.bf16, r * rows.cols, row, n, rows.cols);
    lse[h * rows.seq + t] = shift + std::log(sum);
  }
}

void backward_rows(const Rows& rows, void* scores, void* dp, const float* lse, const void* dout, const void* out) {
  std::vector<float> sbuf(rows.bf16 ? rows.cols : 0), dbuf(rows.bf16 ? rows.cols : 0);
  for (int64_t r = rows.row_begin; r < rows.row_end; ++r) {
    const int64_t h = r / rows.rows_per_head, t = rows.first + r % rows.rows_per_head;
    const int64_t n = t + 1, k0 = first_key(rows, r, t);
    float* s_row = as_floats(scores, rows.bf16, r * rows.cols, n, sbuf);
    float* g_row = as_floats(dp, rows.bf16, r * rows.cols, n, dbuf);
    std::fill(s_row, s_row + k0, 0.0f);  // keys of earlier documents: P = 0, dS = 0
    std::fill(g_row, g_row + k0, 0.0f);
    float* s = s_row + k0;
    float* g = g_row + k0;
    const int64_t m = n - k0;
    const float row_lse = lse[h * rows.seq + t];
    const float row_d = dot(dout, out, rows.bf16, (h * rows.seq + t) * rows.head_dim, rows.head_dim);
    const Vec vscale(rows.scale), vlse(row_lse), vd(row_d);
    int64_t j = 0;
    for (; j + kLanes <= m; j += kLanes) {
      const Vec p = (Vec::loadu(s + j) * vscale - vlse).exp_u20();
      p.store(s + j);
      (p * (Vec::loadu(g + j) - vd) * vscale).store(g + j);
    }
    for (; j < m; ++j) {
      const float p = std::exp(s[j] * rows.scale - row_lse);
      s[j] = p;
      g[j] = p * (g[j] - row_d) * rows.scale;
    }
    store_row(scores, rows.bf16, r * rows.cols, s_row, n, rows.cols);
    store_row(dp, rows.bf16, r * rows.cols, g_row, n, rows.cols);
  }
}

}  // namespace loom::blocked_attention_rows::CPU_CAPABILITY
