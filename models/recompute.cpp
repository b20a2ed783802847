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
torch::Tensor run_segments(const RecomputeSegments& segments, torch::Tensor x, const RecomputeSide& side, size_t count) {
  for (size_t i = 0; i < count; ++i) x = segments[i](x, side);
  return x;
}

bool needs_gradient(const torch::Tensor& t) { return t.defined() && t.requires_grad(); }

// The side tensors that need gradient: inputs of the node, in side's order.
std::vector<torch::Tensor> differentiable(const RecomputeSide& side) {
  std::vector<torch::Tensor> out;
  for (const auto& t : side)
    if (needs_gradient(t)) out.push_back(t);
  return out;
}

thread_local int recompute_depth = 0;
thread_local RecomputeStash* current_stash = nullptr;

// Makes `stash` the current one for a scope (and puts back the one before: a recompute inside another's run).
struct StashScope {
  explicit StashScope(RecomputeStash* stash) : before(current_stash) { current_stash = stash; }
  ~StashScope() { current_stash = before; }
  RecomputeStash* before;
};

class Recompute : public torch::autograd::Function<Recompute> {
 public:
  // x and side_inputs (differentiable(side)) are the node's inputs; side goes by pointer (an undefined
  // tensor argument is refused as an input) and is saved whole.
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               at::TensorList side_inputs, const RecomputeSegments* segments,
                               TensorParallelRng* tp_rng, const RecomputeSide* side_given) {
    // Function::apply runs this without grad mode: fn keeps no graph and no activations.
    const auto state = RunState::capture(x.device(), tp_rng);
    ctx->saved_data["segments"] = reinterpret_cast<int64_t>(segments);
    ctx->saved_data["tp_rng"] = reinterpret_cast<int64_t>(tp_rng);
    ctx->saved_data["rng"] = state.rng;
    if (tp_rng != nullptr) ctx->saved_data["tp_rng_state"] = state.tp_stream;
    ctx->saved_data["autocast"] = state.autocast;
    ctx->saved_data["autocast_dtype"] = static_cast<int64_t>(state.autocast_dtype);
    const RecomputeSide side = *side_given;  // the caller's, alive during this call
    std::vector<int64_t> wanted;
    for (size_t i = 0; i < side.size(); ++i)
      if (needs_gradient(side[i])) wanted.push_back(static_cast<int64_t>(i));
    TORCH_CHECK(wanted.size() == side_inputs.size(), "recompute: the side inputs are not the side's differentiable tensors");
    ctx->saved_data["differentiable"] = wanted;
    torch::autograd::variable_list saved{x};
    saved.insert(saved.end(), side.begin(), side.end());
    ctx->save_for_backward(saved);
    auto stash = c10::make_intrusive<RecomputeStash>();
    ctx->saved_data["stash"] = c10::IValue::make_capsule(stash);
    StashScope scope(stash.get());
    return run_segments(*segments, x, side, segments->size());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto& segments = *reinterpret_cast<const RecomputeSegments*>(ctx->saved_data["segments"].toInt());
    auto* tp_rng = reinterpret_cast<TensorParallelRng*>(ctx->saved_data["tp_rng"].toInt());
    const auto saved = ctx->get_saved_variables();
    const auto x = saved[0];
    const RecomputeSide side(saved.begin() + 1, saved.end());
    const auto wanted = ctx->saved_data["differentiable"].toIntVector();
    RunState first;
    first.device = x.device();
    first.rng = ctx->saved_data["rng"].toTensor();
    if (tp_rng != nullptr) first.tp_stream = ctx->saved_data["tp_rng_state"].toTensor();
    first.autocast = ctx->saved_data["autocast"].toBool();
    first.autocast_dtype = static_cast<at::ScalarType>(ctx->saved_data["autocast_dtype"].toInt());
    const auto now = RunState::capture(x.device(), tp_rng);  // the backward pass's own state, put back afterwards
    const auto stash = c10::static_intrusive_pointer_cast<RecomputeStash>(ctx->saved_data["stash"].toCapsule());
    StashScope scope(stash.get());
    ++recompute_depth;
    struct Leave {
      ~Leave() { --recompute_depth; }
    } leave;
    auto grad = grad_outputs[0];
    std::vector<torch::Tensor> side_grads(wanted.size());
    for (size_t i = segments.size(); i-- > 0;) {
      // The segments before i advance the generators exactly as in the first run, so segment i draws the
      // same dropout masks.
      first.restore(tp_rng);
      RecomputeSide leaves = side;  // the differentiable side tensors as leaves of this re-run
      for (const auto w : wanted) leaves[w] = side[w].detach().requires_grad_(true);
      torch::Tensor input, output;
      {
        torch::Tensor segment_input;
        {
          torch::NoGradGuard no_grad;
          segment_input = run_segments(segments, x, leaves, i);
        }
        torch::AutoGradMode grad_mode(true);
        input = segment_input.detach().requires_grad_(true);
        output = segments[i](input, leaves);
      }
      now.restore(tp_rng);
      torch::autograd::backward({output}, {grad});  // fills the segment's parameter gradients and input.grad
      grad = input.grad();
      for (size_t k = 0; k < wanted.size(); ++k) {
        const auto g = leaves[wanted[k]].grad();
        if (g.defined()) side_grads[k] = side_grads[k].defined() ? side_grads[k] + g : g;
      }
    }
    torch::autograd::variable_list out{grad};
    out.insert(out.end(), side_grads.begin(), side_grads.end());
    out.insert(out.end(), {torch::Tensor(), torch::Tensor(), torch::Tensor()});  // segments, tp_rng, side
    return out;
  }
};

}  // namespace

bool recomputing() { return recompute_depth > 0; }
RecomputeStash* recompute_stash() { return current_stash; }

torch::Tensor recompute_in_backward(const RecomputeSegments& segments, const torch::Tensor& x,
                                   TensorParallelRng* tp_rng, const RecomputeSide& side) {
  TORCH_CHECK(!segments.empty(), "recompute_in_backward: no segments");
  const auto side_inputs = differentiable(side);
  if (!torch::GradMode::is_enabled() || (!x.requires_grad() && side_inputs.empty()))
    return run_segments(segments, x, side, segments.size());
  return Recompute::apply(x, at::TensorList(side_inputs), &segments, tp_rng, &side);
}

}  // namespace loom
