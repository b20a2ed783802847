#include "parallel/comm_benchmark.h"

#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

#include "core/error.h"

namespace loom {
namespace {

double median_seconds(Communicator& world, int iterations, const std::function<void()>& run) {
  run();  // warm-up: connections, buffers
  std::vector<double> times;
  for (int i = 0; i < iterations; ++i) {
    world.barrier();
    const auto start = std::chrono::steady_clock::now();
    run();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

AllReduceTiming time_all_reduce(const ProcessGroup& processes, Communicator& world, int64_t bytes, double bucket_mb,
                                int iterations) {
  if (!processes.distributed()) throw Error("comm-bench measures communication between ranks: run it under mpirun");
  LOOM_CHECK(iterations > 0 && bytes >= 4 && bucket_mb > 0, "comm-bench needs iterations > 0, bytes >= 4, bucket_mb > 0");
  const int64_t numel = bytes / 4;
  auto buffer = torch::ones({numel});
  const auto bucket_numel = std::max<int64_t>(1, static_cast<int64_t>(bucket_mb * 1024 * 1024 / 4));
  std::vector<torch::Tensor> buckets;
  for (int64_t first = 0; first < numel; first += bucket_numel)
    buckets.push_back(buffer.narrow(0, first, std::min(bucket_numel, numel - first)));

  // The bucketed path must compute the sum before its speed means anything.
  const auto n = static_cast<double>(world.size());
  buffer.fill_(static_cast<double>(world.rank() + 1));
  std::vector<std::shared_ptr<Work>> check;
  for (auto& bucket : buckets) check.push_back(world.all_reduce_async(bucket));
  for (auto& work : check) work->wait();
  LOOM_CHECK(buffer.eq(n * (n + 1) / 2).all().item<bool>(), "bucketed all-reduce gave a wrong sum");

  AllReduceTiming timing;
  timing.bytes = numel * 4;
  timing.buckets = static_cast<int64_t>(buckets.size());
  timing.plain_s = median_seconds(world, iterations, [&] {
    LOOM_CHECK(MPI_Allreduce(MPI_IN_PLACE, buffer.data_ptr<float>(), static_cast<int>(numel), MPI_FLOAT, MPI_SUM,
                             MPI_COMM_WORLD) == MPI_SUCCESS,
               "MPI_Allreduce failed");
  });
  timing.bucketed_s = median_seconds(world, iterations, [&] {
    std::vector<std::shared_ptr<Work>> pending;
    for (auto& bucket : buckets) pending.push_back(world.all_reduce_async(bucket));
    for (auto& work : pending) work->wait();
  });
  return timing;
}

double bus_bandwidth_gbps(int64_t bytes, double seconds, int64_t ranks) {
  if (seconds <= 0 || ranks < 2) return 0;
  return static_cast<double>(bytes) / seconds * 2.0 * static_cast<double>(ranks - 1) / static_cast<double>(ranks) / 1e9;
}

}  // namespace loom
