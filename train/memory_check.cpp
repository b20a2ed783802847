#include "train/memory_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "models/estimates.h"
#include "parallel/mesh.h"

#ifdef LOOM_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime.h>
#endif

namespace loom {
namespace {

std::string gib(int64_t bytes) { return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / (1 << 30)); }

}  // namespace

std::optional<int64_t> parse_mem_available(const std::string& meminfo) {
  std::istringstream lines(meminfo);
  for (std::string key; lines >> key;) {
    int64_t kib = 0;
    std::string unit;
    if (key == "MemAvailable:" && lines >> kib >> unit && unit == "kB") return kib * 1024;
    lines.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  return std::nullopt;
}

std::optional<int64_t> available_memory(torch::Device device, int64_t local_ranks) {
  if (device.is_cuda()) {
#ifdef LOOM_CUDA
    c10::cuda::CUDAGuard guard(device);
    size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) != cudaSuccess) return std::nullopt;
    return static_cast<int64_t>(free);
#else
    return std::nullopt;
#endif
  }
  std::ifstream in("/proc/meminfo");
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  const auto bytes = parse_mem_available(text.str());
  if (!bytes) return std::nullopt;
  return *bytes / std::max<int64_t>(1, local_ranks);
}

std::optional<std::string> memory_shortfall(const Config& config, int64_t available) {
  const MemoryEstimate memory = estimate_memory(config);
  const int64_t model = memory.weights + memory.gradients + memory.optimizer + memory.gathered;
  const auto& p = config.parallel;
  const std::string layout = MeshShape(p).describe(" x ", " ") + (p.zero >= 1 ? " with ZeRO-" + std::to_string(p.zero) : "");  // as loom info names it
  if (model > available)
    return fmt::format(
        "the model does not fit: each rank needs {} for weights, gradients and AdamW state (plus about {} of "
        "activations; `loom info` shows the estimate) at {}, but {} is available to it. Train a smaller model "
        "(model.d_model, model.n_layers), or spread it over more ranks (parallel.tp, parallel.pp, parallel.zero: 1, "
        "2 or 3 with more dp ranks)",
        gib(model), gib(memory.activations), layout, gib(available));
  if (memory.total() > available)
    return fmt::format(
        "the batch does not fit: besides the model's {}, each rank needs about {} for the activations of "
        "train.micro_batch_size={} sequences of data.seq_len={} tokens (`loom info` shows the estimate) at {}, but {} "
        "is available to it. Lower train.micro_batch_size (gradient accumulation keeps train.batch_size), set "
        "train.activation_checkpointing, or split each sequence over more ranks (parallel.cp)",
        gib(model), gib(memory.activations + memory.pipeline_sends), config.micro_batch_size(p.dp), config.data.seq_len,
        layout, gib(available));
  return std::nullopt;
}

void check_memory_fits(const Config& config, int64_t dp, torch::Device device, int64_t local_ranks) {
  const auto available = available_memory(device, local_ranks);
  if (!available) return;
  Config planned = config;
  planned.parallel.dp = dp;
  if (auto problem = memory_shortfall(planned, *available)) throw Error(*problem);
}

}  // namespace loom
