#include "models/mlp.h"

#include "core/error.h"
#include "models/gelu.h"
#include "models/layers.h"

namespace loom {

MlpImpl::MlpImpl(const MlpOptions& o) : activation_(o.activation) {
  const bool gated = o.activation == Activation::kSwiglu || o.activation == Activation::kGeglu;
  ParallelLinearOptions in;
  in.in = o.d_model;
  in.out = o.d_ff;
  in.bias = o.bias;
  in.init_std = o.init_std;
  in.tp = o.tp;
  if (gated) gate_ = register_module("gate", ColumnParallelLinear(in));
  up_ = register_module("up", ColumnParallelLinear(in));
  ParallelLinearOptions out = in;
  out.in = o.d_ff;
  out.out = o.d_model;
  out.init_std = o.out_init_std;
  down_ = register_module("down", RowParallelLinear(out));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) {
  switch (activation_) {
    case Activation::kGelu: return down_->forward(gelu_tanh(up_->forward(x)));
    case Activation::kRelu: return down_->forward(torch::relu(up_->forward(x)));
    case Activation::kSwiglu: return down_->forward(torch::silu(gate_->forward(x)) * up_->forward(x));
    case Activation::kGeglu: return down_->forward(gelu_tanh(gate_->forward(x)) * up_->forward(x));
    case Activation::kGeluErf: return down_->forward(torch::gelu(up_->forward(x)));
  }
  throw Error("unreachable activation");
}

}  // namespace loom
