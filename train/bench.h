// `loom bench`: the real Trainer step on synthetic random data (no data files; what its family's
// use_synthetic_data makes of data.seq_len: a gpt random tokens, a transformer copy pairs of data.seq_len
// tokens, counted as target tokens), timed after warm-up
// steps, against a matrix-product ceiling measured in the same process, dtype and thread count. What it
// reports: throughput, the median step, MFU (model FLOPs per second / that ceiling), peak memory, where a
// step's time goes (the Trainer's own phase timer) and the share of it outside matrix products; with a
// pipeline, each stage's measured bubble against the ideal one; each rank's measured peak memory against
// `loom info`'s estimate for it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "parallel/process_group.h"
#include "train/step_phases.h"

namespace loom {

struct BenchOptions {
  int64_t steps = 20;   // timed steps
  int64_t warmup = 3;   // untimed steps first (allocator, oneDNN kernel selection, lazy AdamW state)
  int64_t profile_steps = 2;  // extra steps counted by operator (CPU), never timed
};

// One rank's memory during the timed steps against `loom info`'s estimate for its place in the layout.
struct RankMemory {
  int64_t rank = 0, dp = 0, cp = 0, tp = 0, pp = 0;
  double base_mb = 0;      // CPU: resident set before the model was built (libtorch, MPI); CUDA: 0
  double peak_mb = 0;      // the peak above base_mb: the model, its training state and a step's working set
  double tensors_mb = -1;  // bytes in tensors at the peak (CUDA, or CPU with the caching allocator; -1: not counted)
  double estimate_mb = 0;  // the run plan's estimate for its pp stage (train/run_plan.h): bytes in tensors
};

struct BenchResult {
  std::string device;
  PrecisionConfig precision;
  int64_t threads = 0, parameters = 0, steps = 0, warmup = 0, tokens_per_step = 0;
  double tokens_per_s = 0;     // tokens of the timed steps / their total time
  double step_ms_median = 0, step_ms_mean = 0, step_ms_min = 0;
  double cpu_ms_per_step = 0;  // CPU time of all this process's threads per timed step: on a shared machine
                               // tokens per CPU second compares runs far better than wall-clock time
  double flops_per_token = 0;  // models/estimates: training FLOPs per token
  double gemm_peak_gflops = 0;
  double mfu = 0;              // flops_per_token * tokens_per_s / the gemm ceilings of every rank together
  double peak_memory_mb = 0;   // of the timed steps (CPU: resident set high-water mark, CUDA: allocated)
  double peak_allocated_mb = -1;  // CPU with the caching allocator: bytes in tensors at the peak (-1: not known)
  StepPhases phases_mean;      // seconds per step, averaged over the timed steps
  double gemm_share = -1, attention_share = -1, non_matmul_share = -1;  // of the profiled steps; -1 on GPUs
  double final_loss = 0;
  // Pipeline runs: per stage, the share of the timed steps' pipeline time it sat idle waiting for a
  // neighbour (the bubble, measured), and the ideal (p - 1) / (m + p - 1). Empty without a pipeline.
  std::vector<double> pipeline_idle;
  double pipeline_ideal_bubble = 0;
  std::vector<RankMemory> ranks;  // every rank of the world, in rank order
};

BenchResult run_bench(Config config, const ProcessGroup& processes, const BenchOptions& options);

// Best throughput of an n x n x n matrix product in `dtype` on `device`, with the current thread count: the
// ceiling MFU is measured against.
double measure_gemm_gflops(torch::Device device, Dtype dtype, int64_t n, int repeats);

}  // namespace loom
