#include "train/nonfinite_guard.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"

namespace loom {
namespace {

constexpr int64_t kGuardMessageBytes = 512;

// Sends `text` from rank `root` to every rank of the group.
std::string broadcast_text(Communicator& group, const std::string& text, int root) {
  auto bytes = torch::zeros({kGuardMessageBytes}, torch::kUInt8);
  if (group.rank() == root)
    std::memcpy(bytes.data_ptr<uint8_t>(), text.data(), std::min<size_t>(text.size(), kGuardMessageBytes - 1));
  group.broadcast(bytes, root);
  return reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>());
}

}  // namespace

StepHealth NonFiniteGuard::check(int64_t step, double local_loss, bool gradients_finite, bool overflow_expected,
                                 const Mesh& mesh, const std::function<std::string()>& describe_gradients,
                                 TrainState& state) const {
  Communicator& world = mesh.world();
  const bool loss_finite = std::isfinite(local_loss);
  // The lowest rank with each problem, as size - rank under a max (0: no rank).
  const auto mark = [&](bool problem) { return problem ? static_cast<int>(world.size() - world.rank()) : 0; };
  auto flags = torch::tensor({mark(!loss_finite), mark(!gradients_finite)}, torch::kInt);
  if (world.size() > 1) world.all_reduce(flags, ReduceOp::kMax);
  const int loss_rank = world.size() - flags[0].item<int>();  // == size: none
  const int gradient_rank = world.size() - flags[1].item<int>();

  StepHealth health;
  health.gradients_finite = gradient_rank == world.size();
  health.update = loss_rank == world.size() && health.gradients_finite;
  health.bad = loss_rank < world.size() || (!health.gradients_finite && !overflow_expected);
  if (health.bad) {
    // A non-finite loss is the cause of the non-finite gradients that follow from it: name it first.
    const int culprit = loss_rank < world.size() ? loss_rank : gradient_rank;
    std::string what;
    if (world.rank() == culprit)
      what = (loss_rank == culprit ? "non-finite loss (" + fmt::format("{}", local_loss) + ")"
                                   : "non-finite " + describe_gradients()) +
             " on rank " + std::to_string(mesh.rank()) + " (" + mesh.coords_name() + ")";
    health.what = world.size() > 1 ? broadcast_text(world, what, culprit) : what;
  }
  if (!health.update) state.skipped_steps += 1;
  state.bad_streak = health.bad ? state.bad_streak + 1 : 0;
  if (!health.bad) return health;
  if (max_bad_steps_ > 0 && state.bad_streak >= max_bad_steps_)
    throw Error("step " + std::to_string(step) + ": " + health.what + "; " + std::to_string(state.bad_streak) +
                " bad steps in a row (train.max_bad_steps=" + std::to_string(max_bad_steps_) +
                "): stopping. The checkpoints hold no bad step; look for bad data near this step or lower "
                "optim.lr, then run again to resume from the last checkpoint");
  spdlog::warn("step {}: {}; step skipped ({} in a row, train.max_bad_steps={})", step, health.what, state.bad_streak,
               max_bad_steps_);
  return health;
}

std::string first_nonfinite_gradient(const std::vector<torch::Tensor>& optimizer_parameters,
                                      const std::vector<std::vector<ParameterSlice>>& slices,
                                      const torch::nn::Module& model) {
  torch::NoGradGuard no_grad;
  const auto named = model.named_parameters();
  for (size_t i = 0; i < optimizer_parameters.size(); ++i) {
    const auto& grad = optimizer_parameters[i].grad();
    if (!grad.defined() || torch::isfinite(grad).all().item<bool>()) continue;
    for (const auto& slice : i < slices.size() ? slices[i] : std::vector<ParameterSlice>{}) {
      if (torch::isfinite(grad.reshape(-1).narrow(0, slice.offset, slice.length)).all().item<bool>()) continue;
      for (const auto& p : named)
        if (p.value().is_same(slice.parameter)) return "gradient of " + p.key();
    }
  }
  return "gradients";
}

}  // namespace loom
