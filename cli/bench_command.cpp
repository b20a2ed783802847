// `loom bench CONFIG [--set ...] [--steps N] [--warmup N] [--profile-steps N] [--json]`: trains the configured model on
// synthetic tokens with the real Trainer step (train/bench.h) and prints throughput, MFU against a matrix
// product ceiling measured in the same run, peak memory and where a step's time goes.
#include <cstdio>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "train/bench.h"

namespace loom::cli {
namespace {

nlohmann::json to_json(const BenchResult& r) {
  // A negative value: not measured (JSON null).
  const auto share = [](double s) { return s < 0 ? nlohmann::json(nullptr) : nlohmann::json(s); };
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& m : r.ranks)
    ranks.push_back({{"rank", m.rank}, {"dp", m.dp}, {"cp", m.cp}, {"tp", m.tp}, {"pp", m.pp}, {"base_mb", m.base_mb},
                     {"peak_mb", m.peak_mb}, {"tensors_mb", share(m.tensors_mb)}, {"estimate_mb", m.estimate_mb}});
  const StepPhases& p = r.phases_mean;
  return {{"device", r.device},
          {"dtype", enum_name(r.precision.dtype)},
          {"param_dtype", enum_name(r.precision.param_dtype)},
          {"threads", r.threads},
          {"parameters", r.parameters},
          {"steps", r.steps},
          {"warmup", r.warmup},
          {"tokens_per_step", r.tokens_per_step},
          {"tokens_per_s", r.tokens_per_s},
          {"step_ms_median", r.step_ms_median},
          {"step_ms_mean", r.step_ms_mean},
          {"step_ms_min", r.step_ms_min},
          {"cpu_ms_per_step", r.cpu_ms_per_step},
          {"flops_per_token", r.flops_per_token},
          {"gemm_peak_gflops", r.gemm_peak_gflops},
          {"mfu", r.mfu},
          {"peak_memory_mb", r.peak_memory_mb},
          {"peak_allocated_mb", share(r.peak_allocated_mb)},
          {"phases_ms",
           {{"data", p.data_s * 1e3},
            {"forward", p.forward_s * 1e3},
            {"backward", p.backward_s * 1e3},
            {"gradient_sync", p.sync_s * 1e3},
            {"optimizer", p.optimizer_s * 1e3},
            {"pipeline_wait", p.pipeline_wait_s * 1e3}}},
          {"exposed_dp_communication_ms", p.dp_wait_s * 1e3},
          {"exposed_cp_communication_ms", p.cp_wait_s * 1e3},
          {"exposed_ep_communication_ms", p.ep_wait_s * 1e3},
          {"gemm_share", share(r.gemm_share)},
          {"attention_share", share(r.attention_share)},
          {"non_matmul_share", share(r.non_matmul_share)},
          {"final_loss", r.final_loss},
          {"pipeline_idle", r.pipeline_idle},
          {"pipeline_ideal_bubble", r.pipeline_ideal_bubble},
          {"ranks", ranks}};
}

void print_text(const BenchResult& r) {
  std::printf("device         %s, %s, %ld threads, %ld parameters\n", r.device.c_str(), r.precision.label().c_str(),
              static_cast<long>(r.threads), static_cast<long>(r.parameters));
  std::printf("steps          %ld timed after %ld warm-up, %ld tokens each\n", static_cast<long>(r.steps),
              static_cast<long>(r.warmup), static_cast<long>(r.tokens_per_step));
  std::printf("throughput     %.0f tokens/s, step %.1f ms median (%.1f mean, %.1f min)\n", r.tokens_per_s,
              r.step_ms_median, r.step_ms_mean, r.step_ms_min);
  std::printf("CPU time       %.1f ms per step (all threads)\n", r.cpu_ms_per_step);
  std::printf("MFU            %.1f%% (%.4g FLOPs/token, %s matmul ceiling %.1f GFLOP/s measured%s)\n", r.mfu * 100,
              r.flops_per_token, enum_name(r.precision.dtype), r.gemm_peak_gflops, r.ranks.size() > 1 ? " on rank 0, summed over ranks" : "");
  std::printf("peak memory    %.1f MB\n", r.peak_memory_mb);
  if (r.peak_allocated_mb >= 0) std::printf("peak in tensors %.1f MB\n", r.peak_allocated_mb);
  // Each rank's peak in tensors against `loom info`'s estimate and, on the CPU, its resident set's peak above what
  // the process held before the model was built (on a GPU both peaks are the allocator's, so one is shown).
  const bool gpu = r.device.rfind("cuda", 0) == 0;
  std::printf("memory by rank (peak in tensors vs loom info's estimate%s)\n",
              gpu ? "" : "; resident peak above the process's base");
  for (const auto& m : r.ranks) {
    const std::string tensors = m.tensors_mb < 0 ? "not counted (runtime.cpu_allocator: system)"
                                                 : fmt::format("{:.1f} MB vs {:.1f} MB estimated, ratio {:.2f}",
                                                               m.tensors_mb, m.estimate_mb, m.tensors_mb / m.estimate_mb);
    const std::string resident = gpu ? "" : fmt::format(";  resident {:.1f} MB above base {:.0f} MB", m.peak_mb, m.base_mb);
    std::printf("  rank %ld (dp %ld, cp %ld, tp %ld, pp %ld)  %s%s\n", static_cast<long>(m.rank), static_cast<long>(m.dp),
                static_cast<long>(m.cp), static_cast<long>(m.tp), static_cast<long>(m.pp), tensors.c_str(), resident.c_str());
  }
  const StepPhases& p = r.phases_mean;
  const double total = p.total_s();
  const std::pair<const char*, double> phases[] = {{"data", p.data_s},         {"forward", p.forward_s},
                                                   {"backward", p.backward_s}, {"gradient sync", p.sync_s},
                                                   {"optimizer", p.optimizer_s}, {"pipeline wait", p.pipeline_wait_s}};
  std::printf("phases (mean ms per step)\n");
  for (const auto& [name, s] : phases)
    if (s > 0 || std::string(name) != "pipeline wait")  // no wait row without stages
      std::printf("  %-14s %9.2f ms  %5.1f%%\n", name, s * 1e3, total > 0 ? 100 * s / total : 0.0);
  std::printf("exposed dp communication %.2f ms per step (blocked on data-parallel collectives, within the phases above)\n",
              p.dp_wait_s * 1e3);
  std::printf("exposed cp communication %.2f ms per step (blocked on ring attention's messages, within forward and backward)\n",
                p.cp_wait_s * 1e3);
  if (p.ep_wait_s > 0)
    std::printf("exposed ep communication %.2f ms per step (blocked on the MoE layers' all-to-alls, within forward and backward)\n",
                p.ep_wait_s * 1e3);
  if (r.non_matmul_share >= 0)
    std::printf("time in        matmul %.1f%%, attention kernels %.1f%%, everything else %.1f%%\n", 100 * r.gemm_share,
                100 * r.attention_share, 100 * r.non_matmul_share);
  if (!r.pipeline_idle.empty()) {
    std::string stages;
    for (double idle : r.pipeline_idle) stages += (stages.empty() ? "" : ", ") + std::to_string(100 * idle).substr(0, 4) + "%";
    std::printf("pipeline idle  %s per stage (ideal bubble (p-1)/(m+p-1) = %.1f%%)\n", stages.c_str(),
                100 * r.pipeline_ideal_bubble);
  }
}

}  // namespace

int bench_command(const Argv& argv, const ProcessGroup& processes) {
  const auto args = parse_args(argv, {"steps", "warmup", "profile-steps"}, {"json"}, 1,
                               "loom bench CONFIG [--set key.path=value ...] [--steps N] [--warmup N] "
                               "[--profile-steps N] [--json]");
  const Config config = load_config(args.positional[0], args.sets);
  BenchOptions options;
  constexpr int64_t kMaxSteps = 100000;
  options.steps = args.int_option("steps", options.steps, 1, kMaxSteps);
  options.warmup = args.int_option("warmup", options.warmup, 0, kMaxSteps);
  options.profile_steps = args.int_option("profile-steps", options.profile_steps, 0, kMaxSteps);  // 0: no matmul share
  const BenchResult result = run_bench(config, processes, options);
  if (processes.info().rank != 0) return 0;
  if (args.flag("json")) {
    std::cout << to_json(result).dump() << std::endl;
  } else {
    print_text(result);
  }
  return 0;
}

}  // namespace loom::cli
