// The heads of the fused QKV projection's output as attention takes them, with a backward that writes
// one gradient buffer in the projection's layout instead of transposing each head gradient back and
// concatenating the three (what view + split would cost: four copies of the projection's output).
#pragma once
#include <torch/torch.h>

namespace loom {

// qkv: (B, T, (H + 2K) D), rows [q: H*D | k: K*D | v: K*D], each section head-major (models/attention.h)
// -> q (B, H, T, D), k and v (B, K, T, D): views of qkv, differentiable. In backward, gradients that are
// already views of one (B, T, (H + 2K) D) buffer in exactly this layout (blocked attention's are, see
// models/blocked_attention.cpp) are that buffer's gradient as they are; any others are copied into one.
// The views must not be modified in place.
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> qkv_heads(const torch::Tensor& qkv, int64_t heads,
                                                                  int64_t kv_heads, int64_t head_dim);

}  // namespace loom
