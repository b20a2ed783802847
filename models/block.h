// A Transformer block: self-attention, an optional cross-attention to an encoder's output (the
// encoder-decoder's decoder blocks), and the MLP, each a residual sub-layer with dropout on its branch:
//   pre-norm (GPT-2, LLaMA):      x + f(norm(x))
//   post-norm (Vaswani et al.):   norm(x + f(x))
// The norms are LayerNorm or RMSNorm, named ln1 (self-attention), ln_cross and ln2 (MLP) either way, so
// checkpoints keep their names.
#pragma once
#include <torch/torch.h>

#include "models/attention.h"
#include "models/layers.h"
#include "models/mlp.h"

namespace loom {

struct BlockOptions {
  AttentionOptions attention;  // the cross-attention takes these too, made bidirectional and windowless
  MlpOptions mlp;
  NormOptions norm;
  double dropout = 0.0;
  bool post_norm = false;
  bool cross_attention = false;
};

// What a block attends to besides x; all empty for the GPT.
struct BlockInputs {
  torch::Tensor padding;            // (B, T) bool, true at x's padded positions: masked as self-attention keys
  torch::Tensor memory;             // (B, S, C) encoder output, for the cross-attention
  torch::Tensor memory_padding;     // (B, S) bool, true at padded source positions
  KVCache* memory_cache = nullptr;  // the cross-attention's keys and values of the memory, computed once
};

class BlockImpl : public torch::nn::Module {
 public:
  explicit BlockImpl(const BlockOptions& options);
  // (B, T, C) -> (B, T, C)
  torch::Tensor forward(const torch::Tensor& x, KVCache* cache = nullptr, const BlockInputs& inputs = {});

 private:
  template <class F>
  torch::Tensor sublayer(const torch::Tensor& x, Norm& norm, F&& f);

  bool post_norm_;
  Norm ln1_{nullptr}, ln_cross_{nullptr}, ln2_{nullptr};
  Attention attention_{nullptr};
  Attention cross_attention_{nullptr};  // only with options.cross_attention
  Mlp mlp_{nullptr};
  torch::nn::Dropout dropout_{nullptr};
};
TORCH_MODULE(Block);

}  // namespace loom
