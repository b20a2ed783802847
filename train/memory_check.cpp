#include "train/memory_check.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/error.h"

#ifdef LOOM_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime.h>
#endif

namespace loom {

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

void check_memory_fits(const RunPlan& plan, int64_t stage, torch::Device device, int64_t local_ranks) {
  const auto available = available_memory(device, local_ranks);
  if (!available) return;
  if (auto problem = plan.memory_shortfall(stage, *available)) throw Error(*problem);
}

}  // namespace loom
