// Row kernels of LayerNorm and RMSNorm (models/norm.h) over an (N, C) fp32 input with contiguous rows:
// statistics and arithmetic in fp32, the output (and so the incoming gradient) fp32 or bf16 (its bits).
// norm_kernels_impl.h is compiled twice, into the namespaces DEFAULT and AVX512 (core/cpu_kernels.h); norm.cpp
// picks one at run time. Only these plain declarations cross between the two.
#pragma once
#include <cstdint>

namespace loom::norm_kernels {

struct Rows {
  int64_t begin = 0, end = 0;  // the rows this call handles
  int64_t cols = 0;            // C
  float eps = 1e-5f;
  bool rms = false;            // RMSNorm: no mean, no bias
  bool bf16 = false;           // y and dy are bf16 (else fp32)
};

// LayerNorm: y = (x - mean) * rstd * w + b, rstd = 1 / sqrt(var + eps); RMSNorm: y = x * rstd * w,
// rstd = 1 / sqrt(mean(x^2) + eps). Writes y and each row's mean (0 for RMSNorm) and rstd. b may be null.
// backward_rows writes dx and adds the rows' dy * xhat to dw and dy to db (db may be null).
namespace DEFAULT {
void forward_rows(const Rows& rows, const float* x, const float* w, const float* b, void* y, float* mean, float* rstd);
void backward_rows(const Rows& rows, const void* dy, const float* x, const float* w, const float* mean,
                   const float* rstd, float* dx, float* dw, float* db);
}  // namespace DEFAULT
namespace AVX512 {
void forward_rows(const Rows& rows, const float* x, const float* w, const float* b, void* y, float* mean, float* rstd);
void backward_rows(const Rows& rows, const void* dy, const float* x, const float* w, const float* mean,
                   const float* rstd, float* dx, float* dw, float* db);
}  // namespace AVX512

}  // namespace loom::norm_kernels
