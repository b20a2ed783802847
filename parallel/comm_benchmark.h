// All-reduce bandwidth: one plain MPI_Allreduce of a whole fp32 buffer against the way loom reduces
// gradients (the same bytes cut into parallel.bucket_mb buckets, each an async all-reduce on the
// communicator's worker thread, then all awaited). `loom comm-bench` prints it; it needs mpirun.
#pragma once
#include <cstdint>

#include "parallel/communicator.h"
#include "parallel/process_group.h"

namespace loom {

struct AllReduceTiming {
  int64_t bytes = 0;
  int64_t buckets = 0;
  double plain_s = 0;     // median seconds of MPI_Allreduce on MPI_COMM_WORLD
  double bucketed_s = 0;  // median seconds of the bucketed async all-reduce on `world`
};

// Medians over `iterations` after one warm-up of each. Collective over every rank.
AllReduceTiming time_all_reduce(const ProcessGroup& processes, Communicator& world, int64_t bytes, double bucket_mb,
                                int iterations);

// Bus bandwidth in GB/s as nccl-tests reports it: bytes / seconds * 2 (n - 1) / n, what each link carries.
double bus_bandwidth_gbps(int64_t bytes, double seconds, int64_t ranks);

}  // namespace loom
