// The Communicator's variable all-to-all (counts first, then the rows), written for any world size: ctest
// runs it as a single-process unit test (the group of one) and under `mpirun -np 2` and `-np 4` ([mpi]).
// Rank s sends rank d count(s, d) rows, row i of them filled with value(s, d, i): each rank computes what
// every other sends it, so the received rows are checked against that closed form. The counts are uneven,
// rank 0 sends nothing to anyone, and the last rank receives nothing.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "models/moe.h"
#include "models/moe_dispatch.h"
#include "models/recompute.h"
#include "parallel/process_group.h"
#include "test_util.h"

namespace {

// Rows rank s sends rank d: none from rank 0, none to the last rank (with more than one), else s + 2d - 1.
int64_t a2a_count(int s, int d, int n) {
  if (n > 1 && (s == 0 || d == n - 1)) return 0;
  return s + 2 * d + (n == 1 ? 2 : -1) + 1;
}
float a2a_value(int s, int d, int64_t i) { return 1000.0f * s + 100.0f * d + static_cast<float>(i); }

}  // namespace

TEST_CASE("communicator: all_to_all moves uneven row counts, with ranks sending or receiving nothing", "[mpi]") {
  auto comm = loom::test::processes().world(/*timeout_s=*/60);
  const int me = comm->rank(), n = comm->size();
  std::vector<int64_t> send_rows;
  std::vector<torch::Tensor> parts;
  for (int d = 0; d < n; ++d) {
    send_rows.push_back(a2a_count(me, d, n));
    for (int64_t i = 0; i < send_rows.back(); ++i) parts.push_back(torch::full({1, 3}, a2a_value(me, d, i)));
  }
  auto input = parts.empty() ? torch::empty({0, 3}) : torch::cat(parts);

  // The counts half on its own.
  const auto counts = comm->exchange_counts(send_rows);
  for (int s = 0; s < n; ++s) CHECK(counts[static_cast<size_t>(s)] == a2a_count(s, me, n));

  std::vector<int64_t> recv_rows;
  auto output = comm->all_to_all(input, send_rows, &recv_rows);
  CHECK(recv_rows == counts);
  int64_t row = 0;
  for (int s = 0; s < n; ++s)
    for (int64_t i = 0; i < a2a_count(s, me, n); ++i, ++row)
      CHECK(output[row].equal(torch::full({3}, a2a_value(s, me, i))));
  CHECK(output.size(0) == row);
  if (n > 1 && me == n - 1) CHECK(output.size(0) == 0);

  // Other dtypes and row shapes go as bytes: int64 rows of shape (2, 2), one row to every rank.
  auto longs = (torch::arange(4 * n, torch::kLong) + 100 * me).reshape({n, 2, 2});
  auto got = comm->all_to_all(longs, std::vector<int64_t>(static_cast<size_t>(n), 1));
  for (int s = 0; s < n; ++s)
    CHECK(got[s].equal((torch::arange(4, torch::kLong) + 4 * me + 100 * s).reshape({2, 2})));
}

// Expert parallelism's dispatch (models/moe_dispatch.h) when every token of every rank goes to rank 0's first
// expert: the other ranks receive no rows and their experts get no gradient (the gradient sync reduces zeros
// for them: test_gradient_sync.cpp, "sparse"), yet every rank takes part in both exchanges, forward and
// backward (the test would hang otherwise); the output and rank 0's gradients are the single process's.
TEST_CASE("moe dispatch: ranks whose experts receive no rows get no gradient, the exchanges still run", "[mpi]") {
  auto comm = loom::test::processes().world(/*timeout_s=*/60);
  const int me = comm->rank(), n = comm->size();
  const int64_t E = 2 * n, C = 4, F = 3, N = 5;
  torch::manual_seed(11);  // every rank draws the same whole layer, as a training run does
  loom::MoeExperts whole(E, C, F, loom::Activation::kSwiglu, 0.3, 0.3);
  loom::MoeExperts split(E, C, F, loom::Activation::kSwiglu, 0.3, 0.3);
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < whole->parameters().size(); ++i) split->parameters()[i].copy_(whole->parameters()[i]);
  }
  split->keep_local_experts(*comm);
  const auto x = torch::randn({N, C}) + me;  // each rank its own tokens
  const auto experts = torch::zeros({N, 1}, torch::kLong);
  const auto weights = torch::full({N, 1}, 0.5);
  const auto y = split->forward(x, experts, weights);
  y.sum().backward();
  const auto expected = whole->forward(x, experts, weights);
  CHECK(torch::allclose(y, expected, 1e-5, 1e-6));
  CHECK(x.grad().defined() == false);  // x needs no gradient: only the experts' reach back
  for (const auto& p : split->parameters()) {
    CHECK(p.size(0) == 2);
    CHECK(p.grad().defined() == (me == 0));
    if (me > 0 || n == 1) continue;
    CHECK(p.grad()[1].abs().max().item<float>() == 0);  // expert 1: no rows anywhere
  }
  // The rows' gradients go back through both exchanges: each rank's x gets its own tokens' gradient.
  const auto xg = x.detach().requires_grad_(true);
  split->forward(xg, experts, weights).sum().backward();
  const auto xw = x.detach().requires_grad_(true);
  whole->forward(xw, experts, weights).sum().backward();
  CHECK_THAT(xg.grad(), loom::test::tensor_close_to(xw.grad(), 1e-5, 1e-6));
}

