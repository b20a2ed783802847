// The body of models/few_rows_linear_kernels.h, in ATen's vector types, for the CPU_CAPABILITY the including file
// is compiled for (DEFAULT or AVX512). Include it only from models/cpu_kernels_*.cpp.
#pragma once
#include <ATen/cpu/vec/vec.h>

#include <algorithm>

#include "core/cpu_kernel_vec.h"
#include "models/few_rows_linear_kernels.h"

namespace loom::few_rows_linear_kernels::CPU_CAPABILITY {
namespace {

using namespace ::loom::CPU_CAPABILITY;  // core/cpu_kernel_vec.h
constexpr int64_t kXRows = 6;   // rows of x a tile holds
constexpr int64_t kWRows = 4;   // rows of W a tile holds
constexpr int64_t kChunkBytes = 256 << 10;  // rows of W a pass covers before the next rows of x (L2)

// acc[r][i] += x[i][c, c + lanes) . w[r][c, c + lanes) for the R rows of W from w and the MB rows of x from x.
template <int R, int MB>
inline void accumulate(const float* x, int64_t k, const float* w, int64_t c, int64_t lanes, FloatVec (&acc)[R][MB]) {
  FloatVec wv[R];
  for (int r = 0; r < R; ++r) wv[r] = load_floats(w + r * k + c, lanes);
  for (int i = 0; i < MB; ++i) {
    const FloatVec xv = load_floats(x + i * k + c, lanes);
    for (int r = 0; r < R; ++r) acc[r][i] = at::vec::fmadd(wv[r], xv, acc[r][i]);
  }
}

// y[i, r] = x[i] . w[r] for the R rows of W from w and the MB rows of x from x (y's rows are n apart).
template <int R, int MB>
void tile(const float* x, int64_t k, const float* w, float* y, int64_t n) {
  FloatVec acc[R][MB];
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < MB; ++i) acc[r][i] = FloatVec(0.0f);
  const int64_t whole = k - k % kFloatLanes;
  for (int64_t c = 0; c < whole; c += kFloatLanes) accumulate<R, MB>(x, k, w, c, kFloatLanes, acc);
  if (whole < k) accumulate<R, MB>(x, k, w, whole, k - whole, acc);
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < MB; ++i) y[i * n + r] = lane_sum(acc[r][i]);
}

template <int MB>
void tiles(const float* x, int64_t k, const float* w, float* y, int64_t n, int64_t begin, int64_t end) {
  int64_t r = begin;
  for (; r + kWRows <= end; r += kWRows) tile<kWRows, MB>(x, k, w + r * k, y + r, n);
  for (; r < end; ++r) tile<1, MB>(x, k, w + r * k, y + r, n);
}

}  // namespace

void rows(const float* x, int64_t m, int64_t k, const float* w, float* y, int64_t n, int64_t n_begin,
          int64_t n_end) {
  const int64_t chunk = std::max<int64_t>(kWRows, kChunkBytes / (k * static_cast<int64_t>(sizeof(float))));
  for (int64_t begin = n_begin; begin < n_end; begin += chunk) {
    const int64_t end = std::min(n_end, begin + chunk);
    for (int64_t i = 0; i < m; i += kXRows) {
      const float* xi = x + i * k;
      float* yi = y + i * n;
      switch (std::min(kXRows, m - i)) {
        case 1: tiles<1>(xi, k, w, yi, n, begin, end); break;
        case 2: tiles<2>(xi, k, w, yi, n, begin, end); break;
        case 3: tiles<3>(xi, k, w, yi, n, begin, end); break;
        case 4: tiles<4>(xi, k, w, yi, n, begin, end); break;
        case 5: tiles<5>(xi, k, w, yi, n, begin, end); break;
        default: tiles<6>(xi, k, w, yi, n, begin, end); break;
      }
    }
  }
}

}  // namespace loom::few_rows_linear_kernels::CPU_CAPABILITY
