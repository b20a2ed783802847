// Position information besides a learned table: fixed sinusoids added to the embeddings, rotary
// embeddings (RoPE) applied to queries and keys, and ALiBi's per-head slopes. Each is a function of
// absolute positions [first, first + T), so a cached generation step passes where its new tokens start;
// or, for packed documents (data.document_mask), of a position per token, restarting at each document
// (models/document_mask.h). Shapes: B batch, T positions, D head size, C model size, H heads.
#pragma once
#include <torch/torch.h>

#include <utility>

#include "core/config_enums.h"  // PositionKind, RopeScaling

namespace loom {


struct RopeOptions {
  double theta = 10000.0;
  RopeScaling scaling = RopeScaling::kNone;
  double factor = 1.0;
};

// (T, C): Vaswani et al.'s table, sin(p / 10000^(2i/C)) at feature 2i and cos at 2i + 1.
torch::Tensor sinusoidal_positions(int64_t first, int64_t length, int64_t dim, const torch::TensorOptions& options);
// The same table's rows at positions (B, T) int64 -> (B, T, C).
torch::Tensor sinusoidal_positions_at(const torch::Tensor& positions, int64_t dim, const torch::TensorOptions& options);

// cos and sin, each (T, D), of the rotation angles p * theta^(-2i/D) in the half-split layout
// (feature i turns with feature i + D/2, Hugging Face's rotate_half). Linear scaling divides positions by
// the factor; NTK scaling raises theta to theta * factor^(D / (D - 2)).
std::pair<torch::Tensor, torch::Tensor> rope_cos_sin(int64_t first, int64_t length, int64_t head_dim,
                                                     const RopeOptions& options, const torch::TensorOptions& to);
// The same at positions (B, T) int64: cos and sin (B, 1, T, D), which apply_rope broadcasts over the heads.
std::pair<torch::Tensor, torch::Tensor> rope_cos_sin_at(const torch::Tensor& positions, int64_t head_dim,
                                                        const RopeOptions& options, const torch::TensorOptions& to);

// x: (B, H, T, D) -> x rotated by the angles of rope_cos_sin (cos, sin: (T, D), or (B, 1, T, D)).
torch::Tensor apply_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

// (H) float: ALiBi slopes (Press et al.), 2^(-8/H), 2^(-16/H), ..., for H a power of two; otherwise
// those of the next lower power of two followed by every other slope of the next higher one.
torch::Tensor alibi_slopes(int64_t n_heads);

}  // namespace loom
