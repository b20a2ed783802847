// Tensor-parallel pieces against the single-process computation on the full tensors: forward values and
// every gradient within a few fp32 ulps of their magnitude. Written for any world size: ctest runs them as unit
// tests (a group of one, where every piece must be the plain computation) and under `mpirun -np 2` and `-np 4`.
// Every rank draws the same full tensors from the same seed, computes the reference itself, and checks its
// own shard of the parallel result.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "models/parallel_linear.h"
#include "models/vocab_parallel_embedding.h"
#include "optim/cross_entropy.h"
#include "optim/linear_cross_entropy.h"
#include "optim/optimizer.h"
#include "parallel/tensor_parallel.h"
#include "test_util.h"

using loom::test::tp_group;

namespace {

// fp32 sums in another order (per-rank partial products reduced over the group, other matmul blockings) differ
// by a few ulps of the values summed: the largest expected value stands for them, and 1 for values near 0 (sums
// of O(1) randn terms that cancel).
constexpr double kTolerance = 8 * loom::test::kFloatEps;

loom::test::TensorCloseTo close_to_full(const torch::Tensor& expected) {
  return loom::test::tensor_close_to(expected, kTolerance, kTolerance);
}

// A cross-entropy loss is mean(logsumexp(z) - z_target) over logits z: its rounding is that of values as large as
// the largest logit (logsumexp(z) >= max z), not that of the loss, which may be much smaller.
loom::test::CloseTo loss_close_to(const torch::Tensor& expected, const torch::Tensor& logits) {
  return loom::test::close_to(expected.item<double>(), 0.0,
                              kTolerance * std::max(1.0, logits.abs().max().item<double>()));
}


// Rank r's slice [start, start + length) of dim `dim` of a full tensor.
torch::Tensor slice(const torch::Tensor& full, int64_t dim, const loom::ShardRange& range) {
  return full.narrow(dim, range.start, range.length);
}

}  // namespace

TEST_CASE("shard_range: every item once, shares differ by at most one", "[tp]") {
  for (int64_t n : {1, 7, 8, 50257})
    for (int64_t parts : {1, 2, 3, 4}) {
      int64_t next = 0;
      for (int64_t r = 0; r < parts; ++r) {
        const auto range = loom::shard_range(n, parts, r);
        CHECK(range.start == next);
        CHECK((range.length == n / parts || range.length == n / parts + 1));
        next += range.length;
      }
      CHECK(next == n);
    }
  // A fused QKV of 4 q heads, 2 kv heads (D = 3) over 2 ranks: rank 1 holds q heads 2-3, kv head 1.
  const auto rows = torch::arange(24).view({24, 1});
  const loom::ShardLayout qkv{0, {12, 6, 6}};
  const auto shard = loom::take_shard(rows, qkv, 2, 1).flatten();
  CHECK(shard.equal(torch::tensor({6, 7, 8, 9, 10, 11, 15, 16, 17, 21, 22, 23}).to(shard.dtype())));
  CHECK(loom::join_shards({loom::take_shard(rows, qkv, 2, 0), loom::take_shard(rows, qkv, 2, 1)}, qkv).equal(rows));
}

