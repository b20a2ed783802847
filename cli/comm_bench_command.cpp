// `loom comm-bench [--mb 1,4,16,64] [--bucket-mb 25] [--iterations 20] [--json]`, under mpirun: all-reduce
// of each size as one plain MPI_Allreduce and as loom's bucketed async all-reduce (how gradients are
// reduced), with median times and bus bandwidth. Rank 0 prints.
#include <cstdio>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/parse_number.h"
#include "parallel/comm_benchmark.h"

namespace loom::cli {

int comm_bench_command(const Argv& argv, const ProcessGroup& processes) {
  constexpr int kMaxMb = 16 * 1024;  // per all-reduce: the buffers are allocated twice
  const auto args = parse_args(argv, {"mb", "bucket-mb", "iterations"}, {"json"}, 0,
                               "mpirun -np N loom comm-bench [--mb 1,4,16,64] [--bucket-mb 25] [--iterations 20] [--json]");
  std::vector<double> sizes;
  std::stringstream list(args.option_or("mb", "1,4,16,64"));
  for (std::string item; std::getline(list, item, ',');) {
    const auto mb = parse_double(item);
    if (!mb || *mb <= 0 || *mb > kMaxMb)
      throw ConfigError("--mb: expected sizes in MB from 1e-6 to " + std::to_string(kMaxMb) + " such as 1,4,16, got '" +
                        item + "'");
    sizes.push_back(*mb);
  }
  const double bucket_mb = args.double_option("bucket-mb", 25.0, 1e-6, kMaxMb);
  const auto iterations = static_cast<int>(args.int_option("iterations", 20, 1, 100000));
  auto world = processes.world(/*timeout_s=*/300);
  const int64_t ranks = processes.info().world_size;

  nlohmann::json rows = nlohmann::json::array();
  for (double mb : sizes) {
    const auto t = time_all_reduce(processes, *world, static_cast<int64_t>(mb * 1024 * 1024), bucket_mb, iterations);
    rows.push_back({{"mb", mb},
                    {"buckets", t.buckets},
                    {"plain_ms", t.plain_s * 1e3},
                    {"bucketed_ms", t.bucketed_s * 1e3},
                    {"plain_busbw_gbps", bus_bandwidth_gbps(t.bytes, t.plain_s, ranks)},
                    {"bucketed_busbw_gbps", bus_bandwidth_gbps(t.bytes, t.bucketed_s, ranks)}});
  }
  if (processes.info().rank != 0) return 0;
  if (args.flag("json")) {
    std::cout << nlohmann::json{{"ranks", ranks}, {"bucket_mb", bucket_mb}, {"sizes", rows}}.dump(2) << "\n";
    return 0;
  }
  std::printf("all-reduce of fp32 over %lld ranks, median of %d, bus bandwidth = bytes/time * 2(n-1)/n\n",
              static_cast<long long>(ranks), iterations);
  std::printf("%10s %8s %14s %14s %16s %16s\n", "MB", "buckets", "MPI ms", "loom ms", "MPI GB/s", "loom GB/s");
  for (const auto& r : rows)
    std::printf("%10.1f %8lld %14.3f %14.3f %16.2f %16.2f\n", r["mb"].get<double>(),
                static_cast<long long>(r["buckets"].get<int64_t>()), r["plain_ms"].get<double>(),
                r["bucketed_ms"].get<double>(), r["plain_busbw_gbps"].get<double>(), r["bucketed_busbw_gbps"].get<double>());
  return 0;
}

}  // namespace loom::cli
