// Reliability pieces with closed-form answers: the LOOM_FAULT_INJECTION syntax, the non-finite step
// guard's counting and stop message, the throughput meter, the progress bar's arithmetic and layout, and
// the memory check.
#include <limits>

#include "core/error.h"
#include "core/fault_injection.h"
#include "models/estimates.h"
#include "test_util.h"
#include "train/memory_check.h"
#include "train/nonfinite_guard.h"
#include "train/progress.h"
#include "train/throughput.h"

TEST_CASE("fault injection: step ranges and ranks", "[reliability]") {
  const auto one = loom::parse_fault("nan_loss@5");
  CHECK(one.kind == "nan_loss");
  CHECK((!one.applies(4, 0) && one.applies(5, 0) && one.applies(5, 3) && !one.applies(6, 0)));
  const auto range = loom::parse_fault("nan_grad@3-4:rank1");
  CHECK((!range.applies(2, 1) && range.applies(3, 1) && range.applies(4, 1) && !range.applies(5, 1)));
  CHECK_FALSE(range.applies(3, 0));
  const auto open = loom::parse_fault("throw@7-");
  CHECK((!open.applies(6, 0) && open.applies(7, 0) && open.applies(1000000, 2)));
  CHECK(loom::parse_fault(nullptr).kind.empty());
  CHECK_FALSE(loom::parse_fault("").applies(1, 0));
  for (const char* bad : {"nan_loss", "nan@5", "nan_loss@", "nan_loss@0", "nan_loss@5-3", "nan_loss@x", "crash@5:rank"})
    CHECK_THROWS_WITH(loom::parse_fault(bad), Catch::Contains(std::string("LOOM_FAULT_INJECTION='") + bad + "'"));
}

TEST_CASE("non-finite guard: skips, counts, and stops after max_bad_steps in a row", "[reliability]") {
  loom::Config config;
  const loom::Mesh mesh(config, 1, 0);
  const loom::NonFiniteGuard guard(3);
  loom::TrainState state;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  int described = 0;
  const auto describe = [&] {
    ++described;
    return std::string("gradient of blocks.0.mlp.up.weight");
  };
  auto health = guard.check(1, 2.5, true, false, mesh, describe, state);
  CHECK((health.update && health.gradients_finite && !health.bad));
  CHECK((state.skipped_steps == 0 && state.bad_streak == 0 && described == 0));

  health = guard.check(2, nan, false, false, mesh, describe, state);  // the loss is named before the gradients
  CHECK((!health.update && !health.gradients_finite && health.bad));
  CHECK(health.what == "non-finite loss (nan) on rank 0 (dp0-cp0-tp0-pp0)");
  health = guard.check(3, 1.0, false, false, mesh, describe, state);
  CHECK(health.what == "non-finite gradient of blocks.0.mlp.up.weight on rank 0 (dp0-cp0-tp0-pp0)");
  CHECK((state.skipped_steps == 2 && state.bad_streak == 2 && described == 1));

  // fp16 overflow with room to back off: skipped and counted, but not bad, and it ends the streak.
  health = guard.check(4, 1.0, false, true, mesh, describe, state);
  CHECK((!health.update && !health.gradients_finite && !health.bad));
  CHECK((state.skipped_steps == 3 && state.bad_streak == 0));
  // ... while a non-finite loss is bad in fp16 too.
  CHECK(guard.check(5, std::numeric_limits<double>::infinity(), false, true, mesh, describe, state).bad);
  CHECK(guard.check(6, 1.0, true, false, mesh, describe, state).update);
  CHECK((state.skipped_steps == 4 && state.bad_streak == 0));

  guard.check(7, nan, true, false, mesh, describe, state);
  guard.check(8, nan, true, false, mesh, describe, state);
  CHECK_THROWS_WITH(guard.check(9, nan, true, false, mesh, describe, state),
                    "step 9: non-finite loss (nan) on rank 0 (dp0-cp0-tp0-pp0); 3 bad steps in a row "
                    "(train.max_bad_steps=3): stopping. The checkpoints hold no bad step; look for bad data near this "
                    "step or lower optim.lr, then run again to resume from the last checkpoint");
  // 0: never stops.
  const loom::NonFiniteGuard patient(0);
  loom::TrainState long_streak;
  for (int64_t step = 1; step <= 100; ++step) patient.check(step, nan, false, false, mesh, describe, long_streak);
  CHECK((long_streak.bad_streak == 100 && long_streak.skipped_steps == 100));
}

