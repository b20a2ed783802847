// The position-wise feed-forward block: Linear(C, F) -> GELU (tanh approximation, as GPT-2) -> Linear(F, C).
#pragma once
#include <torch/torch.h>

namespace loom {

struct MlpOptions {
  int64_t d_model = 0;
  int64_t d_ff = 0;
  double init_std = 0.02;
  double out_init_std = 0.02;
};

class MlpImpl : public torch::nn::Module {
 public:
  explicit MlpImpl(const MlpOptions& options);
  torch::Tensor forward(const torch::Tensor& x);  // (B, T, C) -> (B, T, C)

 private:
  torch::nn::Linear up_{nullptr};
  torch::nn::Linear down_{nullptr};
};
TORCH_MODULE(Mlp);

}  // namespace loom
