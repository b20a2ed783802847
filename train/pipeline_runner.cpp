#include "train/pipeline_runner.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include "core/error.h"

namespace loom {
namespace {

constexpr int kActivationTag = 1;  // forward: stage s -> s + 1
constexpr int kGradientTag = 2;    // backward: stage s + 1 -> s

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// What a micro-batch's forward leaves for its backward.
struct InFlight {
  torch::Tensor input;   // received from the previous stage (requires grad); undefined on the first stage
  torch::Tensor output;  // sent to the next stage, or the scalar to backpropagate on the last
};

}  // namespace

torch::Tensor run_pipeline(Task& task, const std::vector<TaskBatch>& batches, Communicator& pp_group,
                           PipelineSchedule schedule, torch::Device device, const PipelineStep& step,
                           PipelineStats* stats) {
  const int64_t stages = pp_group.size(), stage = pp_group.rank();
  const bool first = stage == 0, last = stage == stages - 1;
  const auto m = static_cast<int64_t>(batches.size());
  LOOM_CHECK(!step.train || !last || step.backward_loss, "run_pipeline: the last stage needs backward_loss");
  auto actions = pipeline_actions(schedule, stages, stage, m);
  if (!step.train)
    actions.erase(std::remove_if(actions.begin(), actions.end(),
                                 [](const PipelineAction& a) { return a.kind == PipelineAction::kBackward; }),
                  actions.end());
  int64_t last_backward = -1;
  for (size_t i = 0; i < actions.size(); ++i)
    if (actions[i].kind == PipelineAction::kBackward) last_backward = static_cast<int64_t>(i);

  PipelineStats local;
  std::vector<std::shared_ptr<Work>> sends;  // waited for at the end: their tensors stay alive till then
  std::vector<InFlight> in_flight(static_cast<size_t>(m));
  auto loss_sum = torch::zeros({}, torch::TensorOptions(torch::kDouble).device(device));
  const auto float_options = torch::TensorOptions(torch::kFloat).device(device);
  // Blocks for a message; the wait is idle time.
  auto receive = [&](std::vector<int64_t> shape, int peer, int tag) {
    auto buffer = torch::empty(shape, float_options);
    const auto start = Clock::now();
    pp_group.recv(buffer, peer, tag);
    local.idle_s += since(start);
    return buffer;
  };
  for (size_t i = 0; i < actions.size(); ++i) {
    const auto& action = actions[i];
    auto& slot = in_flight[static_cast<size_t>(action.micro)];
    const auto& batch = batches[static_cast<size_t>(action.micro)];
    // Shapes of what passes between stages: (B, T, C), sent in fp32 whatever autocast computed in.
    if (action.kind == PipelineAction::kForward) {
      if (!first) slot.input = receive(task.stage_output_shape(batch), static_cast<int>(stage - 1), kActivationTag)
                                   .requires_grad_(step.train);
      const auto start = Clock::now();
      auto out = task.stage_forward(batch, device, slot.input, step.label_smoothing);
      if (last) {
        loss_sum += out.detach().to(torch::kDouble) * static_cast<double>(batch_tokens(batch));
        if (step.train) slot.output = step.backward_loss(out, action.micro);
      } else {
        sends.push_back(pp_group.send_async(out.detach().to(torch::kFloat).contiguous(), static_cast<int>(stage + 1),
                                            kActivationTag));
        if (step.train) slot.output = out;
      }
      if (!step.train) slot = {};
      local.busy_s += since(start);
    } else {
      torch::Tensor grad;
      if (!last) grad = receive(slot.output.sizes().vec(), static_cast<int>(stage + 1), kGradientTag);
      const auto start = Clock::now();
      if (static_cast<int64_t>(i) == last_backward && step.before_last_backward) step.before_last_backward();
      if (last) {
        slot.output.backward();
      } else {
        torch::autograd::backward({slot.output}, {grad.to(slot.output.scalar_type())});
      }
      if (!first) {
        LOOM_CHECK(slot.input.grad().defined(), "pipeline stage ", stage, ": no gradient reached its input");
        sends.push_back(pp_group.send_async(slot.input.grad().to(torch::kFloat).contiguous(),
                                            static_cast<int>(stage - 1), kGradientTag));
      }
      slot = {};  // frees the micro-batch's activations
      local.busy_s += since(start);
    }
  }
  const auto start = Clock::now();
  for (auto& send : sends) send->wait();
  local.idle_s += since(start);
  if (stats != nullptr) {
    stats->busy_s += local.busy_s;
    stats->idle_s += local.idle_s;
  }
  return loss_sum;
}

}  // namespace loom