TEST_CASE("tensor parallel: copy/reduce, gather/scatter and the sequence pair, values and gradients", "[tp]") {
  auto group = tp_group();
  auto& g = *group;
  const int64_t n = g.size(), r = g.rank();
  torch::manual_seed(1);
  // Per-rank inputs and upstream gradients, all drawn by every rank: index k is rank k's.
  std::vector<torch::Tensor> parts, upstream;
  for (int64_t k = 0; k < n; ++k) parts.push_back(torch::randn({3, 5}));
  for (int64_t k = 0; k < n; ++k) upstream.push_back(torch::randn({3, 5}));
  const auto sum_of = [](const std::vector<torch::Tensor>& ts) { return torch::stack(ts).sum(0); };

  SECTION("copy_to: identity forward, gradients summed over ranks") {
    auto x = parts[0].clone().requires_grad_();  // replicated
    auto y = loom::copy_to_tp_region(x, g);
    CHECK(y.equal(parts[0]));
    (y * upstream[r]).sum().backward();
    CHECK_THAT(x.grad(), close_to_full(sum_of(upstream)));
  }
  SECTION("reduce_from: sum forward, the gradient passes through") {
    auto x = parts[r].clone().requires_grad_();
    auto y = loom::reduce_from_tp_region(x, g);
    CHECK_THAT(y, close_to_full(sum_of(parts)));
    (y * upstream[0]).sum().backward();  // the same loss on every rank
    CHECK(x.grad().equal(upstream[0]));
  }
  SECTION("gather/scatter along the last dim, uneven shares included") {
    const int64_t full = 4 * n - 1;  // the last rank holds one column fewer
    const auto X = torch::randn({2, 3, full});
    const auto G = torch::randn({2, 3, full});
    const auto mine = loom::shard_range(full, n, r);
    auto x = slice(X, -1, mine).clone().requires_grad_();
    auto y = loom::gather_from_tp_region(x, g, full);
    CHECK(y.equal(X));
    (y * G).sum().backward();
    CHECK(x.grad().equal(slice(G, -1, mine)));

    auto X2 = X.clone().requires_grad_();
    auto s = loom::scatter_to_tp_region(X2, g);
    CHECK(s.equal(slice(X, -1, mine)));
    (s * slice(G, -1, mine)).sum().backward();  // each rank's loss covers its columns: together all of G
    CHECK(X2.grad().equal(G));
  }
  SECTION("sequence parallel: all-gather along T, reduce-scatter in backward (and the reverse; and replicated)") {
    const int64_t T = 2 * n;
    std::vector<torch::Tensor> full_parts, full_upstream;
    for (int64_t k = 0; k < n; ++k) full_parts.push_back(torch::randn({2, T, 3}));
    for (int64_t k = 0; k < n; ++k) full_upstream.push_back(torch::randn({2, T, 3}));
    const loom::ShardRange mine{2 * r, 2};
    const auto X = full_parts[0];
    auto x = slice(X, 1, mine).clone().requires_grad_();
    auto y = loom::gather_from_sequence(x, g);
    CHECK(y.equal(X));
    (y * full_upstream[r]).sum().backward();
    CHECK_THAT(x.grad(), close_to_full(slice(sum_of(full_upstream), 1, mine)));

    auto z_in = full_parts[r].clone().requires_grad_();
    auto z = loom::reduce_scatter_to_sequence(z_in, g);
    CHECK_THAT(z, close_to_full(slice(sum_of(full_parts), 1, mine)));
    (z * slice(full_upstream[0], 1, mine)).sum().backward();
    CHECK(z_in.grad().equal(full_upstream[0]));

    // A replicated layer: the whole sequence on every rank, whose (equal) gradients are not summed.
    auto w = slice(X, 1, mine).clone().requires_grad_();
    auto whole = loom::replicate_sequence(w, g);
    CHECK(whole.equal(X));
    (whole * full_upstream[0]).sum().backward();
    CHECK(w.grad().equal(slice(full_upstream[0], 1, mine)));
  }
}

// The options of a parallel linear layer over `tp` (null: the plain layer).
loom::ParallelLinearOptions linear_options(int64_t in, int64_t out, bool bias, double init_std, loom::Communicator* tp,
                                           std::vector<int64_t> sections = {}) {
  loom::ParallelLinearOptions options;
  options.in = in;
  options.out = out;
  options.bias = bias;
  options.init_std = init_std;
  options.tp = loom::TensorParallelism(tp, nullptr, false);
  options.sections = std::move(sections);
  return options;
}

