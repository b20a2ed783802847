// A Transformer block: self-attention, an optional cross-attention to an encoder's output (the
// encoder-decoder's decoder blocks), and the MLP, each a residual sub-layer with dropout on its branch:
//   pre-norm (GPT-2, LLaMA):      x + f(norm(x))
//   post-norm (Vaswani et al.):   norm(x + f(x))
// The norms are LayerNorm or RMSNorm, named ln1 (self-attention), ln_cross and ln2 (MLP) either way, so
// checkpoints keep their names.
// With activation checkpointing (training only, no KV cache; every kind of block: pre- or post-norm, with
// or without cross-attention, masks and packed documents) the block, or only its MLP sub-layer, keeps just
// its input (and the side tensors it reads: masks, the encoder output) for backward and is recomputed there
// (models/recompute.h). A model's blocks take the mode from its BlockRunner (models/block_runner.h).
#pragma once
#include <torch/torch.h>

#include "core/config_enums.h"  // ActivationCheckpointing
#include "models/attention.h"
#include "models/layers.h"
#include "models/mlp.h"
#include "models/moe.h"
#include "models/recompute.h"

namespace loom {

struct BlockOptions {
  // The cross-attention takes these too, made bidirectional and windowless. Its tp is the block's: with
  // attention.tp.sequence_parallel() x and the output are (B, T / tp, C), the norms and the residual dropout
  // act on this rank's positions, and that dropout draws from attention.tp.rng().
  AttentionOptions attention;
  MlpOptions mlp;
  bool moe = false;  // the MLP is a Mixture of Experts (models/moe.h) of these options, still named "mlp"
  MoeOptions moe_options;
  NormOptions norm;
  double dropout = 0.0;
  bool post_norm = false;
  bool cross_attention = false;
};

// What a block attends to besides x; all empty for the GPT but positions.
struct BlockInputs {
  torch::Tensor positions;          // packed documents (models/document_mask.h): (B, T) int64; undefined: none
  torch::Tensor padding;            // (B, T) bool, true at x's padded positions: masked as self-attention keys
  torch::Tensor memory;             // (B, S, C) encoder output, for the cross-attention
  torch::Tensor memory_padding;     // (B, S) bool, true at padded source positions
  MemoryKeys* memory_keys = nullptr;  // decoding: the cross-attention's keys and values of the memory, computed once
  torch::Tensor position_bias;      // added to the self-attention's scores (AttentionInputs::position_bias)
};

class BlockImpl : public torch::nn::Module {
 public:
  explicit BlockImpl(const BlockOptions& options);
  // (B, T, C) -> (B, T, C), recomputed in backward as `checkpointing` says
  torch::Tensor forward(const torch::Tensor& x, KVCache* cache = nullptr, const BlockInputs& inputs = {},
                        ActivationCheckpointing checkpointing = ActivationCheckpointing::kNone);

 private:
  template <class F>
  torch::Tensor sublayer(const torch::Tensor& x, Norm& norm, F&& f);
  // The residual sub-layers, each x -> x + dropout(f(norm(x))) (pre-norm) or norm(x + dropout(f(x))).
  torch::Tensor self_attention_half(const torch::Tensor& x, KVCache* cache, const BlockInputs& inputs);
  torch::Tensor cross_attention_half(const torch::Tensor& h, const BlockInputs& inputs);
  torch::Tensor mlp_half(const torch::Tensor& h);
  torch::Tensor drop(const torch::Tensor& x);  // the residual branch's dropout

  bool post_norm_;
  TensorParallelRng* tp_rng_;    // the stream of this rank's heads (and positions), under TP
  TensorParallelRng* shard_rng_;  // sequence parallelism: the stream of the residual dropout
  // What recompute_in_backward re-runs; members so that they live as long as the block. Full checkpointing
  // recomputes the block as its residual sub-layers, one at a time, so that backward never holds two
  // sub-layers' activations at once (the ones before each run once more, without gradients, to give it its
  // input). The BlockInputs are the segments' side tensors (models/recompute.h).
  RecomputeSegments sublayers_, mlp_sublayer_;
  Norm ln1_{nullptr}, ln_cross_{nullptr}, ln2_{nullptr};
  Attention attention_{nullptr};
  Attention cross_attention_{nullptr};  // only with options.cross_attention
  Mlp mlp_module_{nullptr};
  Moe moe_module_{nullptr};  // in place of mlp_module_ in an MoE block
  torch::nn::Dropout dropout_{nullptr};
};
TORCH_MODULE(Block);

}  // namespace loom
