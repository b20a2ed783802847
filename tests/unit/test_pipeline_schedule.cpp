// Pipeline parallelism without communication: how stages split the blocks, the action order of the GPipe
// and 1F1B schedules (every micro-batch forward then backward once, 1F1B's bounded number in flight), a
// timing simulation of the schedules that finishes (no stage waits forever) in exactly the ideal time
// (m + p - 1)(t_f + t_b) with the bubble (p - 1) / (m + p - 1), and GPT and encoder-decoder stages built
// from one seed that chained together compute exactly the whole model.
#include <algorithm>
#include <map>

#include "core/config.h"
#include "core/error.h"
#include "models/encoder_decoder.h"
#include "models/estimates.h"
#include "models/gpt.h"
#include "parallel/pipeline_schedule.h"
#include "test_util.h"

namespace loom {
// "F0" / "B3" in failure messages.
std::ostream& operator<<(std::ostream& out, const PipelineAction& a) {
  return out << (a.kind == PipelineAction::kForward ? "F" : "B") << a.micro;
}
}  // namespace loom

namespace {
using loom::PipelineAction;
using loom::PipelineSchedule;

// Event-driven timing of one step: a stage runs its actions in order, a forward when the previous stage has
// sent that micro-batch's activations, a backward when the next stage has sent its gradient (on the last
// stage, after its own forward). Sends never block (they are asynchronous). Returns each stage's finish
// time and busy time; throws if some stage could never run its next action.
struct Simulation {
  std::vector<double> finish, busy;
};
Simulation simulate(PipelineSchedule schedule, int64_t p, int64_t m, double tf, double tb) {
  std::vector<std::vector<PipelineAction>> actions;
  for (int64_t s = 0; s < p; ++s) actions.push_back(loom::pipeline_actions(schedule, p, s, m));
  std::map<std::tuple<int64_t, int, int64_t>, double> done;  // (stage, kind, micro) -> end time
  std::vector<size_t> next(static_cast<size_t>(p), 0);
  Simulation sim{std::vector<double>(static_cast<size_t>(p), 0.0), std::vector<double>(static_cast<size_t>(p), 0.0)};
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t s = 0; s < p; ++s) {
      auto& i = next[static_cast<size_t>(s)];
      if (i == actions[static_cast<size_t>(s)].size()) continue;
      const auto a = actions[static_cast<size_t>(s)][i];
      const bool forward = a.kind == PipelineAction::kForward;
      std::tuple<int64_t, int, int64_t> need;
      if (forward) {
        need = {s - 1, PipelineAction::kForward, a.micro};
      } else {
        need = s == p - 1 ? std::make_tuple(s, int(PipelineAction::kForward), a.micro)
                          : std::make_tuple(s + 1, int(PipelineAction::kBackward), a.micro);
      }
      double ready = 0;
      if (!(forward && s == 0)) {
        auto found = done.find(need);
        if (found == done.end()) continue;
        ready = found->second;
      }
      const double start = std::max(ready, sim.finish[static_cast<size_t>(s)]);
      const double cost = forward ? tf : tb;
      sim.finish[static_cast<size_t>(s)] = start + cost;
      sim.busy[static_cast<size_t>(s)] += cost;
      done[{s, int(a.kind), a.micro}] = start + cost;
      ++i;
      progress = true;
    }
  }
  for (int64_t s = 0; s < p; ++s)
    if (next[static_cast<size_t>(s)] != actions[static_cast<size_t>(s)].size())
      throw std::runtime_error("stage " + std::to_string(s) + " deadlocked");
  return sim;
}

// Parameters the stages hold, each checked to carry a global name ("blocks.4" on the last stage) and the
// whole model's value.
template <class Stage>
size_t parameters_held(std::vector<Stage>& stages, torch::nn::Module& whole) {
  const auto whole_params = whole.named_parameters();
  size_t held = 0;
  for (auto& stage : stages)
    for (const auto& p : stage->named_parameters()) {
      REQUIRE(whole_params.contains(p.key()));
      CHECK(torch::equal(p.value(), whole_params[p.key()]));
      ++held;
    }
  return held;
}

}  // namespace

TEST_CASE("stages split the blocks evenly, earlier stages taking the remainder, or as listed") {
  CHECK(loom::stage_layers(10, 4) == std::vector<int64_t>{3, 3, 2, 2});
  CHECK(loom::stage_layers(4, 2) == std::vector<int64_t>{2, 2});
  CHECK(loom::stage_layers(4, 2, {1, 3}) == std::vector<int64_t>{1, 3});
  CHECK_THROWS(loom::stage_layers(4, 2, {2, 3}));
  CHECK_THROWS(loom::stage_layers(2, 3));
  const auto range = loom::stage_blocks({3, 3, 2, 2}, 2);
  CHECK(range.first == 6);
  CHECK(range.end == 8);
}

