// Causal self-attention on CPU in query blocks, faster there in bf16 than at::scaled_dot_product_attention: ATen's
// CPU flash kernel computes its blocks with fp32 sgemm and, at T <= 512 (its key block), every score of the
// T x T square. Here the queries go in blocks of `block` rows; block i multiplies only against keys
// [0, end of block i) (the causal half: ~40-60% fewer FLOPs), batched over batch x heads with at::bmm in the
// inputs' dtype (bf16 under autocast: oneDNN's bf16 matmuls run ~2x fp32 sgemm), and the softmax steps go
// in one fused pass per row with fp32 statistics (models/blocked_attention_rows.h). Forward keeps q, k, v,
// the output and the per-row logsumexp; backward recomputes each block's probabilities from them (the
// flash-attention backward: d = rowsum(dO * O), dS = P * (dP - d)).
#pragma once
#include <torch/torch.h>

namespace loom {

// q, k, v: (B, H, T, D) on CPU, one dtype (float or bf16) -> (B, H, T, D), equal to
// at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true). Differentiable in q, k and v.
// Runs in the inputs' dtype whatever the autocast state. `force_portable` takes the portable row kernel even
// where the AVX-512 one would run (for tests). key_starts (B, T) int64 (packed documents,
// models/document_mask.h): query t of row b sees only keys [key_starts[b, t], t], SDPA's result with
// document_causal_mask as its mask; undefined: every key up to t.
torch::Tensor blocked_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                       int64_t block = 64, bool force_portable = false,
                                       const torch::Tensor& key_starts = {});

// Whether blocked_causal_attention is the faster choice here for this causal self-attention: see the rule
// and the measurements in blocked_attention.cpp.
// The process-wide mode (for tests and A/B measurements against SDPA): kAuto follows that rule, kOff always
// says no, kAlways says yes for every CPU float/bf16 self-attention (even without AVX-512 or at long T).
enum class BlockedAttentionMode { kAuto, kOff, kAlways };
bool blocked_attention_is_faster(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);
void set_blocked_attention_mode(BlockedAttentionMode mode);

}  // namespace loom
