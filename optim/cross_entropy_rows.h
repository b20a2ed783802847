// The per-row softmax steps of the fused LM head + cross-entropy (optim/linear_cross_entropy.h) over a chunk's
// logits, one pass each instead of ATen's separate max, subtract, exp, sum, divide, scatter and multiply passes
// over an fp32 copy of the chunk. The steps are split where a vocabulary-parallel head all-reduces the row
// statistics between them; without one they run one group of rows at a time in a cache-sized buffer.
// cross_entropy_rows_impl.h is compiled twice, into the namespaces DEFAULT and AVX512 (core/cpu_kernels.h);
// linear_cross_entropy.cpp picks one at run time. Only these plain declarations cross between the two.
#pragma once
#include <cstdint>

namespace loom::cross_entropy_rows {

// Rows [begin, end) of a chunk's logits (rows, cols), contiguous, bf16 or float (the head's product dtype).
// Per-row arrays are indexed by the chunk row r; `buffer` holds fp32 rows [begin, end) only (row r at
// buffer + (r - begin) * cols).
struct Rows {
  int64_t begin = 0, end = 0;
  int64_t cols = 0;
  bool bf16 = false;
};

// Per row r, with `column[r]` the target's column on this rank (-1: not on this rank):
//   load_rows:     buffer = the logits in fp32; max[r] = their max.
//   exp_rows:      (max: the max over every vocabulary shard) target[r] = logit[column[r]] - max[r] (0 when
//                  not on this rank); logit_sum[r] = sum of (logit - max[r]) (skipped when logit_sum is null);
//                  buffer = exp(logit - max[r]); exp_sum[r] = its sum.
//   gradient_rows: (exp_sum: summed over every shard) the gradient of weight[r] * loss_r with respect to the
//                  logits, p = buffer / exp_sum[r]: weight[r] * (p - smooth - target_weight * [v == column[r]]),
//                  written in the logits' dtype to `grad` (which may be the logits themselves).
namespace DEFAULT {
void load_rows(const Rows& rows, const void* logits, float* buffer, float* max);
void exp_rows(const Rows& rows, float* buffer, const float* max, const int64_t* column, float* target, float* exp_sum,
              float* logit_sum);
void gradient_rows(const Rows& rows, const float* buffer, const float* exp_sum, const int64_t* column,
                   const float* weight, float smooth, float target_weight, void* grad);
}  // namespace DEFAULT
namespace AVX512 {
void load_rows(const Rows& rows, const void* logits, float* buffer, float* max);
void exp_rows(const Rows& rows, float* buffer, const float* max, const int64_t* column, float* target, float* exp_sum,
              float* logit_sum);
void gradient_rows(const Rows& rows, const float* buffer, const float* exp_sum, const int64_t* column,
                   const float* weight, float smooth, float target_weight, void* grad);
}  // namespace AVX512

}  // namespace loom::cross_entropy_rows
