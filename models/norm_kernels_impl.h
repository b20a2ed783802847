// The bodies of models/norm_kernels.h, in ATen's vector types, for the CPU_CAPABILITY the including file is
// compiled for (DEFAULT or AVX512). Include it only from models/cpu_kernels_*.cpp: it defines functions, and it
// must see no other headers that the rest of loom compiles differently.
//
// Per row: xhat = (x - mean) * rstd (RMSNorm: x * rstd), y = xhat * w + b. The mean and the variance take
// two passes over the row (it is in cache), so the variance does not cancel. Backward, with g = dy * w:
// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) (RMSNorm: without the mean(g) term), dw += dy * xhat, db += dy.
#pragma once
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <c10/util/BFloat16.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/cpu_kernel_vec.h"
#include "models/norm_kernels.h"

namespace loom::norm_kernels::CPU_CAPABILITY {
namespace {

using namespace ::loom::CPU_CAPABILITY;  // core/cpu_kernel_vec.h
using Vec = FloatVec;
constexpr int64_t kLanes = kFloatLanes;

Vec load_or(const float* p, int64_t n, float otherwise) { return p != nullptr ? load_floats(p, n) : Vec(otherwise); }

// sum over i < C of f(lanes of p at i), through four accumulators (one would wait on each add's latency); the lanes
// past C are 0 in what f is given and must stay 0 in what it returns.
template <typename F>
float row_sum(const float* p, int64_t C, const F& f) {
  Vec acc[4] = {Vec(0.0f), Vec(0.0f), Vec(0.0f), Vec(0.0f)};
  int64_t i = 0;
  for (; i + 4 * kLanes <= C; i += 4 * kLanes)
    for (int k = 0; k < 4; ++k) acc[k] += f(Vec::loadu(p + i + k * kLanes), kLanes);
  for (; i < C; i += kLanes) acc[0] += f(load_floats(p + i, std::min(kLanes, C - i)), std::min(kLanes, C - i));
  return lane_sum((acc[0] + acc[1]) + (acc[2] + acc[3]));
}

}  // namespace

void forward_rows(const Rows& rows, const float* x, const float* w, const float* b, void* y, float* mean, float* rstd) {
  const int64_t C = rows.cols;
  std::vector<float> out(rows.bf16 ? C : 0);  // a bf16 row is written in fp32 here first
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    const float* xr = x + r * C;
    const float m = rows.rms ? 0.0f : row_sum(xr, C, [](const Vec& v, int64_t) { return v; }) / static_cast<float>(C);
    const float squares = row_sum(xr, C, [&](const Vec& v, int64_t n) {
      const Vec d = Vec::set(Vec(0.0f), v - Vec(m), n);  // lanes past n stay 0
      return d * d;
    });
    const float s = 1.0f / std::sqrt(squares / static_cast<float>(C) + rows.eps);
    mean[r] = m;
    rstd[r] = s;
    float* yr = rows.bf16 ? out.data() : static_cast<float*>(y) + r * C;
    for (int64_t i = 0; i < C; i += kLanes) {
      const int64_t n = std::min(kLanes, C - i);
      const Vec xhat = (load_floats(xr + i, n) - Vec(m)) * Vec(s);
      store_floats(at::vec::fmadd(xhat, load_floats(w + i, n), load_or(b == nullptr ? nullptr : b + i, n, 0.0f)),
                   yr + i, n);
    }
    if (rows.bf16) at::vec::convert(yr, static_cast<c10::BFloat16*>(y) + r * C, C);
  }
}

void backward_rows(const Rows& rows, const void* dy, const float* x, const float* w, const float* mean,
                   const float* rstd, float* dx, float* dw, float* db) {
  const int64_t C = rows.cols;
  std::vector<float> grad(rows.bf16 ? C : 0);  // a bf16 dy row widened
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    const float* xr = x + r * C;
    const float* dyr = static_cast<const float*>(dy) + r * C;
    if (rows.bf16) {
      at::vec::convert(static_cast<const c10::BFloat16*>(dy) + r * C, grad.data(), C);
      dyr = grad.data();
    }
    const Vec m(mean[r]), s(rstd[r]);
    Vec sum_g(0.0f), sum_gx(0.0f);  // lanes past C load as 0, so they add nothing
    for (int64_t i = 0; i < C; i += kLanes) {
      const int64_t n = std::min(kLanes, C - i);
      const Vec d = load_floats(dyr + i, n), xhat = (load_floats(xr + i, n) - m) * s, g = d * load_floats(w + i, n);
      sum_g += g;
      sum_gx = at::vec::fmadd(g, xhat, sum_gx);
      store_floats(at::vec::fmadd(d, xhat, load_floats(dw + i, n)), dw + i, n);
      if (db != nullptr) store_floats(load_floats(db + i, n) + d, db + i, n);
    }
    const Vec mean_g(rows.rms ? 0.0f : lane_sum(sum_g) / static_cast<float>(C));
    const Vec mean_gx(lane_sum(sum_gx) / static_cast<float>(C));
    for (int64_t i = 0; i < C; i += kLanes) {
      const int64_t n = std::min(kLanes, C - i);
      const Vec xhat = (load_floats(xr + i, n) - m) * s, g = load_floats(dyr + i, n) * load_floats(w + i, n);
      store_floats(s * (g - mean_g - xhat * mean_gx), dx + r * C + i, n);
    }
  }
}

}  // namespace loom::norm_kernels::CPU_CAPABILITY
