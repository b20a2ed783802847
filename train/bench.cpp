#include "train/bench.h"

#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <numeric>

#include "core/cpu_allocator.h"
#include "core/error.h"
#include "parallel/pipeline_schedule.h"
#include "train/model_family.h"
#include "train/op_time.h"
#include "train/trainer.h"

#ifdef LOOM_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace loom {
namespace {

void synchronize(torch::Device device) {
#ifdef LOOM_CUDA
  if (device.is_cuda()) c10::cuda::device_synchronize();
#else
  (void)device;
#endif
}

torch::ScalarType scalar_type(Dtype dtype) {
  if (dtype == Dtype::kBf16) return torch::kBFloat16;
  if (dtype == Dtype::kFp16) return torch::kHalf;
  return torch::kFloat;
}

// The peak-memory counter starts again from what is in use now: the model, not the set-up before it.
void reset_peak_memory(torch::Device device) {
#ifdef LOOM_CUDA
  if (device.is_cuda()) {
    c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
    return;
  }
#endif
  (void)device;
  if (CachingCpuAllocator* allocator = caching_cpu_allocator()) allocator->reset_peak();
  std::ofstream("/proc/self/clear_refs") << "5";  // Linux: resets VmHWM to the current resident set
}

double peak_memory_mb(torch::Device device) {
#ifdef LOOM_CUDA
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    return static_cast<double>(stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak) /
           (1024.0 * 1024.0);
  }
#endif
  (void)device;
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;  // kB
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);  // no /proc: the process's whole-life maximum
  return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

// The resident set now (CPU; 0 without /proc): what the process holds before the model exists.
double resident_mb() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;  // kB
  return 0;
}

// Every rank's measured peaks (above its base; in tensors) and estimate, gathered by a sum over the world.
std::vector<RankMemory> rank_memory(const RunPlan& plan, const Mesh& mesh, double base_mb, double peak_mb,
                                    double tensors_mb) {
  const int64_t world = mesh.world().size(), rank = mesh.world().rank();
  const MeshCoords c = mesh.coords();
  auto rows = torch::zeros({world, 8}, torch::kDouble);
  rows[rank] = torch::tensor({static_cast<double>(mesh.coord(kDpAxes)), static_cast<double>(mesh.coord(kCpAxes)),
                              static_cast<double>(c[MeshAxis::kTp]), static_cast<double>(c[MeshAxis::kPp]), base_mb,
                              peak_mb - base_mb, tensors_mb,
                              static_cast<double>(plan.stage(c[MeshAxis::kPp]).memory.total()) / (1024.0 * 1024.0)},
                             torch::kDouble);
  mesh.world().all_reduce(rows);
  std::vector<RankMemory> out;
  for (int64_t r = 0; r < world; ++r) {
    const auto row = rows[r];
    out.push_back({r, row[0].item<int64_t>(), row[1].item<int64_t>(), row[2].item<int64_t>(), row[3].item<int64_t>(),
                   row[4].item<double>(), row[5].item<double>(), row[6].item<double>(), row[7].item<double>()});
  }
  return out;
}

// The matrix-product ceilings of every rank together: what the world's tokens/s is measured against.
double world_gemm_gflops(const Mesh& mesh, double rank_gflops) {
  auto sum = torch::tensor(rank_gflops, torch::kDouble);
  mesh.world().all_reduce(sum);
  return sum.item<double>();
}

double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec); };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

}  // namespace

double measure_gemm_gflops(torch::Device device, Dtype dtype, int64_t n, int repeats) {
  torch::NoGradGuard no_grad;
  const auto options = torch::TensorOptions(scalar_type(dtype)).device(device);
  const auto a = torch::randn({n, n}, options), b = torch::randn({n, n}, options);
  auto c = torch::empty({n, n}, options);
  double best = 0;
  for (int i = 0; i < repeats + 2; ++i) {  // the first two pick kernels and fault in memory
    synchronize(device);
    const auto start = std::chrono::steady_clock::now();
    torch::mm_out(c, a, b);
    synchronize(device);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (i >= 2) best = std::max(best, 2.0 * static_cast<double>(n * n * n) / s * 1e-9);
  }
  return best;
}