namespace {

// An MoE layer with a gated shared expert (its halves computed while the rows are in flight) of E = 2 x ranks
// experts, the same on every rank (seeded).
loom::Moe shared_expert_moe(int ranks) {
  loom::MoeOptions o;
  o.d_model = 6;
  o.num_experts = 2 * ranks;
  o.top_k = 2;
  o.d_ff = 5;
  o.shared_d_ff = 4;
  o.init_std = o.out_init_std = 0.3;
  torch::manual_seed(23);
  return loom::Moe(o);
}

}  // namespace

// Expert parallelism with a shared expert under activation checkpointing (models/recompute.h): the layer's
// re-run in backward takes its first run's exchanges from the recompute's stash, so the step starts exactly the
// all-to-alls of the plain layer (the counts, the rows out and back in forward, their reverse in backward: 5
// per layer), and the output and every gradient are the plain layer's, whose output is the single process's.
// With the replay turned off the re-run dispatches again: 3 more, which the count sees.
TEST_CASE("moe dispatch: a checkpointed layer's re-run exchanges nothing, its gradients the plain layer's", "[mpi]") {
  auto comm = loom::test::processes().world(/*timeout_s=*/60);
  const int me = comm->rank(), n = comm->size();
  auto whole = shared_expert_moe(n);
  auto plain = shared_expert_moe(n), checkpointed = shared_expert_moe(n);
  loom::keep_local_experts(*plain, *comm);
  loom::keep_local_experts(*checkpointed, *comm);
  torch::manual_seed(100 + me);  // each rank its own tokens
  const auto x0 = torch::randn({2, 7, 6});
  const auto g = torch::randn({2, 7, 6});

  struct Run {
    torch::Tensor y, x_grad;
    std::vector<torch::Tensor> grads;
    int64_t exchanges = 0;
  };
  auto run = [&](loom::Moe& layer, bool checkpoint) {
    for (auto& p : layer->parameters()) p.mutable_grad() = torch::Tensor();
    Run out;
    const auto x = x0.clone().requires_grad_(true);
    const int64_t before = loom::expert_all_to_all_count();
    loom::RecomputeSegments segments{[&layer](const torch::Tensor& in, const loom::RecomputeSide&) { return layer->forward(in); }};
    out.y = checkpoint ? loom::recompute_in_backward(segments, x) : layer->forward(x);
    (out.y * g).sum().backward();
    out.exchanges = loom::expert_all_to_all_count() - before;
    out.x_grad = x.grad();
    for (auto& p : layer->parameters()) out.grads.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
    return out;
  };
  const auto reference = run(plain, false);
  CHECK(reference.exchanges == (n > 1 ? 5 : 0));
  {
    torch::NoGradGuard no_grad;
    CHECK_THAT(reference.y, loom::test::tensor_close_to(whole->forward(x0), 1e-5, 1e-6));
  }
  auto same_as_plain = [&](const Run& r) {
    CHECK(torch::equal(r.y.detach(), reference.y.detach()));
    CHECK_THAT(r.x_grad, loom::test::tensor_close_to(reference.x_grad, 1e-6, 1e-7));
    for (size_t i = 0; i < r.grads.size(); ++i) CHECK_THAT(r.grads[i], loom::test::tensor_close_to(reference.grads[i], 1e-6, 1e-7));
  };
  const auto replayed = run(checkpointed, true);
  CHECK(replayed.exchanges == reference.exchanges);
  same_as_plain(replayed);
  loom::set_moe_recompute_replay(false);
  const auto dispatched_again = run(checkpointed, true);
  loom::set_moe_recompute_replay(true);
  CHECK(dispatched_again.exchanges == reference.exchanges + (n > 1 ? 3 : 0));
  same_as_plain(dispatched_again);
}

// Not run by default (docs/performance.md, "Expert parallelism: exposed all-to-all"): under `mpirun -np 2`, one
// MoE layer of configs/moe-kjv.yaml's shape with a shared expert (d_model 256, 8 experts of d_ff 256, top-2, a
// shared MLP of 256; 8 x 128 tokens a rank), forward and backward, one thread a rank, with the shared expert
// overlapping the exchanges and after them, alternating: the milliseconds blocked in the all-to-alls and the
// whole pass's, medians over the rounds.
TEST_CASE("moe dispatch bench: the shared expert overlapping the all-to-alls", "[.moe-ep-bench]") {
  auto comm = loom::test::processes().world(/*timeout_s=*/120);
  torch::set_num_threads(1);
  const int n = comm->size();
  loom::MoeOptions o;
  o.d_model = 256;
  o.num_experts = 8;
  o.top_k = 2;
  o.d_ff = o.shared_d_ff = 256;
  torch::manual_seed(3);
  loom::Moe layer(o);
  loom::keep_local_experts(*layer, *comm);
  torch::manual_seed(50 + comm->rank());
  const auto x = torch::randn({8, 128, 256}).requires_grad_(true);
  const auto g = torch::randn({8, 128, 256});
  const int rounds = 15;
  std::vector<double> waited[2], took[2];
  for (int round = 0; round < rounds + 2; ++round) {
    for (const int overlap : {0, 1}) {
      loom::set_moe_shared_overlap(overlap == 1);
      comm->barrier();
      const double before = loom::expert_all_to_all_wait_s();
      const auto start = std::chrono::steady_clock::now();
      (layer->forward(x) * g).sum().backward();
      const double pass = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (round < 2) continue;  // warm-up
      waited[overlap].push_back(1e3 * (loom::expert_all_to_all_wait_s() - before));
      took[overlap].push_back(1e3 * pass);
    }
  }
  loom::set_moe_shared_overlap(true);
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf("rank %d of %d: all-to-all waited %.2f ms (after) / %.2f ms (overlapped), pass %.2f / %.2f ms\n",
              comm->rank(), n, median(waited[0]), median(waited[1]), median(took[0]), median(took[1]));
}
