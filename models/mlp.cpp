#include "models/mlp.h"

#include "core/error.h"
#include "models/gelu.h"
#include "models/layers.h"

namespace loom {

MlpImpl::MlpImpl(const MlpOptions& o) : activation_(o.activation) {
  const bool gated = o.activation == Activation::kSwiglu || o.activation == Activation::kGeglu;
  const ParallelLinearOptions in{o.d_model, o.d_ff, o.bias, o.init_std, o.tp, {}, o.sequence_parallel};
  if (gated) gate_ = register_module("gate", ColumnParallelLinear(in));
  up_ = register_module("up", ColumnParallelLinear(in));
  down_ = register_module("down", RowParallelLinear(ParallelLinearOptions{o.d_ff, o.d_model, o.bias, o.out_init_std,
                                                                          o.tp, {}, o.sequence_parallel}));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) {
  switch (activation_) {
    case Activation::kGelu: return down_->forward(gelu_tanh(up_->forward(x)));
    case Activation::kRelu: return down_->forward(torch::relu(up_->forward(x)));
    case Activation::kSwiglu: return down_->forward(torch::silu(gate_->forward(x)) * up_->forward(x));
    case Activation::kGeglu: return down_->forward(gelu_tanh(gate_->forward(x)) * up_->forward(x));
  }
  throw Error("unreachable activation");
}

}  // namespace loom
