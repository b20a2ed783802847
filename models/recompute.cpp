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
  bool autocast = false;
  at::ScalarType autocast_dtype = at::kBFloat16;
  torch::Device device = torch::kCPU;

  static RunState capture(torch::Device device) {
    RunState s;
    s.device = device;
    s.rng = generator(device).get_state();
    s.autocast = at::autocast::is_autocast_enabled(device.type());
    s.autocast_dtype = at::autocast::get_autocast_dtype(device.type());
    return s;
  }
  void restore() const {
    generator(device).set_state(rng);
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
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const Recomputable* fn) {
    // Function::apply runs this without grad mode: fn keeps no graph and no activations.
    const auto state = RunState::capture(x.device());
    ctx->saved_data["fn"] = reinterpret_cast<int64_t>(fn);
    ctx->saved_data["rng"] = state.rng;
    ctx->saved_data["autocast"] = state.autocast;
    ctx->saved_data["autocast_dtype"] = static_cast<int64_t>(state.autocast_dtype);
    ctx->save_for_backward({x});
    return (*fn)(x);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto* fn = reinterpret_cast<const Recomputable*>(ctx->saved_data["fn"].toInt());
    const auto x = ctx->get_saved_variables()[0];
    RunState first;
    first.device = x.device();
    first.rng = ctx->saved_data["rng"].toTensor();
    first.autocast = ctx->saved_data["autocast"].toBool();
    first.autocast_dtype = static_cast<at::ScalarType>(ctx->saved_data["autocast_dtype"].toInt());
    const auto now = RunState::capture(x.device());  // the backward pass's own state, put back afterwards
    first.restore();
    torch::Tensor input, output;
    {
      torch::AutoGradMode grad(true);
      input = x.detach().requires_grad_(true);
      output = (*fn)(input);
    }
    now.restore();
    torch::autograd::backward({output}, {grad_outputs[0]});  // fills fn's parameter gradients and input.grad
    return {input.grad(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor recompute_in_backward(const Recomputable& fn, const torch::Tensor& x) {
  if (!torch::GradMode::is_enabled() || !x.requires_grad()) return fn(x);
  return Recompute::apply(x, &fn);
}

}  // namespace loom
