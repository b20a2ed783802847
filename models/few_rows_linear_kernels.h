// The kernel behind models/few_rows_linear.h: y = x W^T for a few rows of x (M <= kMaxRows), fp32, W (N, K)
// row-major as torch::nn::Linear keeps it, over W's rows [n_begin, n_end). One pass over those rows of W serves
// every row of x: W is read once, which is what a decode or verification step of a model too large for the caches
// is bound by. A tile is 4 rows of W times up to 6 rows of x (24 accumulators in registers); more rows of x take
// another pass over a chunk of W that is still in the cache.
// few_rows_linear_kernels_impl.h is compiled twice, into the namespaces DEFAULT and AVX512 (core/cpu_kernels.h);
// few_rows_linear.cpp picks one at run time.
#pragma once
#include <cstdint>

namespace loom::few_rows_linear_kernels {

namespace DEFAULT {
void rows(const float* x, int64_t m, int64_t k, const float* w, float* y, int64_t n, int64_t n_begin, int64_t n_end);
}  // namespace DEFAULT
namespace AVX512 {
void rows(const float* x, int64_t m, int64_t k, const float* w, float* y, int64_t n, int64_t n_begin, int64_t n_end);
}  // namespace AVX512

}  // namespace loom::few_rows_linear_kernels