TEST_CASE("non-finite guard: names the parameter behind a non-finite gradient", "[reliability]") {
  torch::nn::Linear first(3, 2), second(2, 2);
  torch::nn::Sequential model(first, second);
  std::vector<torch::Tensor> parameters;
  std::vector<std::vector<loom::ParameterSlice>> slices;
  for (const auto& p : model->parameters()) {
    p.mutable_grad() = torch::ones_like(p);
    parameters.push_back(p);
    slices.push_back({{p, 0, 0, p.numel()}});
  }
  CHECK(loom::first_nonfinite_gradient(parameters, slices, *model) == "gradients");
  second->weight.mutable_grad()[1][0].fill_(std::numeric_limits<float>::infinity());
  CHECK(loom::first_nonfinite_gradient(parameters, slices, *model) == "gradient of 1.weight");
  first->bias.mutable_grad()[0].fill_(std::numeric_limits<float>::quiet_NaN());
  CHECK(loom::first_nonfinite_gradient(parameters, slices, *model) == "gradient of 0.bias");
  // A ZeRO-1 shard: one flat tensor holding two parameters' elements; the bad element is the second's.
  auto flat = torch::zeros({8}, torch::requires_grad());
  flat.mutable_grad() = torch::zeros({8});
  flat.mutable_grad()[7].fill_(std::numeric_limits<float>::quiet_NaN());
  const std::vector<loom::ParameterSlice> shard = {{first->weight, 0, 0, 6}, {second->bias, 0, 6, 2}};
  const std::vector<std::vector<loom::ParameterSlice>> shard_slices = {shard};
  CHECK(loom::first_nonfinite_gradient({flat}, shard_slices, *model) == "gradient of 1.bias");
}

TEST_CASE("progress: ETA arithmetic and bar layout", "[reliability]") {
  CHECK(loom::eta_seconds(5.0, 10, 90) == 45.0);  // 0.5 s a step, 90 to go
  CHECK(loom::eta_seconds(5.0, 0, 90) == 0.0);    // no pace yet
  CHECK(loom::eta_seconds(5.0, 10, 0) == 0.0);
  CHECK(loom::progress_bar(0, 100, 10) == "[..........]");
  CHECK(loom::progress_bar(45, 100, 20) == "[#########...........]");
  CHECK(loom::progress_bar(99, 100, 10) == "[#########.]");  // rounded down: full only when done
  CHECK(loom::progress_bar(100, 100, 10) == "[##########]");
  CHECK(loom::progress_bar(7, 0, 4) == "[....]");

  loom::ProgressState state;
  state.step = 45;
  state.max_steps = 100;
  state.loss = 3.21044;
  state.tokens_per_s = 12345;
  state.elapsed_s = 62;
  state.eta_s = loom::eta_seconds(62, 45, 55);  // 75.8 s
  const std::string text = "  45% | loss 3.2104 | 12.3k tok/s | 1m02s elapsed | ETA 1m16s";
  // The bar takes what the text leaves of the line: 100 columns - 12 ("step 45/100 ") - 61 - 2 brackets = 25.
  const std::string line = loom::progress_line(state, 100);
  CHECK(line == "step 45/100 [###########..............]" + text);
  CHECK(line.size() == 100);
  CHECK(loom::progress_line(state, 200) == "step 45/100 " + loom::progress_bar(45, 100, 40) + text);  // at most 40
  CHECK(loom::progress_line(state, 40).size() == 40);  // a narrow terminal: cut, never wrapped
  state.loss = std::numeric_limits<double>::quiet_NaN();
  CHECK(loom::progress_line(state, 200).find("loss non-finite") != std::string::npos);
}

