#include "models/recompute.h"

#include <ATen/autocast_mode.h>

#ifdef LOOM_CUDA
#include <ATen/cuda/CUDAGeneratorImpl.h>
#endif

namespace loom {
namespace {

// Everything a re-run must see as the first run did: the generator that dropout draws from and autocast.
struct RunState {
  torch::Tensor rng;
  torch::Tensor tp_stream;  // the tensor-parallel stream's, when there is one
  bool autocast = false;
  at::ScalarType autocast_dtype = at::kBFloat16;
  torch::Device device = torch::kCPU;

  static RunState capture(torch::Device device, TensorParallelRng* tp_rng) {
    RunState s;
    s.device = device;
    s.rng = generator(device).get_state();
    if (tp_rng != nullptr) s.tp_stream = tp_rng->state(device);
    s.autocast = at::autocast::is_autocast_enabled(device.type());
    s.autocast_dtype = at::autocast::get_autocast_dtype(device.type());
    return s;
  }
  void restore(TensorParallelRng* tp_rng) const {
    generator(device).set_state(rng);
    if (tp_rng != nullptr) tp_rng->set_state(device, tp_stream);
    at::autocast::set_autocast_enabled(device.type(), autocast);
    at::autocast::set_autocast_dtype(device.type(), autocast_dtype);
  }
  static at::Generator generator(torch::Device device) {
#ifdef LOOM_CUDA
    if (device.is_cuda()) return at::cuda::detail::getDefaultCUDAGenerator(device.index());
#endif
    (void)device;
    return at::detail::getDefaultCPUGenerator();
  }
};

class Recompute : public torch::autograd::Function<Recompute> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const Recomputable* fn,
                               TensorParallelRng* tp_rng) {
    // Function::apply runs this without grad mode: fn keeps no graph and no activations.
    const auto state = RunState::capture(x.device(), tp_rng);
    ctx->saved_data["fn"] = reinterpret_cast<int64_t>(fn);
    ctx->saved_data["tp_rng"] = reinterpret_cast<int64_t>(tp_rng);
    ctx->saved_data["rng"] = state.rng;
    if (tp_rng != nullptr) ctx->saved_data["tp_rng_state"] = state.tp_stream;
    ctx->saved_data["autocast"] = state.autocast;
    ctx->saved_data["autocast_dtype"] = static_cast<int64_t>(state.autocast_dtype);
    ctx->save_for_backward({x});
    return (*fn)(x);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto* fn = reinterpret_cast<const Recomputable*>(ctx->saved_data["fn"].toInt());
    auto* tp_rng = reinterpret_cast<TensorParallelRng*>(ctx->saved_data["tp_rng"].toInt());
    const auto x = ctx->get_saved_variables()[0];
    RunState first;
    first.device = x.device();
    first.rng = ctx->saved_data["rng"].toTensor();
    if (tp_rng != nullptr) first.tp_stream = ctx->saved_data["tp_rng_state"].toTensor();
    first.autocast = ctx->saved_data["autocast"].toBool();
    first.autocast_dtype = static_cast<at::ScalarType>(ctx->saved_data["autocast_dtype"].toInt());
    const auto now = RunState::capture(x.device(), tp_rng);  // the backward pass's own state, put back afterwards
    first.restore(tp_rng);
    torch::Tensor input, output;
    {
      torch::AutoGradMode grad(true);
      input = x.detach().requires_grad_(true);
      output = (*fn)(input);
    }
    now.restore(tp_rng);
    torch::autograd::backward({output}, {grad_outputs[0]});  // fills fn's parameter gradients and input.grad
    return {input.grad(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor recompute_in_backward(const Recomputable& fn, const torch::Tensor& x, TensorParallelRng* tp_rng) {
  if (!torch::GradMode::is_enabled() || !x.requires_grad()) return fn(x);
  return Recompute::apply(x, &fn, tp_rng);
}

}  // namespace loom
