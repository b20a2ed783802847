#include "train/pipeline_runner.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include "core/error.h"

namespace loom {
namespace {

// Tensor i of a stage's outputs travels forward with tag kActivationTag + 2i, its gradient back with
// kGradientTag + 2i: each of the (few) tensors between two stages its own message stream.
constexpr int kActivationTag = 1;  // forward: stage s -> s + 1
constexpr int kGradientTag = 2;    // backward: stage s + 1 -> s
int tag_of(int base, size_t i) { return base + 2 * static_cast<int>(i); }

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// What a micro-batch's forward leaves for its backward.
struct InFlight {
  std::vector<torch::Tensor> inputs;   // received from the previous stage (requiring grad); none on the first
  std::vector<torch::Tensor> outputs;  // sent to the next stage, or the scalar to backpropagate on the last
};

}  // namespace

torch::Tensor run_pipeline(Task& task, const std::vector<TaskBatch>& batches, const Mesh& mesh,
                           PipelineSchedule schedule, torch::Device device, const PipelineStep& step,
                           PipelineStats* stats) {
  Communicator& pp_group = mesh.device_group(MeshAxis::kPp);
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
  const torch::Tensor tied = step.train ? task.model().stage_tied_embedding() : torch::Tensor();

  PipelineStats local;
  // Waited for at the end, for their errors: a sent tensor itself is freed once the send completes (the
  // communicator holds it only until then).
  std::vector<std::shared_ptr<Work>> sends;
  std::vector<InFlight> in_flight(static_cast<size_t>(m));
  auto loss_sum = torch::zeros({}, torch::TensorOptions(torch::kDouble).device(device));
  // What passes between stages travels in fp32, or in bf16 when the weights are bf16
  // (precision.param_dtype): their stages compute and hand on bf16 activations, as one process would.
  const auto parameters = task.model().parameters();
  const bool bf16_weights = !parameters.empty() && parameters.front().scalar_type() == torch::kBFloat16;
  const auto message_dtype = bf16_weights ? torch::kBFloat16 : torch::kFloat;
  const auto message_options = torch::TensorOptions(message_dtype).device(device);
  // Blocks for a message; the wait is idle time.
  auto receive = [&](std::vector<int64_t> shape, int peer, int tag) {
    auto buffer = torch::empty(shape, message_options);
    const auto start = Clock::now();
    pp_group.recv(buffer, peer, tag);
    local.idle_s += since(start);
    return buffer;
  };
  for (size_t i = 0; i < actions.size(); ++i) {
    const auto& action = actions[i];
    auto& slot = in_flight[static_cast<size_t>(action.micro)];
    if (step.train && step.next_pass)
      step.next_pass(i + 1 == actions.size()                             ? NextPass::kNone
                     : actions[i + 1].kind == PipelineAction::kForward ? NextPass::kForward
                                                                       : NextPass::kBackward);
    const auto& batch = batches[static_cast<size_t>(action.micro)];
    if (step.train && step.before_pass) step.before_pass(action.micro);
    // What passes between stages has the shapes the batch gives (stage_output_shapes: the GPT's (B, T, C),
    // or a TP rank's sequence shard (B, T / tp, C) under sequence parallelism), sent in message_dtype
    // whatever autocast computed in.
    if (action.kind == PipelineAction::kForward) {
      if (!first) {
        const auto shapes = task.stage_output_shapes(batch);
        for (size_t k = 0; k < shapes.size(); ++k)
          slot.inputs.push_back(
              receive(shapes[k], static_cast<int>(stage - 1), tag_of(kActivationTag, k)).requires_grad_(step.train));
      }
      const auto start = Clock::now();
      auto outs = task.stage_forward(batch, device, slot.inputs, step.label_smoothing);
      if (last) {
        const auto& loss = outs.at(0);
        const int64_t tokens =
            step.micro_tokens.empty() ? batch.loss_tokens() : step.micro_tokens.at(static_cast<size_t>(action.micro));
        loss_sum += loss.detach().to(torch::kDouble) * static_cast<double>(tokens);
        if (step.train) slot.outputs = {step.backward_loss(loss, action.micro)};
      } else {
        for (size_t k = 0; k < outs.size(); ++k)
          sends.push_back(pp_group.send_async(outs[k].detach().to(message_dtype).contiguous(),
                                              static_cast<int>(stage + 1), tag_of(kActivationTag, k)));
        if (step.train) slot.outputs = std::move(outs);
      }
      if (!step.train) slot = {};
      local.forward_s += since(start);
    } else {
      std::vector<torch::Tensor> grads;
      if (!last)
        for (size_t k = 0; k < slot.outputs.size(); ++k)
          grads.push_back(receive(slot.outputs[k].sizes().vec(), static_cast<int>(stage + 1), tag_of(kGradientTag, k)));
      const auto start = Clock::now();
      if (static_cast<int64_t>(i) == last_backward && !tied.defined() && step.start_gradient_sync)
        step.start_gradient_sync();
      if (last) {
        slot.outputs.at(0).backward();
      } else {
        // An output may be an input passed on unchanged (the encoder-decoder's memory through a decoder
        // stage): its gradient from the next stage then adds to what this stage's own use contributes.
        std::vector<torch::Tensor> roots, root_grads;
        for (size_t k = 0; k < slot.outputs.size(); ++k) {
          if (!slot.outputs[k].requires_grad()) continue;
          roots.push_back(slot.outputs[k]);
          root_grads.push_back(grads[k].to(slot.outputs[k].scalar_type()));
        }
        torch::autograd::backward(roots, root_grads);
      }
      if (step.end_backward) step.end_backward();
      for (size_t k = 0; k < slot.inputs.size(); ++k) {
        const auto& grad = slot.inputs[k].grad();
        LOOM_CHECK(grad.defined(), "pipeline stage ", stage, ": no gradient reached its input ", k);
        sends.push_back(pp_group.send_async(grad.to(message_dtype).contiguous(), static_cast<int>(stage - 1),
                                            tag_of(kGradientTag, k)));
      }
      slot = {};  // frees the micro-batch's activations
      local.backward_s += since(start);
    }
  }
  const auto start = Clock::now();
  for (auto& send : sends) send->wait();
  local.idle_s += since(start);
  if (stats != nullptr) {
    stats->forward_s += local.forward_s;
    stats->backward_s += local.backward_s;
    stats->idle_s += local.idle_s;
  }
  // The first and the last stage each hold the tied parameter and gave it part of its gradient.
  if (tied.defined()) {
    if (tied.grad().defined()) mesh.embedding_group().all_reduce(tied.grad());
    if (step.start_gradient_sync) step.start_gradient_sync();
  }
  return loss_sum;
}

}  // namespace loom
