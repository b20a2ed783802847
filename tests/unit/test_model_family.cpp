// The model-family table (train/model_family.h): a third family registered only through it, here a toy
// "counter" (loom's blocks between a tied token embedding and head, no position table, taught that each token
// is the previous one + 1), is validated, planned, trained and benched by the code every family goes through.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "core/config_checks.h"
#include "core/family_rules.h"
#include "data/corpus/lm_sampler.h"
#include "models/block.h"
#include "models/estimates.h"
#include "models/gpt.h"
#include "models/model_stage.h"
#include "test_util.h"
#include "train/bench.h"
#include "train/model_family.h"
#include "train/run_plan.h"
#include "train/trainer.h"

using loom::test::numel_sum;

namespace {

// No config names it: it exists only once registered.
constexpr auto kCounterArch = static_cast<loom::ModelArch>(100);

class CounterImpl : public loom::StagedModel {
 public:
  CounterImpl(const loom::ModelConfig& config, const loom::TensorParallelism& tp, const loom::ModelStage& stage)
      : tp_(tp), stage_(stage) {
    loom::StageBuilder build(*this, stage_, config.n_layers, "model.n_layers");
    const loom::BlockOptions options = loom::block_options(config, tp);
    ends_.build_embedding(build, config, tp);
    blocks_ = build.blocks<loom::Block>("blocks", 0, config.n_layers, options);
    norm_ = register_module("final_norm", loom::Norm(options.norm));
    ends_.build_head(build, config, tp);
    torch::NoGradGuard no_grad;
    ends_.init_embedding(config.init_std);
  }
  // tokens (B, T) -> logits (B, T, V)
  torch::Tensor forward(const torch::Tensor& tokens) {
    auto x = ends_.embed(tokens);
    for (auto& block : blocks_) x = block->forward(x);
    return ends_.logits(norm_->forward(x));
  }
  const loom::ModelStage& stage() const override { return stage_; }
  loom::Communicator* tp_group() const override { return tp_.group(); }

 private:
  loom::TensorParallelism tp_;
  loom::ModelStage stage_;
  loom::VocabularyEnds ends_;
  std::vector<loom::Block> blocks_;
  loom::Norm norm_{nullptr};
};
TORCH_MODULE(Counter);

// Rows counting up from a start drawn from (step, index): inputs t, t + 1, ... and targets one ahead (mod V).
class CounterTask : public loom::Task {
 public:
  CounterTask(Counter model, const loom::Config& config) : model_(std::move(model)), config_(config) {}

  loom::StagedModel& model() override { return *model_; }
  loom::TaskBatch train_batch(int64_t step, int64_t first, int64_t count) const override {
    return counting(step, first, count);
  }
  int64_t train_batch_size(int64_t) const override { return config_.train.batch_size; }
  loom::TaskBatch eval_batch(int64_t first, int64_t count) const override { return counting(-1, first, count); }
  bool can_evaluate() const override { return true; }
  std::string eval_data_name() const override { return "counting"; }
  torch::Tensor loss(const loom::TaskBatch& batch, torch::Device device, double) override {
    const auto& b = batch.as<loom::LmBatch>();
    return torch::nn::functional::cross_entropy(model_->forward(b.inputs.to(device)).flatten(0, 1),
                                                b.targets.to(device).flatten());
  }
  std::vector<torch::Tensor> stage_forward(const loom::TaskBatch& batch, torch::Device device,
                                           const std::vector<torch::Tensor>&, double smoothing) override {
    return {loss(batch, device, smoothing)};  // one stage only
  }
  std::vector<std::vector<int64_t>> stage_output_shapes(const loom::TaskBatch&) const override { return {}; }

 private:
  loom::LmBatch counting(int64_t step, int64_t first, int64_t count) const {
    const int64_t V = config_.model.vocab_size, T = config_.data.seq_len;
    const auto index = torch::arange(first, first + count, torch::kLong).unsqueeze(1);
    const auto starts = (index * 7 + (step + 2) * 5) % V;                         // (count, 1)
    const auto rows = (starts + torch::arange(T + 1, torch::kLong).unsqueeze(0)) % V;  // (count, T + 1)
    loom::LmBatch batch;
    batch.inputs = rows.narrow(1, 0, T);
    batch.targets = rows.narrow(1, 1, T);
    return batch;
  }

