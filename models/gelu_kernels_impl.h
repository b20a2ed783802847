// The bodies of models/gelu_kernels.h, in ATen's vector types, for the CPU_CAPABILITY the including file is
// compiled for (DEFAULT or AVX512). Include it only from models/cpu_kernels_*.cpp: it defines functions, and it
// must see no other headers that the rest of loom compiles differently.
//
// gelu(x) = 0.5 x (1 + tanh(u)) with u = sqrt(2/pi) (x + 0.044715 x^3), computed as x * sigmoid(2u): the same
// function (0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u))), one exp instead of ATen's tanh, and no cancellation in
// 1 + tanh(u) for negative x. gelu'(x) = s + x s (1 - s) 2 u'(x), s = sigmoid(2u), u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2).
#pragma once
#include <ATen/cpu/vec/vec.h>
#include <c10/util/BFloat16.h>

#include <algorithm>
#include <cstring>

#include "core/cpu_kernel_vec.h"
#include "models/gelu_kernels.h"

namespace loom::gelu_kernels::CPU_CAPABILITY {
namespace {

using namespace ::loom::CPU_CAPABILITY;  // core/cpu_kernel_vec.h
using Vec = FloatVec;
using IntVec = at::vec::Vectorized<int32_t>;
constexpr int64_t kLanes = kFloatLanes;
constexpr int64_t kChunk = 32 * kLanes;  // bf16 elements widened at a time (on the stack)
constexpr float kBeta = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kKappa = 0.044715f;

// s = sigmoid(2u) = 1 / (1 + e) with e = exp(-2u), and `x2` = x^2.
Vec sigmoid_2u(const Vec& x, Vec& x2, Vec& e) {
  x2 = x * x;
  e = (x * (Vec(-2.0f * kBeta) + Vec(-2.0f * kBeta * kKappa) * x2)).exp();
  return Vec(1.0f) / (Vec(1.0f) + e);
}

}  // namespace

void forward_float(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += kLanes) {
    const int64_t m = std::min(kLanes, n - i);
    const Vec xv = load_floats(x + i, m);
    Vec x2, e;
    store_floats(xv * sigmoid_2u(xv, x2, e), y + i, m);
  }
}

void backward_float(const float* grad, const float* x, float* grad_x, int64_t n) {
  for (int64_t i = 0; i < n; i += kLanes) {
    const int64_t m = std::min(kLanes, n - i);
    const Vec xv = load_floats(x + i, m);
    Vec x2, e;
    const Vec s = sigmoid_2u(xv, x2, e);
    // 1 - s as e * s where e < 1 (1 - s would cancel there), else as 1 - s (e * s may be inf * 0)
    const Vec one_minus_s = Vec::blendv(Vec(1.0f) - s, e * s, e < Vec(1.0f));
    const Vec du = Vec(2.0f * kBeta) + Vec(2.0f * kBeta * 3.0f * kKappa) * x2;  // 2 u'(x)
    const Vec slope = s + xv * s * one_minus_s * du;
    store_floats(load_floats(grad + i, m) * slope, grad_x + i, m);
  }
}

void forward_bf16(const uint16_t* x, uint16_t* y, int64_t n, const Bf16Tables& tables) {
  for (int64_t i = 0; i < n; ++i) y[i] = tables.value[x[i]];
}

void backward_bf16(const uint16_t* grad, const uint16_t* x, uint16_t* grad_x, int64_t n, const Bf16Tables& tables) {
  static_assert(sizeof(c10::BFloat16) == sizeof(uint16_t));
  float g[kChunk];
  int32_t index[kChunk];
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t m = std::min(kChunk, n - i);
    at::vec::convert(reinterpret_cast<const c10::BFloat16*>(grad + i), g, m);
    for (int64_t j = 0; j < m; ++j) index[j] = x[i + j];
    for (int64_t j = m; j < (m + kLanes - 1) / kLanes * kLanes; ++j) index[j] = 0;  // the last vector's spare lanes
    for (int64_t j = 0; j < m; j += kLanes) {
      const Vec slope = at::vec::gather<sizeof(float)>(tables.slope, IntVec::loadu(index + j));
      store_floats(load_floats(g + j, std::min(kLanes, m - j)) * slope, g + j, std::min(kLanes, m - j));
    }
    at::vec::convert(g, reinterpret_cast<c10::BFloat16*>(grad_x + i), m);
  }
}

}  // namespace loom::gelu_kernels::CPU_CAPABILITY