TEST_CASE("a bad parallel.pp_layers is a config error naming the key") {
  auto error_of = [](std::vector<std::string> sets) {
    sets.push_back("model.n_layers=4");
    try {
      loom::parse_config("", "x.yaml", sets);
    } catch (const loom::ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(error_of({"parallel.pp=2", "parallel.pp_layers=[1, 2]"}),
             Catch::Contains("parallel.pp_layers") && Catch::Contains("must add up"));
  CHECK_THAT(error_of({"parallel.pp=2", "parallel.pp_layers=[4]"}),
             Catch::Contains("parallel.pp_layers") && Catch::Contains("lists 1 stages but parallel.pp is 2"));
  CHECK_THAT(error_of({"parallel.pp=2", "parallel.pp_layers=[0, 4]"}),
             Catch::Contains("parallel.pp_layers") && Catch::Contains("at least one block"));
  CHECK_THAT(error_of({"parallel.pp_schedule=zigzag"}), Catch::Contains("parallel.pp_schedule"));
  CHECK_THAT(error_of({"parallel.microbatches=3"}), Catch::Contains("parallel.microbatches"));
  CHECK(error_of({"parallel.pp=2", "parallel.pp_layers=[1, 3]", "parallel.microbatches=4"}) == "no error");
}

TEST_CASE("GPipe runs every forward, then every backward") {
  using A = PipelineAction;
  CHECK(loom::pipeline_actions(PipelineSchedule::kGPipe, 2, 1, 3) ==
        std::vector<A>{{A::kForward, 0}, {A::kForward, 1}, {A::kForward, 2}, {A::kBackward, 0}, {A::kBackward, 1},
                       {A::kBackward, 2}});
}

TEST_CASE("1F1B warms up with p - s - 1 forwards, then alternates, then drains") {
  using A = PipelineAction;
  CHECK(loom::pipeline_actions(PipelineSchedule::k1F1B, 2, 0, 4) ==
        std::vector<A>{{A::kForward, 0}, {A::kForward, 1}, {A::kBackward, 0}, {A::kForward, 2}, {A::kBackward, 1},
                       {A::kForward, 3}, {A::kBackward, 2}, {A::kBackward, 3}});
  CHECK(loom::pipeline_actions(PipelineSchedule::k1F1B, 2, 1, 2) ==
        std::vector<A>{{A::kForward, 0}, {A::kBackward, 0}, {A::kForward, 1}, {A::kBackward, 1}});
  // Fewer micro-batches than stages: all forwards, then all backwards.
  CHECK(loom::pipeline_actions(PipelineSchedule::k1F1B, 4, 0, 2) ==
        std::vector<A>{{A::kForward, 0}, {A::kForward, 1}, {A::kBackward, 0}, {A::kBackward, 1}});
  for (int64_t p : {2, 3, 4})
    for (int64_t m : {1, 2, 5, 8})
      for (int64_t s = 0; s < p; ++s)
        for (auto schedule : {PipelineSchedule::kGPipe, PipelineSchedule::k1F1B}) {
          int64_t in_flight = 0, most = 0, forwards = 0, backwards = 0;
          for (const auto& a : loom::pipeline_actions(schedule, p, s, m)) {
            if (a.kind == A::kForward) {
              CHECK(a.micro == forwards++);
              most = std::max(most, ++in_flight);
            } else {
              CHECK(a.micro == backwards++);
              CHECK(a.micro < forwards);
              --in_flight;
            }
          }
          CHECK(forwards == m);
          CHECK(backwards == m);
          CHECK(most == (schedule == PipelineSchedule::kGPipe ? m : std::min(m, p - s)));
        }
}

TEST_CASE("both schedules finish in the ideal time, and the bubble is (p - 1) / (m + p - 1)") {
  CHECK(loom::ideal_bubble_fraction(2, 1) == Approx(0.5));
  CHECK(loom::ideal_bubble_fraction(2, 8) == Approx(1.0 / 9.0));
  CHECK(loom::ideal_bubble_fraction(4, 4) == Approx(3.0 / 7.0));
  const double tf = 1.0, tb = 2.0;
  for (int64_t p : {2, 3, 4})
    for (int64_t m : {1, 2, 4, 8})
      for (auto schedule : {PipelineSchedule::kGPipe, PipelineSchedule::k1F1B}) {
        const auto sim = simulate(schedule, p, m, tf, tb);
        const double makespan = *std::max_element(sim.finish.begin(), sim.finish.end());
        CHECK(makespan == Approx(static_cast<double>(m + p - 1) * (tf + tb)));
        CHECK(1.0 - sim.busy[0] / makespan == Approx(loom::ideal_bubble_fraction(p, m)));
      }
}

TEST_CASE("GPT pipeline stages drawn from one seed chain into exactly the whole model") {
  for (bool llama : {false, true}) {
    std::vector<std::string> sets = {"model.vocab_size=50", "model.d_model=32", "model.n_layers=5", "model.n_heads=4",
                                     "model.max_seq_len=16", "data.seq_len=16", "model.dropout=0", "parallel.pp=3",
                                     "parallel.pp_layers=[1, 3, 1]"};
    if (llama)
      for (const char* s : {"model.norm=rmsnorm", "model.position=rope", "model.activation=swiglu", "model.bias=false",
                            "model.tie_embeddings=false", "model.n_kv_heads=2"})
        sets.push_back(s);
    const auto config = loom::parse_config("", "x.yaml", sets);
    torch::manual_seed(3);
    loom::Gpt whole(config.model);
    std::vector<loom::Gpt> stages;
    for (int64_t s = 0; s < 3; ++s) {
      torch::manual_seed(3);
      stages.emplace_back(config.model, loom::TensorParallelism{}, loom::model_stage(config.model, config.parallel, s));
    }
    CHECK(stages[1]->n_blocks() == 3);
    // Every parameter once, plus the last stage's copy of a tied embedding.
    CHECK(parameters_held(stages, *whole) == whole->named_parameters().size() + (llama ? 0 : 1));
    CHECK(stages[2]->stage_tied_embedding().defined() == !llama);
    CHECK(stages[1]->named_parameters().contains("blocks.3.mlp.down.weight"));
    auto tokens = torch::randint(50, {2, 16}, torch::kLong);
    auto x = stages[0]->forward_stage(tokens, {});
    x = stages[1]->forward_stage({}, x);
    x = stages[2]->forward_stage({}, x);
    CHECK_THAT(x, loom::test::same_forward_as(whole->forward(tokens)));
  }
}

TEST_CASE("encoder-decoder pipeline stages split encoder then decoder blocks and chain into the whole model") {
  for (bool pre_norm : {false, true}) {
    std::vector<std::string> sets = {"model.arch=transformer", "model.vocab_size=40", "model.d_model=32",
                                     "model.n_encoder_layers=2", "model.n_layers=3", "model.n_heads=4",
                                     "model.max_seq_len=16", "data.seq_len=16", "model.dropout=0",
                                     "model.position=sinusoidal", "model.norm_position=post", "parallel.pp=3",
                                     "parallel.pp_layers=[1, 2, 2]"};
    if (pre_norm)
      for (const char* s : {"model.norm_position=pre", "model.position=learned", "model.tie_embeddings=false"})
        sets.push_back(s);
    const auto config = loom::parse_config("", "x.yaml", sets);
    CHECK(config.model.pipeline_layers() == 5);
    torch::manual_seed(3);
    loom::EncoderDecoder whole(config.model);
    std::vector<loom::EncoderDecoder> stages;
    for (int64_t s = 0; s < 3; ++s) {
      torch::manual_seed(3);
      stages.emplace_back(config.model, loom::TensorParallelism{}, loom::model_stage(config.model, config.parallel, s));
      // The closed-form count `loom info` prints per stage is what the stage holds.
      int64_t numel = 0;
      for (const auto& p : stages.back()->parameters()) numel += p.numel();
      CHECK(numel == loom::count_stage_parameters(config, s));
    }
    // Stage 0: encoder block 0; stage 1: encoder block 1 (and the pre-norm encoder's final norm) and decoder
    // block 0; stage 2: decoder blocks 1 and 2, the head.
    const auto b = loom::stage_block_counts(config, 1);
    CHECK((b.encoder == 1 && b.decoder == 1 && b.ends_encoder));
    CHECK(stages[0]->n_encoder_blocks() == 1);
    CHECK(stages[0]->n_decoder_blocks() == 0);
    CHECK(stages[1]->named_parameters().contains("encoder.1.ln1.weight"));
    CHECK(stages[1]->named_parameters().contains("decoder.0.cross_attention.qkv.weight"));
    CHECK(stages[1]->named_parameters().contains("encoder_norm.weight") == pre_norm);
    CHECK(stages[2]->named_parameters().contains("decoder.2.ln1.weight"));
    CHECK(!stages[1]->named_parameters().contains("token_embedding.weight"));
    // Every parameter once, plus the last stage's copy of a tied embedding (source and target embedding
    // both on the first stage).
    CHECK(parameters_held(stages, *whole) == whole->named_parameters().size() + (pre_norm ? 0 : 1));
    CHECK(stages[2]->stage_tied_embedding().defined() == !pre_norm);
    CHECK(!stages[1]->stage_tied_embedding().defined());
    auto source = torch::randint(3, 40, {3, 7}, torch::kLong);
    auto target = torch::randint(3, 40, {3, 5}, torch::kLong);
    auto lengths = torch::tensor({7, 4, 2}, torch::kLong);
    const auto padding = loom::padding_mask(lengths, 7);
    auto x = stages[0]->forward_stage(source, padding, target, {});
    REQUIRE(x.size() == 2);
    CHECK(x[0].sizes() == torch::IntArrayRef{3, 7, 32});
    CHECK(x[1].sizes() == torch::IntArrayRef{3, 5, 32});
    x = stages[1]->forward_stage({}, padding, {}, x);
    x = stages[2]->forward_stage({}, padding, {}, x);
    REQUIRE(x.size() == 1);
    CHECK_THAT(x[0], loom::test::same_forward_as(whole->forward(source, lengths, target)));
  }
}