TEST_CASE("throughput: tokens/s and ETA over the last log_every steps, from step end to step end", "[reliability]") {
  using namespace std::chrono_literals;
  const loom::ThroughputMeter::Clock::time_point t0{};
  loom::ThroughputMeter meter(/*window=*/2);
  CHECK(meter.tokens_per_s() == 0.0);  // nothing measured yet
  CHECK(meter.eta_s(10) == 0.0);
  meter.start(t0);
  meter.step_done(100, t0 + 1s);
  CHECK(meter.tokens_per_s() == 100.0);
  CHECK(meter.eta_s(10) == 10.0);
  meter.step_done(300, t0 + 2s);  // 400 tokens in 2 s
  CHECK(meter.tokens_per_s() == 200.0);
  // A checkpoint of 3 s before the third step ends counts; the window now holds the last two steps, from
  // the end of the first (1 s) to the end of the third (6 s): 300 + 600 tokens in 5 s.
  meter.step_done(600, t0 + 6s);
  CHECK(meter.tokens_per_s() == 180.0);
  CHECK(meter.eta_s(4) == 10.0);  // 2.5 s a step
  meter.start(t0 + 10s);  // a new session forgets the old pace
  CHECK(meter.tokens_per_s() == 0.0);
}

TEST_CASE("memory check: MemAvailable, the estimate, and the refusal", "[reliability]") {
  CHECK(loom::parse_mem_available("MemTotal:       131072000 kB\nMemFree:  1000 kB\nMemAvailable:   65536000 kB\n") ==
        int64_t{65536000} * 1024);
  CHECK_FALSE(loom::parse_mem_available("MemTotal: 1 kB\n").has_value());

  loom::Config config;
  config.model.vocab_size = 1024;
  config.model.d_model = 64;
  config.model.n_layers = 2;
  config.model.n_heads = 2;
  const int64_t params = loom::count_parameters(config.model);
  const int64_t activations = loom::estimate_memory(config).activations;
  REQUIRE(activations > 0);
  const auto shortfall = [](const loom::Config& c, int64_t available) {
    return loom::RunPlan(c, 0).memory_shortfall(0, available);
  };
  CHECK_FALSE(shortfall(config, 16 * params + activations).has_value());  // 4 weights + 4 gradients + 8 AdamW
  const auto refused = shortfall(config, 16 * params - 1);
  REQUIRE(refused.has_value());
  CHECK_THAT(*refused, Catch::StartsWith("the model does not fit: each rank needs"));
  CHECK_THAT(*refused, Catch::Contains("at dp 1 x cp 1 x tp 1 x pp 1, but"));
  // The model fits, a micro-batch's activations on top do not: the message names the keys that shrink them.
  const auto batch = shortfall(config, 16 * params + activations - 1);
  REQUIRE(batch.has_value());
  CHECK_THAT(*batch, Catch::StartsWith("the batch does not fit:") && Catch::Contains("train.micro_batch_size=32 ") &&
                         Catch::Contains("data.seq_len=128 "));
  CHECK_THAT(*batch, Catch::EndsWith("or split each sequence over more ranks (parallel.cp)"));
  // The same model over 4 ranks with ZeRO-1 keeps a quarter of the AdamW state per rank (and of the batch):
  // 4 weights + 4 gradient buckets + 1 (its quarter of the reduced gradient) + 2 (a quarter of 8 AdamW).
  config.parallel.dp = 4;
  config.parallel.zero = loom::ZeroStage::kOptimizer;
  const int64_t quarter = loom::estimate_memory(config).activations;
  CHECK(quarter < activations);
  CHECK_FALSE(shortfall(config, 11 * params + 16 + quarter).has_value());
  CHECK(shortfall(config, 11 * params - 1).has_value());

  // The machine's own figure is what /proc/meminfo says, shared by the ranks of the node.
  const auto alone = loom::available_memory(torch::kCPU, 1);
  const auto shared = loom::available_memory(torch::kCPU, 4);
  REQUIRE((alone && shared));
  CHECK(*alone > 0);
  CHECK(std::abs(static_cast<double>(*shared) * 4 - static_cast<double>(*alone)) < 0.05 * static_cast<double>(*alone));
}

