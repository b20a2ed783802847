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

// segments[count-1](...segments[0](x)), x itself for count 0.
torch::Tensor run_segments(const RecomputeSegments& segments, torch::Tensor x, const torch::Tensor& context,
                           size_t count) {
  for (size_t i = 0; i < count; ++i) x = segments[i](x, context);
  return x;
}

class Recompute : public torch::autograd::Function<Recompute> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const RecomputeSegments* segments, TensorParallelRng* tp_rng,
                               const torch::Tensor* context_given) {
    // Function::apply runs this without grad mode: fn keeps no graph and no activations.
    const auto state = RunState::capture(x.device(), tp_rng);
    ctx->saved_data["segments"] = reinterpret_cast<int64_t>(segments);
    ctx->saved_data["tp_rng"] = reinterpret_cast<int64_t>(tp_rng);
    ctx->saved_data["rng"] = state.rng;
    if (tp_rng != nullptr) ctx->saved_data["tp_rng_state"] = state.tp_stream;
    ctx->saved_data["autocast"] = state.autocast;
    ctx->saved_data["autocast_dtype"] = static_cast<int64_t>(state.autocast_dtype);
    const torch::Tensor context = *context_given;  // the caller's, alive during this call
    ctx->saved_data["context"] = context;
    ctx->save_for_backward({x});
    return run_segments(*segments, x, context, segments->size());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto& segments = *reinterpret_cast<const RecomputeSegments*>(ctx->saved_data["segments"].toInt());
    auto* tp_rng = reinterpret_cast<TensorParallelRng*>(ctx->saved_data["tp_rng"].toInt());
    const auto x = ctx->get_saved_variables()[0];
    const auto& context_value = ctx->saved_data["context"];
    const torch::Tensor context = context_value.isTensor() ? context_value.toTensor() : torch::Tensor();
    RunState first;
    first.device = x.device();
    first.rng = ctx->saved_data["rng"].toTensor();
    if (tp_rng != nullptr) first.tp_stream = ctx->saved_data["tp_rng_state"].toTensor();
    first.autocast = ctx->saved_data["autocast"].toBool();
    first.autocast_dtype = static_cast<at::ScalarType>(ctx->saved_data["autocast_dtype"].toInt());
    const auto now = RunState::capture(x.device(), tp_rng);  // the backward pass's own state, put back afterwards
    auto grad = grad_outputs[0];
    for (size_t i = segments.size(); i-- > 0;) {
      // The segments before i advance the generators exactly as in the first run, so segment i draws the
      // same dropout masks.
      first.restore(tp_rng);
      torch::Tensor input, output;
      {
        torch::Tensor segment_input;
        {
          torch::NoGradGuard no_grad;
          segment_input = run_segments(segments, x, context, i);
        }
        torch::AutoGradMode grad_mode(true);
        input = segment_input.detach().requires_grad_(true);
        output = segments[i](input, context);
      }
      now.restore(tp_rng);
      torch::autograd::backward({output}, {grad});  // fills the segment's parameter gradients and input.grad
      grad = input.grad();
    }
    return {grad, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor recompute_in_backward(const RecomputeSegments& segments, const torch::Tensor& x,
                                   TensorParallelRng* tp_rng, const torch::Tensor& context) {
  TORCH_CHECK(!segments.empty(), "recompute_in_backward: no segments");
  if (!torch::GradMode::is_enabled() || !x.requires_grad()) return run_segments(segments, x, context, segments.size());
  // The context goes by pointer: as a tensor argument it would be an input edge of the Function (and an
  // undefined one is refused).
  return Recompute::apply(x, &segments, tp_rng, &context);
}

}  // namespace loom
