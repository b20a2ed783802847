// The fused per-row softmax steps of blocked causal attention (models/blocked_attention.h) over a block of
// scores: the forward softmax with its logsumexp, and the backward recompute of the probabilities with
// dS = P * (dP - D). One pass per row instead of ATen's many elementwise passes over the whole block.
// blocked_attention_rows_impl.h is compiled twice, into the namespaces DEFAULT and AVX512 (core/cpu_kernels.h);
// blocked_attention.cpp picks one at run time. Only these plain declarations cross between the two.
#pragma once
#include <cstdint>

namespace loom::blocked_attention_rows {

// Rows [row_begin, row_end) of a block of scores (BH * rows_per_head, cols), contiguous: the queries
// [first, first + rows_per_head) of every (batch, head) against keys [0, cols). Row r is query position
// t = first + r % rows_per_head of head h = r / rows_per_head; it sees keys [0, t] (causal), or with
// key_begin (packed documents) keys [key_begin[b * seq + t], t] for its batch row b = h / heads; the others
// get probability 0. Per-row statistics live in (BH, seq) float arrays at [h * seq + t].
struct Rows {
  int64_t row_begin = 0, row_end = 0;
  int64_t rows_per_head = 0;
  int64_t first = 0;
  int64_t cols = 0;
  int64_t seq = 0;
  int64_t head_dim = 0;
  float scale = 1.0f;  // 1 / sqrt(D), applied to the raw scores q k^T
  bool bf16 = false;   // the blocks hold bf16 (else float)
  const int64_t* key_begin = nullptr;  // (B, seq): the first key each query sees; null: key 0
  int64_t heads = 1;                   // H, to find a row's batch row
};

// forward_rows: scores (raw q k^T) in, probabilities out in place; lse gets the logsumexp of each row's
// scaled scores. backward_rows: scores in, probabilities P (from lse) out in place; dp = dO v^T in,
// dS = scale * P * (dP - d) out in place, with d = rowsum(dO * O) of the row's query, from dout and out
// (BH, seq, head_dim) in the blocks' dtype.
namespace DEFAULT {
void forward_rows(const Rows& rows, void* scores, float* lse);
void backward_rows(const Rows& rows, void* scores, void* dp, const float* lse, const void* dout, const void* out);
}  // namespace DEFAULT
namespace AVX512 {
void forward_rows(const Rows& rows, void* scores, float* lse);
void backward_rows(const Rows& rows, void* scores, void* dp, const float* lse, const void* dout, const void* out);
}  // namespace AVX512

}  // namespace loom::blocked_attention_rows
