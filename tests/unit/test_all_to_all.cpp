// The Communicator's variable all-to-all (counts first, then the rows), written for any world size: ctest
// runs it as a single-process unit test (the group of one) and under `mpirun -np 2` and `-np 4` ([mpi]).
// Rank s sends rank d count(s, d) rows, row i of them filled with value(s, d, i): each rank computes what
// every other sends it, so the received rows are checked against that closed form. The counts are uneven,
// rank 0 sends nothing to anyone, and the last rank receives nothing.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "models/moe.h"
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
// expert: the other ranks receive no rows, yet their experts stay on the graph and get a (zero) gradient, as
// the gradient sync needs of every rank (ZeRO's reduce-scatters over the ranks holding the same experts run in
// the same order everywhere); the output and rank 0's gradients are the single process's.
TEST_CASE("moe dispatch: ranks whose experts receive no rows still get their gradients, zero", "[mpi]") {
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
  for (const auto& p : split->parameters()) {
    REQUIRE(p.grad().defined());
    CHECK(p.size(0) == 2);
    if (me > 0 || n == 1) continue;
    CHECK(p.grad()[1].abs().max().item<float>() == 0);  // expert 1: no rows anywhere
  }
  if (me > 0)
    for (const auto& p : split->parameters()) CHECK(p.grad().abs().max().item<float>() == 0);
}