TEST_CASE("run plan: the vocabulary resolved before anything is built, and every pipeline stage checked", "[reliability]") {
  // A synthetic task's vocabulary is its own; a plan counts it in the parameters and memory.
  const auto synthetic = loom::parse_config("", "test", {"model.arch=transformer", "data.synthetic=reverse",
                                                        "data.synthetic_vocab=40"});
  REQUIRE(synthetic.model.vocab_size == 0);
  const loom::RunPlan reverse(synthetic, 0);
  CHECK(reverse.config().model.vocab_size == 40);
  auto with_vocab = synthetic;
  with_vocab.model.vocab_size = 40;
  CHECK(reverse.parameters() == loom::count_parameters(with_vocab.model));

  // 1 block on the first stage, 7 on the last: the last stage is the busiest, and a rank of it is refused with
  // what a rank of the first stage fits in.
  const auto piped = loom::parse_config("", "test", {"model.vocab_size=1024", "model.n_layers=8", "parallel.pp=2",
                                                     "parallel.pp_layers=[1, 7]", "train.batch_size=8"});
  const loom::RunPlan plan(piped, 2);
  REQUIRE(plan.stages().size() == 2);
  CHECK(plan.busiest_stage() == 1);
  CHECK(plan.stage(0).blocks.decoder == 1);
  CHECK(plan.stage(1).blocks.decoder == 7);
  const int64_t first = plan.stage(0).memory.total();
  CHECK(plan.stage(1).memory.total() > first);
  CHECK_FALSE(plan.memory_shortfall(0, first).has_value());
  const auto refused = plan.memory_shortfall(1, first);
  REQUIRE(refused.has_value());
  CHECK_THAT(*refused, Catch::Contains("at dp 1 x cp 1 x tp 1 x pp 2 on pipeline stage 1, but"));
  // The world fills parallel.dp = -1 and is checked against the layout.
  auto any_dp = piped;
  any_dp.parallel.dp = -1;
  CHECK(loom::RunPlan(any_dp, 8).dp() == 4);
  CHECK(loom::RunPlan(any_dp, 0).dp() == 1);  // no job: -1 reads as 1
  CHECK_THROWS_AS(loom::RunPlan(piped, 3), loom::ConfigError);
}

TEST_CASE("memory check: the long-context preset fits a quarter of 24 GiB per rank at cp 4", "[reliability]") {
  // configs/llama-long-context.yaml: 32,768-token sequences on this kind of machine (24 GiB, 4 ranks). Ring
  // attention keeps each query's log-sum-exp and works a tile of keys at a time; its working set (fp32 copies
  // of q, of the key/value blocks in flight and their gradients, one tile's probabilities) keeps a rank's
  // activations above 1/cp of one process's, whose flash kernel keeps only the log-sum-exp too.
  const auto path = (loom::test::source_dir() / "configs" / "llama-long-context.yaml").string();
  const int64_t gib = int64_t{1} << 30;
  const auto cp4 = loom::load_config(path, {"model.vocab_size=1024"});
  REQUIRE(cp4.parallel.cp == 4);
  CHECK_FALSE(loom::RunPlan(cp4, 0).memory_shortfall(0, 24 * gib / 4).has_value());
  const auto cp1 = loom::load_config(path, {"model.vocab_size=1024", "parallel.cp=1"});
  const auto one = loom::estimate_memory(cp1).activations, quarter = loom::estimate_memory(cp4).activations;
  CHECK(quarter > one / 4);
  CHECK(quarter < one / 2);
}