  Counter model_;
  loom::Config config_;
};

loom::ModelFamily counter_family() {
  loom::ModelFamily family;
  family.arch = kCounterArch;
  family.rules.validate = [](const loom::Config& c, loom::ConfigChecks& check) {
    check.require(c.model.position != loom::PositionKind::kLearned, "model.position",
                  "the counter has no position table: not learned");
  };
  family.rules.shape = [](const loom::ModelConfig& m) {
    loom::ModelShape shape;
    shape.decoder_layers = m.n_layers;
    return shape;
  };
  family.rules.pipeline_keys = "model.n_layers";
  family.build = [](const loom::Config& config, const loom::TensorParallelism& tp, const loom::ModelStage& stage,
                    const loom::ContextParallelism&) {
    return std::static_pointer_cast<loom::StagedModel>(Counter(config.model, tp, stage).ptr());
  };
  family.make_task = [](const loom::Config& config, loom::TaskData, const loom::ModelSource& model) {
    return std::make_unique<CounterTask>(model().as<Counter>(), config);
  };
  family.use_synthetic_data = [](loom::Config&) {};  // its batches are synthetic already
  return family;
}

loom::Config counter_config(const std::vector<std::string>& sets = {}) {
  std::vector<std::string> all = {"model.vocab_size=16", "model.d_model=32", "model.n_layers=1", "model.n_heads=4",
                                  "model.max_seq_len=16", "model.dropout=0", "model.position=rope", "data.seq_len=8",
                                  "train.batch_size=8", "optim.lr=0.01", "schedule.name=constant",
                                  "schedule.warmup_steps=1"};
  all.insert(all.end(), sets.begin(), sets.end());
  auto config = loom::parse_config("", "counter.yaml", all);
  config.model.arch = kCounterArch;
  loom::validate(config);
  return config;
}

}  // namespace

TEST_CASE("model family: a family registered through the table is validated, planned, trained and benched",
          "[family]") {
  loom::register_model_family(counter_family());
  auto config = counter_config();

  // Its own checks run with the config's.
  auto learned = config;
  learned.model.position = loom::PositionKind::kLearned;
  CHECK_THROWS_WITH(loom::validate(learned), Catch::Contains("model.position: the counter has no position table"));

  // loom info's plan: the closed forms over its shape count the parameters it builds.
  torch::manual_seed(1);
  Counter built(config.model, loom::TensorParallelism(), loom::ModelStage());
  const loom::RunPlan plan(config, 0);
  CHECK(numel_sum(*built) == 512 + 12704 + 64);  // the embedding (tied head), a block, the final norm
  CHECK(plan.parameters() == numel_sum(*built));
  CHECK(plan.stage(0).blocks.decoder == 1);
  CHECK(plan.stage(0).memory.weights == 4 * numel_sum(*built));
  // 6 x (q, k, v, o, the MLP's two matrices, the head) + 12 x the query dimension x 8 keys
  CHECK(plan.flops_per_token() == Approx(6.0 * (32 * 96 + 32 * 32 + 2 * 32 * 128 + 16 * 32) + 12.0 * 32 * 8));
  // Its pipeline split: two stages of a block each, the last with the final norm and the tied embedding's copy.
  const auto two = counter_config({"model.n_layers=2", "parallel.pp=2"});
  CHECK(loom::count_stage_parameters(two, 0) + loom::count_stage_parameters(two, 1) ==
        loom::count_parameters(two.model) + 16 * 32);

  // The Trainer trains it: the loss falls.
  loom::Trainer trainer(loom::RunPlan(config, 1), loom::test::processes());
  const double first = trainer.step().loss;
  double last = first;
  for (int i = 0; i < 40; ++i) last = trainer.step().loss;
  CHECK(first == Approx(std::log(16.0)).epsilon(0.1));
  CHECK(last < 0.5 * first);

  // loom bench feeds it its synthetic data and times the same step.
  loom::BenchOptions options;
  options.steps = 2;
  options.warmup = 0;
  options.profile_steps = 0;
  const auto bench = loom::run_bench(config, loom::test::processes(), options);
  CHECK(bench.parameters == numel_sum(*built));
  CHECK(bench.tokens_per_step == 8 * 8);
  CHECK(std::isfinite(bench.final_loss));
}
