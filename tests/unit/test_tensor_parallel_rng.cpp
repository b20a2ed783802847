// The tensor-parallel dropout streams (parallel/tensor_parallel_rng.h) and where the model uses them:
// dropout on activations every TP rank holds whole draws the same mask on every rank (the ranks' outputs
// stay identical), dropout on a rank's own heads or sequence positions draws from the rank's own stream
// (masks differ across ranks), and the default generator is left as it was. Runs as a unit test (a group
// of one) and under `mpirun -np 2` / `-np 4` ([tp]).
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "models/block.h"
#include "models/gpt.h"
#include "parallel/tensor_parallel_rng.h"
#include "test_util.h"
#include "train/task.h"

using loom::test::tp_group;

namespace {

torch::Tensor default_state() { return at::detail::getDefaultCPUGenerator().get_state(); }

// Every rank's x (same shape everywhere) stacked: (ranks, ...).
torch::Tensor gathered(const torch::Tensor& x, loom::Communicator& group) {
  auto out = torch::empty({group.size() * x.numel()}, x.options());
  group.all_gather(x.detach().contiguous().flatten(), out);
  auto shape = x.sizes().vec();
  shape.insert(shape.begin(), group.size());
  return out.view(shape);
}

// A pre-norm GPT block of 4 heads over `group`, residual dropout `dropout`, attention dropout `attention_dropout`.
loom::Block make_block(loom::Communicator& group, loom::TensorParallelRng* rng, bool sequence_parallel, double dropout,
                       double attention_dropout) {
  loom::ModelConfig c;
  c.d_model = 16;
  c.n_layers = 1;
  c.n_heads = 4;
  c.max_seq_len = 16;
  c.dropout = dropout;
  auto options = loom::block_options(c, loom::TensorParallelism(&group, rng, sequence_parallel));
  options.attention.dropout = attention_dropout;
  torch::manual_seed(3);  // the same full weights on every rank
  return loom::Block(options);
}

}  // namespace

TEST_CASE("TensorParallelRng: a fork draws from the stream and leaves the default generator as it was", "[tp]") {
  torch::manual_seed(11);
  const auto before = default_state();
  loom::TensorParallelRng a(5), b(5), c(6);
  auto draw = [](loom::TensorParallelRng& rng) {
    loom::TensorParallelRng::Fork fork(rng, torch::kCPU);
    return torch::rand({64});
  };
  const auto a1 = draw(a), a2 = draw(a), b1 = draw(b), c1 = draw(c);
  CHECK(default_state().equal(before));  // no draw came from the default stream
  CHECK(a1.equal(b1));                   // one seed, one stream
  CHECK(!a1.equal(a2));                  // the stream advances between forks
  CHECK(!a1.equal(c1));                  // another seed, another stream
  torch::manual_seed(5);
  CHECK(torch::rand({64}).equal(a1));  // the stream starts where manual_seed(seed) starts

  // The state round-trips (what a checkpoint keeps): b restored to a's state draws a's next numbers.
  b.set_state(torch::kCPU, a.state(torch::kCPU));
  CHECK(draw(b).equal(draw(a)));
}

TEST_CASE("tensor parallel dropout: replicated activations drop alike on every rank, sharded ones differently", "[tp]") {
  auto group = tp_group();
  auto& g = *group;
  const int64_t n = g.size(), B = 2, T = 8, C = 16;
  loom::TensorParallelRng rng(7 + loom::TensorParallelRng::kSeedOffset + static_cast<uint64_t>(g.rank()));
  torch::manual_seed(100);
  const auto x = torch::randn({B, T, C});  // the same on every rank

  SECTION("residual dropout after the row-parallel layers: every rank's output is the same") {
    auto block = make_block(g, &rng, /*sequence_parallel=*/false, 0.5, 0.5);
    block->train();
    torch::manual_seed(200);  // the default stream, alike on every rank
    const auto rng_before = rng.state(torch::kCPU).clone();
    const auto y = block->forward(x);
    const auto all = gathered(y, g);
    for (int64_t r = 1; r < n; ++r) CHECK(all[r].equal(all[0]));
    // The attention dropout of this rank's heads drew from its own stream (with one rank there is no
    // TP region and it stays the default stream's).
    CHECK(rng.state(torch::kCPU).equal(rng_before) == (n == 1));
  }

  SECTION("sequence parallelism: the dropout of a rank's positions is its own") {
    // Every position holds the same vector, so without dropout every rank's shard is the same output.
    const auto same = torch::randn({B, 1, C}).expand({B, T, C}).contiguous();
    auto shard = loom::scatter_to_sequence(same, g);  // (B, T / n, C)
    auto block = make_block(g, &rng, /*sequence_parallel=*/true, 0.5, 0.0);
    block->eval();
    auto all = gathered(block->forward(shard), g);
    for (int64_t r = 1; r < n; ++r) CHECK(torch::allclose(all[r], all[0], 1e-6, 1e-6));
    block->train();
    torch::manual_seed(300);
    const auto default_before = default_state();
    all = gathered(block->forward(shard), g);
    for (int64_t r = 1; r < n; ++r) CHECK(!all[r].equal(all[0]));  // other masks on other ranks
    // The default stream was not drawn from: the residual dropout used the TP stream.
    CHECK(default_state().equal(default_before) == (n > 1));
  }
}

