// Collectives of the Communicator, written for any world size: ctest runs them as single-process unit
// tests (the group of one) and under `mpirun -np 2` and `-np 4` (the MPI backend). Expected values are
// closed forms of every rank's input, which each rank can compute for all ranks.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "core/config.h"
#include "parallel/mesh.h"
#include "parallel/process_group.h"
#include "test_util.h"

namespace {

std::unique_ptr<loom::Communicator> world() { return loom::test::processes().world(/*timeout_s=*/60); }

}  // namespace

TEST_CASE("communicator: all_reduce sums and maxes float, double and int64", "[mpi]") {
  auto comm = world();
  const int r = comm->rank(), n = comm->size();
  auto f = torch::full({5}, r + 1.0f);
  comm->all_reduce(f);
  CHECK(f.equal(torch::full({5}, n * (n + 1) / 2.0f)));
  auto d = torch::arange(4, torch::kDouble) * (r + 1);
  comm->all_reduce(d, loom::ReduceOp::kMax);
  CHECK(d.equal(torch::arange(4, torch::kDouble) * n));
  auto i = torch::full({3}, int64_t{1} << 40, torch::kLong) + r;
  comm->all_reduce(i);
  CHECK(i.equal(torch::full({3}, (int64_t{1} << 40) * n + n * (n - 1) / 2, torch::kLong)));
}

TEST_CASE("communicator: bf16 all_reduce accumulates in fp32 and rounds once", "[mpi]") {
  auto comm = world();
  const int n = comm->size();
  // Rank k contributes 1 + k * 2^-8 + 2^-9 per element: not exactly representable sums in bf16 steps.
  auto input_of = [](int k) { return torch::full({7}, 1.0 + k / 256.0 + 1.0 / 512.0, torch::kFloat).to(torch::kBFloat16); };
  auto x = input_of(comm->rank());
  comm->all_reduce(x);
  auto expected = torch::zeros({7}, torch::kFloat);
  for (int k = 0; k < n; ++k) expected += input_of(k).to(torch::kFloat);
  CHECK(x.scalar_type() == torch::kBFloat16);
  CHECK(x.equal(expected.to(torch::kBFloat16)));
}

TEST_CASE("communicator: all_gather and reduce_scatter place every rank's chunk", "[mpi]") {
  auto comm = world();
  const int r = comm->rank(), n = comm->size();
  auto mine = torch::arange(3, torch::kFloat) + 10.0f * r;
  auto gathered = torch::empty({3 * n}, torch::kFloat);
  comm->all_gather(mine, gathered);
  for (int k = 0; k < n; ++k) CHECK(gathered.narrow(0, 3 * k, 3).equal(torch::arange(3, torch::kFloat) + 10.0f * k));

  // Rank k's input element j is 100 k + j; chunk r of the sum is sum_k (100 k + 2 r + j), j < 2.
  auto input = torch::arange(2 * n, torch::kFloat) + 100.0f * r;
  auto output = torch::empty({2}, torch::kFloat);
  comm->reduce_scatter(input, output);
  const float ranks_sum = 100.0f * n * (n - 1) / 2.0f;
  CHECK(output.equal(torch::tensor({ranks_sum + n * 2.0f * r, ranks_sum + n * (2.0f * r + 1)})));
}

TEST_CASE("communicator: broadcast, ring send/recv and barrier", "[mpi]") {
  auto comm = world();
  const int r = comm->rank(), n = comm->size();
  auto t = torch::full({4}, static_cast<double>(r), torch::kDouble);
  comm->broadcast(t, n - 1);
  CHECK(t.equal(torch::full({4}, n - 1.0, torch::kDouble)));
  comm->barrier();
  if (n == 1) return;  // a group of one has no peer to send to
  auto received = torch::empty({2}, torch::kLong);
  auto recv = comm->recv_async(received, (r + n - 1) % n, /*tag=*/7);
  comm->send(torch::tensor({r, r * r}, torch::kLong), (r + 1) % n, /*tag=*/7);
  recv->wait();
  const int64_t from = (r + n - 1) % n;
  CHECK(received.equal(torch::tensor({from, from * from}, torch::kLong)));
}

TEST_CASE("communicator: async all_reduces complete in order while the caller computes", "[mpi]") {
  auto comm = world();
  const int r = comm->rank(), n = comm->size();
  std::vector<torch::Tensor> buckets;
  std::vector<std::shared_ptr<loom::Work>> work;
  for (int b = 0; b < 4; ++b) {
    buckets.push_back(torch::full({1 << 16}, static_cast<float>(b + r)));
    work.push_back(comm->all_reduce_async(buckets.back()));
  }
  auto busy = torch::randn({256, 256}).matmul(torch::randn({256, 256}));  // compute meanwhile
  CHECK(busy.size(0) == 256);
  for (int b = 0; b < 4; ++b) {
    work[b]->wait();
    CHECK(buckets[b].equal(torch::full({1 << 16}, static_cast<float>(n * b + n * (n - 1) / 2))));
  }
}

TEST_CASE("communicator: mesh groups reduce within their axes only", "[mpi]") {
  auto comm = world();
  const int n = comm->size();
  const int tp = n % 2 == 0 ? 2 : 1;
  // TP x DP, and every rank data-parallel with hybrid sharding: ZeRO groups of n / 2 DP ranks, 2 replicas.
  std::vector<std::vector<std::string>> layouts = {{"parallel.dp=-1", "parallel.tp=" + std::to_string(tp)}};
  if (n % 2 == 0)
    layouts.push_back({"parallel.dp=-1", "parallel.zero=1", "parallel.shard_size=" + std::to_string(n / 2)});
  // Expert parallelism folded over dp x cp: one ep group of all n ranks (n / 2 DP ranks x 2 CP ranks).
  if (n % 2 == 0)
    layouts.push_back({"parallel.dp=-1", "parallel.cp=2", "parallel.ep=" + std::to_string(n),
                       "model.moe.num_experts=" + std::to_string(n), "data.seq_len=64", "model.dropout=0"});
  for (const auto& sets : layouts) {
    const auto config = loom::parse_config("", "mesh.yaml", sets);
    const loom::Mesh mesh(config, *comm);
    const auto& shape = mesh.shape();
    CAPTURE(mesh.describe());
    // Sum of world ranks over each group: the ranks that equal this one outside the group's axes.
    for (const loom::AxisSet axes : {loom::kDpAxes, loom::AxisSet(loom::MeshAxis::kTp), loom::AxisSet(loom::MeshAxis::kPp),
                                     loom::kShardAxes, loom::kReplicaAxes, loom::kCpAxes, loom::kExpertAxes,
                                     loom::kExpertDataParallelAxes, loom::kExpertShardAxes}) {
      auto t = torch::tensor({static_cast<double>(mesh.rank())}, torch::kDouble);
      mesh.host_group(axes).all_reduce(t);
      double expected = 0;
      for (int64_t r = 0; r < n; ++r)
        if (shape.group_color(r, axes) == shape.group_color(mesh.rank(), axes)) expected += static_cast<double>(r);
      CHECK(t.item<double>() == expected);
      CHECK(mesh.host_group(axes).size() == mesh.size(axes));
      CHECK(mesh.host_group(axes).rank() == mesh.coord(axes));
      CHECK(&mesh.device_group(axes) == &mesh.host_group(axes));  // on the CPU one MPI group serves both
    }
  }
}
