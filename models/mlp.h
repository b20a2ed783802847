// The position-wise feed-forward block: down(act(up x)) for GELU (tanh approximation, as GPT-2; gelu_erf the
// exact one, as BERT) and ReLU,
// or the gated down(act(gate x) * up x) for SwiGLU (SiLU) and GeGLU (GELU), each projection C <-> F.
// Gate and up are separate matrices so that tensor parallelism splits each by columns as it is: given a
// TP group, gate and up are column-parallel and down row-parallel (one all-reduce per direction).
#pragma once
#include <torch/torch.h>

#include "core/config_enums.h"  // Activation
#include "models/parallel_linear.h"

namespace loom {


struct MlpOptions {
  int64_t d_model = 0;
  int64_t d_ff = 0;
  Activation activation = Activation::kGelu;
  bool bias = true;
  double init_std = 0.02;
  double out_init_std = 0.02;
  TensorParallelism tp;  // with tp.sequence_parallel(): x and the output are (B, T / tp, C)
};

class MlpImpl : public torch::nn::Module {
 public:
  explicit MlpImpl(const MlpOptions& options);
  torch::Tensor forward(const torch::Tensor& x);  // (B, T, C) -> (B, T, C)

 private:
  Activation activation_;
  ColumnParallelLinear gate_{nullptr};  // only for the gated activations
  ColumnParallelLinear up_{nullptr};
  RowParallelLinear down_{nullptr};
};
TORCH_MODULE(Mlp);

}  // namespace loom
