#include "train/trainer.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <limits>
#include <numeric>
#include <optional>

#include "core/cpu_allocator.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/logging.h"
#include "core/signals.h"
#include "data/corpus/batch_slices.h"
#include "models/estimates.h"
#include "models/moe_dispatch.h"
#include "optim/optimizer.h"
#include "train/expert_parallel.h"
#include "train/evaluate.h"
#include "train/memory_check.h"
#include "train/model_family.h"
#include "train/progress.h"
#include "train/runtime.h"

namespace loom {
namespace fs = std::filesystem;
namespace {

// The sum of a per-rank value over a group.
double sum_over(Communicator& group, double value) {
  auto t = torch::tensor({value}, torch::kDouble);
  group.all_reduce(t);
  return t.item<double>();
}

// The newest complete checkpoint, -1 for a fresh run. A run whose checkpoints are all broken is not started
// afresh over them: that would silently throw away the run.
int64_t resumable_checkpoint(const fs::path& run_dir) {
  if (auto step = latest_checkpoint(run_dir)) return *step;
  const auto broken = checkpoint_steps(run_dir);
  if (broken.empty()) return -1;
  std::string problems;
  for (int64_t step : broken)
    problems += "\n  " + checkpoint_dir(run_dir, step).string() + ": " +
                checkpoint_problem(checkpoint_dir(run_dir, step)).value_or("complete");
  throw Error("no complete checkpoint to resume in " + (run_dir / "checkpoints").string() + ":" + problems +
              "\nrestore the damaged files, or move those directories away to start the run again from step 0");
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

Trainer::Trainer(RunPlan plan, const ProcessGroup& processes, TaskData data)
    : plan_(std::move(plan)),
      config_(plan_.config()),
      device_(runtime_device(config_.runtime, processes.info().local_rank)),
      mesh_(config_, processes.world(config_.parallel.timeout_s), device_),
      context_parallelism_(&mesh_.device_group(kCpAxes)),
      schedule_(config_),
      loss_scaler_(config_.precision),
      nonfinite_guard_(config_.train.max_bad_steps),
      throughput_(config_.train.log_every) {
  if (processes.distributed()) set_log_tag("rank " + std::to_string(mesh_.rank()) + " " + mesh_.coords_name());
  const int64_t threads = configure_cpu(config_.runtime, processes.info().local_size);
  check_memory_fits(plan_, mesh_.coord(MeshAxis::kPp), device_, processes.info().local_size);  // before building
  task_ = make_task(config_, device_, data, nullptr, &mesh_.device_group(MeshAxis::kTp), mesh_.coord(MeshAxis::kPp),
                    context_parallelism_);
  if (!config_.model.init_from.empty() && !latest_checkpoint(config_.run.dir))  // a resumed run uses its checkpoint
    load_init_weights(config_, task_->model());
  split_experts(task_->model(), mesh_);  // parallel.ep: each rank keeps its experts
  moe_ = std::make_unique<MoeBalance>(config_.model, task_->model());
  // A pipeline stage's copy of the tied embedding gets the rest of its gradient after the last backward
  // (train/pipeline_runner.h): ZeRO-2 reduces its bucket then.
  std::vector<torch::Tensor> completed_late;
  if (auto tied = task_->model().stage_tied_embedding(); tied.defined()) completed_late.push_back(tied);
  // ZeRO-3: the model's units, each gathered around its forward and backward by the gradient sync.
  // Gradients are averaged over every rank holding the same parameters, dp x cp; ZeRO shards over its shard
  // group (all of them, or under hybrid sharding cp x dp_shard, replicated over dp_replicate).
  ShardingOptions sharding;
  sharding.zero = config_.parallel.zero;
  sharding.bucket_mb = config_.parallel.bucket_mb;
  sharding.param_dtype = config_.precision.param_dtype == ParamDtype::kBf16 ? torch::kBFloat16 : torch::kFloat;
  sharding.deferred = completed_late;
  if (sharding_strategy(sharding.zero).shards_parameters()) sharding.units = task_->model().parameter_units();
  LOOM_CHECK(!sharding_strategy(sharding.zero).shards_parameters() || !sharding.units.empty(),
             "parallel.zero 3: model.arch ", enum_name(config_.model.arch), " has no parameter units");
  sharding.reshard_after_forward = config_.parallel.reshard_after_forward;
  gradient_sync_ = std::make_unique<GradientSync>(
      sharded_parameters(task_->model(), mesh_, weight_decay_groups(task_->model())), sharding);
  task_->model().parallelize({config_.train.activation_checkpointing, gradient_sync_->parameter_units()});
  optimizer_ = make_adamw(gradient_sync_->optimizer_groups(), config_.optim);
  tp_sharded_ = tensor_parallel_ranges(task_->model(), gradient_sync_->optimizer_slices());
  // The last stage's copy of a tied embedding: its gradient is the first stage's, counted there.
  if (auto tied = task_->model().stage_tied_embedding(); tied.defined() && mesh_.last_stage())
    duplicated_ = parameter_ranges({tied}, gradient_sync_->optimizer_slices());
  spdlog::info("model: {} parameters, {} threads per rank, {} on {}, layout {}, {} gradient buckets",
               count_parameters(config_.model), threads, config_.precision.label(), device_.str(), mesh_.describe(),
               gradient_sync_->bucket_count());
}

void Trainer::resume_or_start() {
  const fs::path run_dir = config_.run.dir;
  if (is_leader()) {
    LOOM_CHECK(!fs::exists(run_dir) || fs::is_directory(run_dir), "run.dir ", run_dir.string(),
               " is a file, not a directory: set run.dir to a new or existing run directory");
    fs::create_directories(run_dir);
    write_file_atomic(run_dir / "config.yaml", to_yaml(config_));
  }
  // Rank 0 picks the checkpoint so that every rank resumes from the same one.
  auto chosen = torch::tensor({is_leader() ? resumable_checkpoint(run_dir) : int64_t{-1}}, torch::kLong);
  mesh_.world().broadcast(chosen, 0);
  if (const int64_t step = chosen.item<int64_t>(); step >= 0) {
    // The checkpoint fills what the optimizer steps (the fp32 values, master or ZeRO shards); the working
    // weights are made of them as after a step (zero 3: by the next forward's gathers).
    state_ = load_checkpoint(run_dir, step, mesh_, checkpoint_parts());
    gradient_sync_->gather_parameters();
    apply_group_options(*optimizer_, config_.optim);
    last_checkpoint_step_ = state_.step;
    spdlog::info("resumed from {} (step {}, {} tokens)", checkpoint_dir(run_dir, step).string(), state_.step,
                 state_.tokens);
  }
  if (is_leader()) metrics_ = std::make_unique<MetricsLog>(run_dir, state_.step);
}

TrainState Trainer::run() {
  resume_or_start();
  const int64_t max_steps = config_.train.max_steps;
  if (state_.step >= max_steps) {
    spdlog::info("nothing to do: the run is at step {} and train.max_steps is {}", state_.step, max_steps);
    return state_;
  }
  const auto session_start = std::chrono::steady_clock::now();
  const double elapsed_at_start = state_.elapsed_s;
  throughput_.start(session_start);
  ProgressBar progress(is_leader() && stderr_is_terminal());  // terminals only: log files stay plain lines
  while (state_.step < max_steps) {
    const StepResult result = step();
    throughput_.step_done(result.tokens);
    state_.elapsed_s = elapsed_at_start + seconds_since(session_start);
    if (progress.enabled()) {
      ProgressState shown;
      shown.step = state_.step;
      shown.max_steps = max_steps;
      shown.loss = result.loss;
      shown.tokens_per_s = throughput_.tokens_per_s();
      shown.elapsed_s = state_.elapsed_s;
      shown.eta_s = throughput_.eta_s(max_steps - state_.step);
      progress.update(shown);
    }

    const bool final_step = state_.step == max_steps;
    if (state_.step % config_.train.log_every == 0 || final_step) log_step(result);
    maybe_evaluate(final_step);
    const int64_t every = config_.checkpoint.every;
    if (final_step || (every > 0 && state_.step % every == 0)) checkpoint();
    if (any_rank_stopping()) {
      if (last_checkpoint_step_ != state_.step) checkpoint();
      spdlog::info("stopped by signal after step {}; `loom train` with the same run.dir resumes", state_.step);
      break;
    }
  }
  return state_;
}

StepResult Trainer::step() {
  const StepFaults faults = inject_step_faults(state_.step + 1, mesh_.rank());  // tests only (LOOM_FAULT_INJECTION)
  const double cp_waited_before = context_parallelism_.exchange_wait_s();
  const double ep_waited_before = expert_all_to_all_wait_s();
  PhaseClock clock(phases_, device_, synchronize_phases_);
  StepResult result;
  result.lr = schedule_.at(state_.step);
  set_learning_rate(*optimizer_, result.lr);
  const Backward backward = forward_backward(clock, faults);
  moe_->finish_step(mesh_);  // the step's routing statistics; the expert bias moves (model.moe)
  result.loss = backward.loss;
  result.tokens = backward.tokens;
  result.loss_tokens = backward.loss_tokens;
  if (faults.nan_grad)
    gradient_sync_->optimizer_parameters().front().grad().view(-1)[0].fill_(std::numeric_limits<double>::quiet_NaN());
  // One agreement over every rank on whether to update: no rank steps while another skips. With ZeRO-1
  // or TP the ranks' gradients differ, and a fault can corrupt one replica. fp16: the unscaling pass flags
  // inf/nan and the norm comes after it; otherwise the norm's pass is the check.
  std::optional<GradientNorm> norm;
  if (!loss_scaler_.enabled()) norm = global_gradient_norm();
  const bool local_finite = norm ? norm->local_finite : loss_scaler_.unscale(gradient_sync_->optimizer_parameters());
  const StepHealth health = nonfinite_guard_.check(
      state_.step + 1, backward.local_loss_sum, local_finite, loss_scaler_.enabled() && loss_scaler_.scale() > 1,
      mesh_,
      [&] {
        return first_nonfinite_gradient(gradient_sync_->optimizer_parameters(), gradient_sync_->optimizer_slices(),
                                        task_->model());
      },
      state_);
  if (health.update) {
    if (!norm) norm = global_gradient_norm();
    result.grad_norm = norm->norm;
    clip_gradients(gradient_sync_->optimizer_parameters(), config_.optim.grad_clip, norm->norm);
    optimizer_->step();
    gradient_sync_->gather_parameters();
  } else {
    result.skipped = true;
    result.grad_norm = std::numeric_limits<double>::infinity();
    if (!health.bad)
      spdlog::warn("step {}: fp16 gradients overflowed at loss scale {}; step skipped, scale now {}", state_.step + 1,
                   loss_scaler_.scale(), loss_scaler_.scale() * config_.precision.loss_scale_backoff);
  }
  loss_scaler_.update(health.gradients_finite);
  // The next step reuses this one's CPU blocks; the cache lets go of the ones it did not need.
  if (CachingCpuAllocator* allocator = caching_cpu_allocator()) allocator->trim();
  clock.lap(&StepPhases::optimizer_s);
  phases_.dp_wait_s = gradient_sync_->step_wait_s();
  phases_.cp_wait_s = context_parallelism_.exchange_wait_s() - cp_waited_before;
  phases_.ep_wait_s = expert_all_to_all_wait_s() - ep_waited_before;
  count_source_tokens();
  state_.step += 1;
  state_.tokens += result.tokens;
  return result;
}

void Trainer::count_source_tokens() {
  // Every rank counts the whole global batch (a pure function of the step), so every shard's state agrees.
  const auto tokens = task_->source_tokens(state_.step);
  if (tokens.empty()) return;
  if (state_.tokens_by_source.size() != tokens.size()) {
    if (!state_.tokens_by_source.empty())
      spdlog::warn("data.train has {} sources, the checkpoint counted {}: tokens_by_source counts from zero",
                   tokens.size(), state_.tokens_by_source.size());
    state_.tokens_by_source.assign(tokens.size(), 0);
  }
  for (size_t s = 0; s < tokens.size(); ++s) state_.tokens_by_source[s] += tokens[s];
}

GradientNorm Trainer::global_gradient_norm() {
  // With ZeRO-1/2/3 each rank holds a disjoint shard of the gradients: norms span the shard group (dp x cp, or
  // under hybrid sharding cp x dp_shard: replicas hold the same shards). Under TP the sharded parameters'
  // squares sum over the TP group and the replicated ones count once.
  // The sums of squares are CPU doubles by then: the host groups carry them.
  if (mesh_.ep() > 1)  // each expert counted once: its squares summed over the ep group too
    return expert_parallel_gradient_norm(task_->model(), mesh_, gradient_sync_->sharded(),
                                         gradient_sync_->optimizer_parameters(), gradient_sync_->optimizer_slices(),
                                         tp_sharded_, duplicated_);
  Communicator* shards = gradient_sync_->sharded() ? &mesh_.host_group(kShardAxes) : nullptr;
  return gradient_norm(gradient_sync_->optimizer_parameters(), shards, &mesh_.host_group(MeshAxis::kTp), tp_sharded_,
                       &mesh_.host_group(MeshAxis::kPp), duplicated_);
}

Trainer::Backward Trainer::forward_backward(PhaseClock& clock, const StepFaults& faults) {
  task_->model().train();
  gradient_sync_->zero_grad();
  const int64_t accumulation = config_.accumulation_steps(mesh_.dp());
  // The step's loss is the mean over every token of the global batch, however the batch is split: each
  // micro-batch's mean is weighted by its share of the global token count (times the dp x cp size, which
  // the gradient sync divides by again). Context-parallel ranks share a DP rank's sequences, each holding
  // and counting its part of their tokens.
  // A token-based batch may hold fewer pairs than there are slices: an empty slice runs the batch's
  // first pair with weight 0, so that its rank still takes part in the gradient all-reduce.
  // With SFT loss masks "tokens" here are the targets the loss counts; throughput counts every input.
  std::vector<TaskBatch> batches;
  std::vector<int64_t> tokens;  // per micro-batch: the tokens its loss counts for
  int64_t local_inputs = 0;
  for (const auto& slice :
       micro_batches(task_->train_batch_size(state_.step), mesh_.dp(), mesh_.coord(kDpAxes), accumulation)) {
    batches.push_back(task_->train_batch(state_.step, slice.count > 0 ? slice.first : 0, std::max<int64_t>(slice.count, 1)));
    tokens.push_back(slice.count > 0 ? batches.back().loss_tokens() : 0);
    local_inputs += slice.count > 0 ? batches.back().tokens() : 0;
  }
  Communicator& dp_sums = mesh_.host_group(kDataParallelAxes);
  Backward out;
  const int64_t local_tokens = std::accumulate(tokens.begin(), tokens.end(), int64_t{0});
  auto counts = torch::tensor({static_cast<double>(local_tokens), static_cast<double>(local_inputs)}, torch::kDouble);
  dp_sums.all_reduce(counts);
  out.loss_tokens = static_cast<int64_t>(counts[0].item<double>());
  out.tokens = static_cast<int64_t>(counts[1].item<double>());
  // A global batch of prompts only (SFT) has no target: its loss and gradients are 0, not 0 / 0.
  const double loss_divisor = std::max<double>(static_cast<double>(out.loss_tokens), 1.0);
  const double weight_per_token = static_cast<double>(mesh_.size(kDataParallelAxes)) / loss_divisor;
  const auto moe_tokens = moe_->whole_sequence_tokens(tokens, mesh_);  // the aux losses' weights (under cp)
  clock.lap(&StepPhases::data_s);
  if (mesh_.pp() > 1) {
    const PipelineStats before = pipeline_stats_;
    const auto loss_sum = pipeline_forward_backward(batches, tokens, moe_tokens, weight_per_token);
    // The stage's own forwards, backwards and waits; the rest (the tied embedding's sum, the DP sync not
    // hidden by the last backward) is gradient sync.
    clock.lap({{&StepPhases::forward_s, pipeline_stats_.forward_s - before.forward_s},
               {&StepPhases::backward_s, pipeline_stats_.backward_s - before.backward_s},
               {&StepPhases::pipeline_wait_s, pipeline_stats_.idle_s - before.idle_s}},
              &StepPhases::sync_s);
    out.local_loss_sum = loss_sum.item<double>();  // zero on all but the last stage
    auto sums = loss_sum.cpu().reshape({1});
    mesh_.host_group(MeshAxis::kPp).all_reduce(sums);  // the loss is known on the last stage only
    out.loss = sum_over(dp_sums, sums.item<double>()) / loss_divisor;
    clock.lap(&StepPhases::sync_s);
    return out;
  }
  // Summed over this rank's tokens on the device, read once at the end: no device wait per micro-batch.
  torch::Tensor loss_sum = torch::zeros({}, torch::TensorOptions(torch::kDouble).device(device_));
  AutocastGuard autocast(config_.precision, device_);
  for (int64_t m = 0; m < accumulation; ++m) {
    if (m == accumulation - 1) gradient_sync_->prepare_last_backward();
    const auto weight = static_cast<double>(tokens[m]);
    // MoE layers weight their aux losses as this micro-batch's loss is weighted below.
    moe_->set_loss_weight((loss_scaler_.enabled() ? loss_scaler_.scale() : 1.0) *
                          static_cast<double>(moe_tokens[m]) * weight_per_token);
    gradient_sync_->set_next_pass(NextPass::kBackward);
    auto loss = task_->loss(batches[m], device_, config_.optim.label_smoothing);
    if (faults.nan_loss) loss = loss * std::numeric_limits<double>::quiet_NaN();
    clock.lap(&StepPhases::forward_s);
    gradient_sync_->set_next_pass(m + 1 < accumulation ? NextPass::kForward : NextPass::kNone);
    (loss_scaler_.scale_loss(loss) * (weight * weight_per_token)).backward();
    gradient_sync_->end_backward();
    loss_sum += loss.detach() * weight;
    clock.lap(&StepPhases::backward_s);
  }
  gradient_sync_->finish();
  out.local_loss_sum = loss_sum.item<double>();
  out.loss = sum_over(dp_sums, out.local_loss_sum) / loss_divisor;
  clock.lap(&StepPhases::sync_s);
  return out;
}

torch::Tensor Trainer::pipeline_forward_backward(const std::vector<TaskBatch>& batches,
                                                 const std::vector<int64_t>& tokens,
                                                 const std::vector<int64_t>& moe_tokens, double weight_per_token) {
  AutocastGuard autocast(config_.precision, device_);
  PipelineStep step;
  step.label_smoothing = config_.optim.label_smoothing;
  step.micro_tokens = tokens;  // an empty slice's stand-in pair counts 0
  step.backward_loss = [&](const torch::Tensor& loss, int64_t m) {
    return loss_scaler_.scale_loss(loss) * (static_cast<double>(tokens[static_cast<size_t>(m)]) * weight_per_token);
  };
  step.start_gradient_sync = [this] { gradient_sync_->prepare_last_backward(); };
  step.end_backward = [this] { gradient_sync_->end_backward(); };
  step.before_pass = [&](int64_t m) {
    moe_->set_loss_weight((loss_scaler_.enabled() ? loss_scaler_.scale() : 1.0) *
                          static_cast<double>(moe_tokens[static_cast<size_t>(m)]) * weight_per_token);
  };
  step.next_pass = [this](NextPass next) { gradient_sync_->set_next_pass(next); };
  auto loss_sum = run_pipeline(*task_, batches, mesh_, config_.parallel.pp_schedule, device_, step, &pipeline_stats_);
  gradient_sync_->finish();
  return loss_sum;
}

bool Trainer::any_rank_stopping() {
  auto stopping = torch::tensor({stop_requested() ? 1 : 0}, torch::kInt);
  mesh_.world().all_reduce(stopping);
  return stopping.item<int>() > 0;
}

EvalLoss Trainer::evaluate() {
  LOOM_CHECK(task_->can_evaluate(), "no validation data (data.valid)");
  EvalLoss result = evaluate_loss(*task_, config_, mesh_, device_);
  gradient_sync_->free_parameters();  // ZeRO-3: what the evaluation's forwards left gathered
  return result;
}

void Trainer::maybe_evaluate(bool final_step) {
  const int64_t every = config_.train.eval_every;
  if (!task_->can_evaluate() || config_.train.eval_batches == 0) return;
  if (!final_step && (every == 0 || state_.step % every != 0)) return;
  const EvalLoss result = evaluate();
  if (!is_leader()) return;
  const double loss = result.loss;
  nlohmann::json row = {{"step", state_.step}, {"split", "valid"}, {"loss", loss}, {"ppl", std::exp(loss)},
                        {"tokens", state_.tokens}, {"elapsed_s", state_.elapsed_s}};
  std::string extra;
  for (const auto& [name, value] : result.metrics) {
    row[name] = value;
    extra += fmt::format(" | {} {:.4f}", name, value);
  }
  spdlog::info("step {} | valid loss {:.4f} | ppl {:.2f}{}", state_.step, loss, std::exp(loss), extra);
  metrics_->write(row);
}

void Trainer::log_step(const StepResult& result) {
  if (!is_leader()) return;
  const double tokens_per_s = throughput_.tokens_per_s();
  spdlog::info("step {}/{} | loss {:.4f} | lr {:.2e} | grad {:.3f} | {:.0f} tok/s | {} elapsed | ETA {}{}", state_.step,
               config_.train.max_steps, result.loss, result.lr, result.grad_norm, tokens_per_s,
               format_duration(state_.elapsed_s), format_duration(throughput_.eta_s(config_.train.max_steps - state_.step)),
               moe_->summary());
  // A skipped step's grad_norm, and a non-finite loss, are written as null (JSON has no nan or inf).
  const auto finite_or_null = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
  nlohmann::json row = {{"step", state_.step},       {"split", "train"},        {"loss", finite_or_null(result.loss)},
                        {"lr", result.lr},           {"tokens", state_.tokens}, {"tokens_per_s", tokens_per_s},
                        {"loss_tokens", result.loss_tokens},
                        {"elapsed_s", state_.elapsed_s}, {"skipped_steps", state_.skipped_steps}};
  row["grad_norm"] = finite_or_null(result.grad_norm);
  const auto names = task_->source_names();
  if (!names.empty() && names.size() == state_.tokens_by_source.size()) {
    auto& by_source = row["tokens_by_source"] = nlohmann::json::object();
    for (size_t s = 0; s < names.size(); ++s) by_source[names[s]] = state_.tokens_by_source[s];
  }
  if (loss_scaler_.enabled()) row["loss_scale"] = loss_scaler_.scale();
  if (moe_->active()) row["moe"] = moe_->metrics();
  metrics_->write(row);
}

CheckpointParts Trainer::checkpoint_parts() {
  return {task_->model(), optimizer_.get(), gradient_sync_->sharded(), gradient_sync_->optimizer_slices(),
          loss_scaler_.enabled() ? &loss_scaler_ : nullptr, task_->tp_rng()};
}

void Trainer::checkpoint() {
  save_checkpoint(config_.run.dir, config_, mesh_, checkpoint_parts(), state_);  // what the optimizer steps
  if (is_leader()) prune_checkpoints(config_.run.dir, config_.checkpoint.keep);
  last_checkpoint_step_ = state_.step;
  spdlog::info("checkpoint {}", checkpoint_dir(config_.run.dir, state_.step).string());
}

}  // namespace loom