TEST_CASE("tensor parallel: column -> row parallel linear equals the full layers", "[tp]") {
  auto group = tp_group();
  auto& g = *group;
  const int64_t n = g.size(), r = g.rank();
  const int64_t C = 8, F = 6 * n;
  auto build = [&](loom::Communicator* tp) {
    torch::manual_seed(3);  // the same draws for both builds
    auto column = loom::ColumnParallelLinear(linear_options(C, F, true, 0.5, tp));
    auto row = loom::RowParallelLinear(linear_options(F, C, true, 0.5, tp));
    {  // nonzero biases, the same on every rank
      torch::NoGradGuard no_grad;
      torch::manual_seed(4);
      auto column_bias = torch::randn({F}), row_bias = torch::randn({C});
      column->bias.copy_(loom::take_shard(column_bias, {0, {F}}, loom::tp_size(tp), loom::tp_rank(tp)));
      row->bias.copy_(row_bias);
    }
    return std::make_pair(column, row);
  };
  auto [full_up, full_down] = build(nullptr);
  auto [up, down] = build(&g);
  const loom::ShardLayout column_layout{0, {F}}, row_layout{1, {F}};
  CHECK(up->weight.equal(loom::take_shard(full_up->weight, column_layout, n, r)));
  CHECK(down->weight.equal(loom::take_shard(full_down->weight, row_layout, n, r)));

  torch::manual_seed(5);
  const auto input = torch::randn({2, 3, C});
  const auto upstream = torch::randn({2, 3, C});
  auto x_full = input.clone().requires_grad_();
  auto x = input.clone().requires_grad_();
  auto y_full = full_down->forward(torch::gelu(full_up->forward(x_full)));
  auto y = down->forward(torch::gelu(up->forward(x)));
  CHECK_THAT(y, close_to_full(y_full));
  (y_full * upstream).sum().backward();
  (y * upstream).sum().backward();
  CHECK_THAT(x.grad(), close_to_full(x_full.grad()));
  CHECK_THAT(up->weight.grad(), close_to_full(loom::take_shard(full_up->weight.grad(), column_layout, n, r)));
  CHECK_THAT(up->bias.grad(), close_to_full(loom::take_shard(full_up->bias.grad(), column_layout, n, r)));
  CHECK_THAT(down->weight.grad(), close_to_full(loom::take_shard(full_down->weight.grad(), row_layout, n, r)));
  CHECK_THAT(down->bias.grad(), close_to_full(full_down->bias.grad()));
  // The layouts name exactly the sharded parameters: the row-parallel bias is replicated.
  CHECK(up->shard_layouts().size() == 2);
  CHECK(down->shard_layouts().size() == 1);
}

TEST_CASE("tensor parallel: a fused QKV column-parallel layer keeps whole heads of q, k and v", "[tp]") {
  auto group = tp_group();
  auto& g = *group;
  const int64_t n = g.size(), r = g.rank();
  // 4n query heads and 2n kv heads of size 3: each rank keeps 4 q heads and 2 kv heads.
  const std::vector<int64_t> sections{12 * n, 6 * n, 6 * n};
  const int64_t C = 8, F = 24 * n;
  const loom::ShardLayout layout{0, sections}, output_layout{-1, sections};
  auto build = [&](loom::Communicator* tp) {
    torch::manual_seed(6);
    return loom::ColumnParallelLinear(linear_options(C, F, false, 0.1, tp, sections));
  };
  auto full = build(nullptr);
  auto sharded = build(&g);
  CHECK(sharded->weight.equal(loom::take_shard(full->weight, layout, n, r)));
  torch::manual_seed(7);
  const auto input = torch::randn({2, 3, C});
  const auto upstream = torch::randn({2, 3, F});
  auto x_full = input.clone().requires_grad_();
  auto x = input.clone().requires_grad_();
  auto y_full = full->forward(x_full);
  auto y = sharded->forward(x);  // (2, 3, F / n): [q heads | k heads | v heads] of this rank
  CHECK_THAT(y, close_to_full(loom::take_shard(y_full, output_layout, n, r)));
  (y_full * upstream).sum().backward();
  (y * loom::take_shard(upstream, output_layout, n, r)).sum().backward();  // together, the full loss
  CHECK_THAT(x.grad(), close_to_full(x_full.grad()));
  CHECK_THAT(sharded->weight.grad(), close_to_full(loom::take_shard(full->weight.grad(), layout, n, r)));
}

