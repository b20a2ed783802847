// The bodies of optim/cross_entropy_rows.h, in ATen's vector types, for the CPU_CAPABILITY the including file is
// compiled for (DEFAULT or AVX512). Include it only from optim/cpu_kernels_*.cpp: it defines functions, and it
// must see no other headers that the rest of loom compiles differently.
#pragma once
#include <ATen/cpu/vec/vec.h>
#include <c10/util/BFloat16.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "core/cpu_kernel_vec.h"
#include "optim/cross_entropy_rows.h"

namespace loom::cross_entropy_rows::CPU_CAPABILITY {
namespace {

using namespace ::loom::CPU_CAPABILITY;  // core/cpu_kernel_vec.h
using Vec = FloatVec;
constexpr int64_t kLanes = kFloatLanes;

float* buffer_row(const Rows& rows, float* buffer, int64_t r) { return buffer + (r - rows.begin) * rows.cols; }
const float* buffer_row(const Rows& rows, const float* buffer, int64_t r) {
  return buffer + (r - rows.begin) * rows.cols;
}

}  // namespace

void load_rows(const Rows& rows, const void* logits, float* buffer, float* max) {
  const int64_t n = rows.cols;
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    float* x = buffer_row(rows, buffer, r);
    if (rows.bf16)
      at::vec::convert(static_cast<const c10::BFloat16*>(logits) + r * n, x, n);
    else
      std::copy_n(static_cast<const float*>(logits) + r * n, n, x);
    Vec m(-std::numeric_limits<float>::infinity());
    for (int64_t j = 0; j < n; j += kLanes) {
      const int64_t lanes = std::min(kLanes, n - j);
      const Vec v = load_floats(x + j, lanes);
      m = lanes == kLanes ? at::vec::maximum(m, v)
                          : at::vec::maximum(m, Vec::set(Vec(-std::numeric_limits<float>::infinity()), v, lanes));
    }
    max[r] = lane_max(m);
  }
}

void exp_rows(const Rows& rows, float* buffer, const float* max, const int64_t* column, float* target, float* exp_sum,
              float* logit_sum) {
  const int64_t n = rows.cols;
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    float* x = buffer_row(rows, buffer, r);
    target[r] = column[r] >= 0 ? x[column[r]] - max[r] : 0.0f;
    const Vec shift(max[r]);
    Vec sum(0.0f), shifted_sum(0.0f);
    for (int64_t j = 0; j < n; j += kLanes) {
      const int64_t lanes = std::min(kLanes, n - j);
      const Vec shifted = load_floats(x + j, lanes) - shift;
      // the lanes past the row's end hold 0 - max: masked out of both sums
      const Vec e = Vec::set(Vec(0.0f), shifted.exp_u20(), lanes);
      store_floats(e, x + j, lanes);
      sum = sum + e;
      if (logit_sum != nullptr) shifted_sum = shifted_sum + Vec::set(Vec(0.0f), shifted, lanes);
    }
    exp_sum[r] = lane_sum(sum);
    if (logit_sum != nullptr) logit_sum[r] = lane_sum(shifted_sum);
  }
}

void gradient_rows(const Rows& rows, const float* buffer, const float* exp_sum, const int64_t* column,
                   const float* weight, float smooth, float target_weight, void* grad) {
  const int64_t n = rows.cols;
  std::vector<float> out(rows.bf16 ? n : 0);
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    const float* p = buffer_row(rows, buffer, r);
    float* g = rows.bf16 ? out.data() : static_cast<float*>(grad) + r * n;
    const Vec scale(weight[r] / exp_sum[r]), offset(weight[r] * smooth);
    for (int64_t j = 0; j < n; j += kLanes) {
      const int64_t lanes = std::min(kLanes, n - j);
      store_floats(load_floats(p + j, lanes) * scale - offset, g + j, lanes);
    }
    if (column[r] >= 0) g[column[r]] -= weight[r] * target_weight;
    if (rows.bf16) at::vec::convert(g, static_cast<c10::BFloat16*>(grad) + r * n, n);
  }
}

}  // namespace loom::cross_entropy_rows::CPU_CAPABILITY
