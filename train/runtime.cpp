#include "train/runtime.h"

#include <ATen/autocast_mode.h>

#include <cstdlib>
#include <thread>

#ifdef LOOM_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

#include "core/cpu_allocator.h"
#include "core/error.h"
#include "core/system.h"

namespace loom {

int64_t configure_cpu(const RuntimeConfig& runtime, int64_t local_ranks) {
  int64_t threads = runtime.threads;
  if (threads == 0) {
    // A rank that mpirun or a job's cgroup bound to some cores uses those; one that sees the whole machine
    // shares it with the node's other ranks.
    const int64_t cores = usable_cpu_cores();
    const bool bound = cores < static_cast<int64_t>(std::thread::hardware_concurrency());
    threads = std::max<int64_t>(1, bound ? cores : cores / std::max<int64_t>(1, local_ranks));
  }
  torch::set_num_threads(static_cast<int>(threads));
  use_cpu_allocator(runtime.cpu_allocator);
  return threads;
}

torch::Device runtime_device(const RuntimeConfig& runtime, int64_t local_rank) {
  if (runtime.deterministic) {
    // cuBLAS repeats its sums in the same order only with a fixed workspace, read when its first handle is made.
    setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
    at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
    at::globalContext().setDeterministicCuDNN(true);
    at::globalContext().setBenchmarkCuDNN(false);
  }
  if (runtime.device == DeviceKind::kCuda) {
    LOOM_CHECK(torch::cuda::is_available(), "runtime.device=cuda but no CUDA device is visible; use runtime.device=cpu");
    const auto gpus = static_cast<int64_t>(torch::cuda::device_count());
    const auto index = static_cast<c10::DeviceIndex>(local_rank % gpus);
#ifdef LOOM_CUDA
    // The rank's GPU is the current one: device-wide synchronisation, the current stream and the CUDA
    // context are then this GPU's, not GPU 0's.
    c10::cuda::set_device(index);
#endif
    return torch::Device(torch::kCUDA, index);
  }
  return torch::Device(torch::kCPU);
}

AutocastGuard::AutocastGuard(const PrecisionConfig& precision, torch::Device device)
    : enabled_(precision.dtype == Dtype::kBf16 || precision.dtype == Dtype::kFp16), device_type_(device.type()) {
  if (!enabled_) return;
  was_enabled_ = at::autocast::is_autocast_enabled(device_type_);
  at::autocast::set_autocast_dtype(device_type_, precision.dtype == Dtype::kFp16 ? at::kHalf : at::kBFloat16);
  at::autocast::set_autocast_enabled(device_type_, true);
}

AutocastGuard::~AutocastGuard() {
  if (!enabled_) return;
  at::autocast::set_autocast_enabled(device_type_, was_enabled_);
  at::autocast::clear_cache();
}

}  // namespace loom