BenchResult run_bench(Config config, const ProcessGroup& processes, const BenchOptions& options) {
  LOOM_CHECK(options.steps > 0, "--steps must be at least 1");
  LOOM_CHECK(options.warmup >= 0, "--warmup must not be negative");
  if (config.model.vocab_size <= 0)
    throw ConfigError(config.where("model.vocab_size") +
                      ": model.vocab_size: loom bench trains on synthetic tokens and needs it set (--set model.vocab_size=N)");
  // Synthetic data replaces the files; nothing is evaluated, logged per step or checkpointed.
  config.data.train.clear();
  config.data.valid.clear();
  config.model.init_from.clear();
  model_family(config.model.arch).use_synthetic_data(config);
  const double base_mb = resident_mb();  // CUDA: the allocator's counts hold only the model's tensors
  Trainer trainer(RunPlan(config, processes.info().world_size), processes, TaskData::kSynthetic);
  trainer.synchronize_phases(true);
  const torch::Device device = trainer.device();

  BenchResult r;
  r.device = device.str();
  r.precision = config.precision;
  r.threads = torch::get_num_threads();
  r.parameters = trainer.plan().parameters();
  r.steps = options.steps;
  r.warmup = options.warmup;
  r.tokens_per_step = config.train.batch_size * config.data.seq_len;
  r.flops_per_token = trainer.plan().flops_per_token();
  // A GPU's clocks rise over its first products (an 8192^3 bf16 one takes about 1.4 ms on an H200): more of them.
  r.gemm_peak_gflops = measure_gemm_gflops(device, config.precision.dtype, device.is_cuda() ? 8192 : 2048,
                                           device.is_cuda() ? 20 : 5);

  for (int64_t i = 0; i < options.warmup; ++i) trainer.step();
  synchronize(device);
  reset_peak_memory(device);
  std::vector<double> step_s;
  StepPhases sum;
  trainer.reset_pipeline_stats();
  const double cpu_start = cpu_seconds();
  for (int64_t i = 0; i < options.steps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    r.final_loss = trainer.step().loss;
    synchronize(device);
    step_s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    const StepPhases& p = trainer.last_phases();
    sum.data_s += p.data_s;
    sum.forward_s += p.forward_s;
    sum.backward_s += p.backward_s;
    sum.sync_s += p.sync_s;
    sum.optimizer_s += p.optimizer_s;
    sum.pipeline_wait_s += p.pipeline_wait_s;
    sum.dp_wait_s += p.dp_wait_s;
    sum.cp_wait_s += p.cp_wait_s;
    sum.ep_wait_s += p.ep_wait_s;
  }
  r.cpu_ms_per_step = (cpu_seconds() - cpu_start) / static_cast<double>(options.steps) * 1e3;
  r.peak_memory_mb = peak_memory_mb(device);
  if (const CachingCpuAllocator* allocator = caching_cpu_allocator(); allocator != nullptr && !device.is_cuda())
    r.peak_allocated_mb = static_cast<double>(allocator->stats().peak_allocated) / (1024.0 * 1024.0);
  const double tensors_mb = device.is_cuda() ? r.peak_memory_mb : r.peak_allocated_mb;
  r.ranks = rank_memory(trainer.plan(), trainer.mesh(), device.is_cuda() ? 0.0 : base_mb, r.peak_memory_mb, tensors_mb);
  const double total_s = std::accumulate(step_s.begin(), step_s.end(), 0.0);
  const auto n = static_cast<double>(options.steps);
  r.tokens_per_s = static_cast<double>(r.tokens_per_step) * n / total_s;
  r.step_ms_median = median(step_s) * 1e3;
  r.step_ms_mean = total_s / n * 1e3;
  r.step_ms_min = *std::min_element(step_s.begin(), step_s.end()) * 1e3;
  r.mfu = r.flops_per_token * r.tokens_per_s / (world_gemm_gflops(trainer.mesh(), r.gemm_peak_gflops) * 1e9);
  r.phases_mean = {sum.data_s / n,  sum.forward_s / n,   sum.backward_s / n,
                   sum.sync_s / n,  sum.optimizer_s / n, sum.pipeline_wait_s / n, sum.dp_wait_s / n,
                   sum.cp_wait_s / n, sum.ep_wait_s / n};
  if (const Mesh& mesh = trainer.mesh(); mesh.pp() > 1) {
    // Each stage's first rank reports its idle share; the sum over the world puts them side by side.
    auto idle = torch::zeros({mesh.pp()}, torch::kDouble);
    if (mesh.coord(kDpAxes) == 0 && mesh.coord(MeshAxis::kTp) == 0)
      idle[mesh.coord(MeshAxis::kPp)] = trainer.pipeline_stats().idle_fraction();
    mesh.world().all_reduce(idle);
    for (int64_t s = 0; s < mesh.pp(); ++s) r.pipeline_idle.push_back(idle[s].item<double>());
    r.pipeline_ideal_bubble = ideal_bubble_fraction(mesh.pp(), config.accumulation_steps(mesh.dp()));
  }

  if (!device.is_cuda() && options.profile_steps > 0) {
    double profiled_s = 0;
    OpTimes times;
    {
      OpTimeCounter counter;
      const auto start = std::chrono::steady_clock::now();
      for (int64_t i = 0; i < options.profile_steps; ++i) trainer.step();
      profiled_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      times = counter.times();
    }
    r.gemm_share = times.gemm_s / profiled_s;
    r.attention_share = times.attention_s / profiled_s;
    r.non_matmul_share = 1.0 - r.gemm_share - r.attention_share;
  }
  return r;
}

}  // namespace loom
