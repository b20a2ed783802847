// Multi-head attention, one module for every use: causal self-attention (the GPT and the decoder) with
// grouped-query heads, RoPE or ALiBi, an optional sliding window and a KV cache for generation;
// bidirectional self-attention (options.causal = false, the encoder) with a key padding mask; and
// cross-attention (AttentionInputs::memory given: queries from x, keys and values from the encoder
// output, computed once into the cache when decoding incrementally). Shapes: B batch, T new positions,
// S cached + new positions (or memory positions), H query heads, K key/value heads (K divides H; K = 1 is
// multi-query), D head size, C model size.
//
// Q, K and V come from one fused projection whose output rows are laid out [q: H*D | k: K*D | v: K*D],
// each section head-major (head h owns rows h*D .. h*D + D - 1 of its section). A tensor-parallel rank
// holding heads [h0, h0 + H/tp) and kv heads [k0, k0 + K/tp) takes those rows of each section and builds
// this same layer with n_heads = H/tp and n_kv_heads = K/tp; the output projection splits by columns.
// Cross-attention uses the same fused weight: its q rows project x, its k and v rows project the memory.
// Given a TP group (options.tp), the layer does exactly that: qkv is column-parallel in those sections,
// out row-parallel, and n_heads() / n_kv_heads() are this rank's heads. The attention dropout of a rank's
// own heads then draws from the TP stream (options.tp.rng()), so the ranks drop different weights.
// Given a CP group (options.cp), each rank holds 2 of the 2 cp chunks of every sequence: RoPE and ALiBi
// take their global positions and the keys and values go round the group (parallel/ring_attention.h).
#pragma once
#include <torch/torch.h>

#include "models/kv_cache.h"
#include "models/parallel_linear.h"
#include "models/positions.h"
#include "parallel/context_parallel_layout.h"

namespace loom {

// What one call attends to besides x's own positions; both empty for plain self-attention.
struct AttentionInputs {
  torch::Tensor memory;       // (B, S, C): cross-attention to these positions (the encoder output)
  torch::Tensor key_padding;  // (B, S) bool, true at padded keys (x's own, or the memory's for cross-attention)
  // Packed documents (models/document_mask.h): (B, T) int64, each token's position in its document, every
  // position of the sequence even under sequence parallelism. Self-attention without a cache then sees only
  // its own document and RoPE turns by these positions. Undefined: one document, positions from the cache.
  torch::Tensor positions;
  // Cross-attention while decoding incrementally: the memory's keys and values, computed by the first call.
  MemoryKeys* memory_keys = nullptr;
  // Self-attention: added to the scores (T5's relative position bias, models/relative_position_bias.h),
  // (1 or B, H, T, S) of this rank's heads, for the T queries against the S keys attended to (with a cache:
  // every cached key and the new ones).
  torch::Tensor position_bias;
};

struct AttentionOptions {
  int64_t d_model = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;  // 0: n_heads
  int64_t head_dim = 0;    // 0: d_model / n_heads
  bool qk_norm = false;    // RMSNorm over each query and key head (gains q_norm, k_norm of D) before RoPE
  double qk_norm_eps = 1e-6;
  bool bias = true;
  bool causal = true;
  bool scaled = true;  // scores q.k / sqrt(D); false: q.k (T5)
  int64_t window = 0;  // > 0: each position sees itself and the window - 1 before it
  PositionKind position = PositionKind::kLearned;  // rope and alibi act here; the others in the embedding
  RopeOptions rope;
  double dropout = 0.0;
  double init_std = 0.02;
  double out_init_std = 0.02;  // residual projection (GPT-2: init_std / sqrt(2 * n_layers))
  // Its size divides both head counts; this rank's dropout of its own heads draws from tp.rng(); with
  // tp.sequence_parallel() x is (B, T / tp, C) and so is the output (training only).
  TensorParallelism tp;
  // Context parallelism (causal self-attention in training): x holds this rank's part of each sequence
  // (parallel/context_parallel_layout.h), positions are global, and attention is ring attention over the
  // cp group. No cache, no dropout.
  ContextParallelism cp;
};

class AttentionImpl : public torch::nn::Module {
 public:
  explicit AttentionImpl(const AttentionOptions& options);

  // x: (B, T, C) -> (B, T, C). With a cache (self-attention), x holds the positions after the ones the cache
  // has seen, and the cache keeps their keys and values (models/kv_cache.h). Cross-attention (inputs.memory
  // defined) attends to every memory position.
  torch::Tensor forward(const torch::Tensor& x, KVCache* cache = nullptr, const AttentionInputs& inputs = {});

  int64_t n_heads() const { return heads_; }
  int64_t n_kv_heads() const { return kv_heads_; }
  int64_t head_dim() const { return head_dim_; }

 private:
  // What SDPA adds to the scores of new positions [first, first + T) against kept keys
  // [key_first, key_first + S): nothing when its own causal flag is enough (then *is_causal is set), else a
  // bool (T, S) mask or, with ALiBi, a float (H, T, S) bias with -inf where masked.
  std::optional<torch::Tensor> scores_mask(int64_t first, int64_t T, int64_t key_first, int64_t S,
                                           const torch::Tensor& q, bool* is_causal) const;
  // The one place a kernel is picked, for queries (B, H, T, D) at positions [first, first + T) against keys
  // and values (B, K, S, D) ending with them (cross-attention: the memory's): ring attention over the CP
  // group; loom's blocked CPU kernel for plain causal attention where it is faster; else SDPA with a mask of
  // what each query may not see (window, ALiBi's bias, key padding, packed documents). -> (B, H, T, D)
  torch::Tensor attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, int64_t first,
                       const AttentionInputs& inputs) const;
  // Context parallelism: this rank's queries (B, H, L, D) against every rank's keys and values (B, K, L, D),
  // already turned by RoPE (packed documents: positions in the document, document_positions (B, L)).
  torch::Tensor ring_attention_of(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                  const torch::Tensor& document_positions) const;
  // q (B, H, T, D) from x, and the memory's k and v (B, K, S, D) from the k and v rows of the fused weight
  // (or, decoding, from `keys` once they are filled).
  std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> cross_qkv(const torch::Tensor& x, const torch::Tensor& memory,
                                                                    MemoryKeys* keys) const;

  AttentionOptions options_;
  int64_t heads_, kv_heads_, head_dim_;
  ColumnParallelLinear qkv_{nullptr};
  RowParallelLinear out_{nullptr};
  torch::Tensor q_norm_, k_norm_;  // (D), only with options.qk_norm
  torch::Tensor alibi_slopes_;  // (H) of this rank's heads, only with ALiBi; not a parameter
};
TORCH_MODULE(Attention);

}  // namespace loom