TEST_CASE("tensor parallel: vocab-parallel embedding, tied head and cross-entropy with label smoothing", "[tp]") {
  auto group = tp_group();
  auto& g = *group;
  const int64_t n = g.size();
  const int64_t V = 4 * n + 3, C = 6;  // uneven shares
  auto build = [&](loom::Communicator* tp) {
    torch::manual_seed(11);
    loom::VocabParallelEmbeddingOptions options;
    options.vocab_size = V;
    options.dim = C;
    options.tp = loom::TensorParallelism(tp, nullptr, false);
    auto embedding = loom::VocabParallelEmbedding(options);
    embedding->reset_normal(0.5);
    return embedding;
  };
  auto full = build(nullptr);
  auto sharded = build(&g);
  const auto mine = sharded->range();
  CHECK(sharded->weight.equal(slice(full->weight, 0, mine)));

  torch::manual_seed(12);
  const auto tokens = torch::randint(0, V, {3, 5}, torch::kLong);
  auto targets = torch::randint(0, V, {15}, torch::kLong);
  targets[2] = loom::kIgnoreIndex;
  targets[9] = loom::kIgnoreIndex;
  const auto mix = torch::randn({C, C});  // something between embedding and head
  const double smoothing = GENERATE(0.0, 0.1);
  auto loss_of = [&](loom::VocabParallelEmbeddingImpl& embedding, loom::Communicator* tp) {
    auto h = embedding.forward(tokens);                        // (3, 5, C)
    auto logits = embedding.logits(torch::tanh(h.matmul(mix)));  // (3, 5, V_r)
    auto loss = loom::cross_entropy(logits.flatten(0, 1), targets, smoothing, loom::kIgnoreIndex, tp);
    return std::make_tuple(h, logits.detach(), loss);
  };
  auto [h_full, z_full, loss_full] = loss_of(*full, nullptr);
  auto [h, z, loss] = loss_of(*sharded, &g);
  CHECK_THAT(h, close_to_full(h_full));
  CHECK_THAT(loss.item<double>(), loss_close_to(loss_full, z_full));
  loss_full.backward();
  loss.backward();
  CHECK_THAT(sharded->weight.grad(), close_to_full(slice(full->weight.grad(), 0, mine)));

  SECTION("cross-entropy alone: loss and logit gradients against the single-process loss") {
    torch::manual_seed(13);
    const auto logits_full = (3 * torch::randn({15, V})).requires_grad_();
    auto logits = slice(logits_full.detach(), 1, mine).clone().requires_grad_();
    auto expected = loom::cross_entropy(logits_full, targets, smoothing);
    auto got = loom::cross_entropy(logits, targets, smoothing, loom::kIgnoreIndex, &g);
    CHECK_THAT(got.item<double>(), loss_close_to(expected, logits_full));
    expected.backward();
    got.backward();
    CHECK_THAT(logits.grad(), close_to_full(slice(logits_full.grad(), 1, mine)));
  }

  SECTION("fused head + cross-entropy (train.loss_chunk_tokens): this rank's vocabulary rows of the head") {
    torch::manual_seed(14);
    const auto hidden_full = torch::randn({15, C}).requires_grad_();
    const auto weight_full = torch::randn({V, C}).requires_grad_();
    const auto logits_full = torch::nn::functional::linear(hidden_full, weight_full);
    auto expected = loom::cross_entropy(logits_full, targets, smoothing);
    expected.backward();
    // Each implementation of the softmax steps: loom's row kernels (AVX-512 where the CPU has it, portable)
    // and ATen's operators, each reducing its row statistics over the group between the steps.
    for (const auto steps : {loom::SoftmaxSteps::kAuto, loom::SoftmaxSteps::kAten, loom::SoftmaxSteps::kPortableKernels}) {
      CAPTURE(int(steps));
      auto hidden = hidden_full.detach().clone().requires_grad_();
      auto weight = slice(weight_full.detach(), 0, mine).clone().requires_grad_();
      auto got = loom::linear_cross_entropy(hidden, weight, targets, /*chunk_tokens=*/4, smoothing, loom::kIgnoreIndex,
                                            &g, steps);
      CHECK_THAT(got.item<double>(), loss_close_to(expected, logits_full));
      got.backward();
      CHECK_THAT(hidden.grad(), close_to_full(hidden_full.grad()));  // summed over the group
      CHECK_THAT(weight.grad(), close_to_full(slice(weight_full.grad(), 0, mine)));
    }
  }
}

TEST_CASE("gradient_norm: tensor-parallel shards count once across the TP group, replicas once", "[tp]") {
  auto group = tp_group();
  auto& g = *group;
  const int64_t n = g.size(), r = g.rank();
  torch::manual_seed(21);
  const auto split = torch::randn({4 * n});  // a parameter's gradient split over the ranks
  const auto replicated = torch::randn({3});  // a gradient every rank holds whole
  const double expected = std::sqrt(split.pow(2).sum().item<double>() + replicated.pow(2).sum().item<double>());
  auto with_grad = [](const torch::Tensor& grad) {
    auto p = torch::zeros_like(grad).requires_grad_();
    p.mutable_grad() = grad.clone();
    return p;
  };
  const auto mine = split.narrow(0, 4 * r, 4);
  // Whole parameters, and a ZeRO-1-style flat tensor holding both kinds.
  CHECK(loom::gradient_norm({with_grad(mine), with_grad(replicated)}, nullptr, &g, {{{0, 4}}, {}}).norm ==
        Approx(expected).epsilon(1e-6));  // fp32 sums of squares
  CHECK(loom::gradient_norm({with_grad(torch::cat({replicated, mine}))}, nullptr, &g, {{{3, 4}}}).norm ==
        Approx(expected).epsilon(1e-6));  // fp32 sums of squares
}