TEST_CASE("tensor parallel dropout: every pipeline stage draws its own masks, stage 0 those of a run without stages",
          "[tp]") {
  // Megatron's seed: run.seed + 2718 + tp_rank + 100 * pp_rank.
  CHECK(loom::TensorParallelRng::stream_seed(7, 1, 0) == 7 + 2718 + 1);
  CHECK(loom::TensorParallelRng::stream_seed(7, 1, 3) == 7 + 2718 + 1 + 300);
  auto group = tp_group();
  auto& g = *group;
  loom::Config config;
  config.run.seed = 7;
  auto stage0 = loom::make_tp_rng(config, &g, 0), stage1 = loom::make_tp_rng(config, &g, 1),
       stage0_again = loom::make_tp_rng(config, &g, 0);
  if (g.size() == 1) {  // no tensor parallelism: no second stream
    CHECK(stage0 == nullptr);
    return;
  }
  const auto rank = static_cast<uint64_t>(g.rank());
  CHECK(stage0->seed() == 7 + loom::TensorParallelRng::kSeedOffset + rank);  // the seed before stages had one
  CHECK(stage1->seed() == 7 + loom::TensorParallelRng::kSeedOffset + rank + 100);
  // The same block (weights, input, default stream) on two stages: attention dropout of this rank's heads
  // draws from the stage's stream, so the stages drop different probabilities and the same stage the same.
  torch::manual_seed(100);
  const auto x = torch::randn({2, 8, 16});
  auto forward = [&](loom::TensorParallelRng* rng) {
    auto block = make_block(g, rng, /*sequence_parallel=*/false, 0.0, 0.5);
    block->train();
    torch::manual_seed(200);
    return block->forward(x).detach();
  };
  const auto y0 = forward(stage0.get()), y1 = forward(stage1.get()), y0_again = forward(stage0_again.get());
  CHECK(y0.equal(y0_again));
  CHECK(!y0.equal(y1));
}

TEST_CASE("dropout seeds: every CP rank its own default and TP streams, CP rank 0 and stage 0 those of a run without",
          "[tp]") {
  // run.seed + 2718 + tp_rank + 100 * pp_rank + 1000003 * cp_rank.
  CHECK(loom::TensorParallelRng::stream_seed(7, 1, 3, 2) == 7 + 2718 + 1 + 300 + 2 * 1000003);
  CHECK(loom::TensorParallelRng::stream_seed(7, 1, 3, 0) == loom::TensorParallelRng::stream_seed(7, 1, 3));
  // The default stream after a stage's model is built: run.seed + 100 * pp_rank + 1000003 * cp_rank, and left
  // as it was on stage 0 of CP rank 0.
  loom::Config config;
  config.run.seed = 7;
  auto draws_after = [&](int64_t pp_stage, int64_t cp_rank) {
    torch::manual_seed(99);
    loom::seed_dropout(config, pp_stage, cp_rank);
    return torch::rand({8});
  };
  auto draws_of = [](uint64_t seed) {
    torch::manual_seed(seed);
    return torch::rand({8});
  };
  CHECK(draws_after(0, 0).equal(draws_of(99)));
  CHECK(draws_after(1, 0).equal(draws_of(7 + 100)));
  CHECK(draws_after(0, 1).equal(draws_of(7 + 1000003)));
  CHECK(draws_after(2, 3).equal(draws_of(7 + 200 + 3 * 1000003)));
  auto group = tp_group();
  if (group->size() > 1) {
    const auto rank = static_cast<uint64_t>(group->rank());
    CHECK(loom::make_tp_rng(config, group.get(), 1, 2)->seed() == 7 + 2718 + rank + 100 + 2 * 1000003);
  }
}
