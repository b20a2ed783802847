#include "train/runtime.h"

#include <ATen/autocast_mode.h>

#include <thread>

#include "core/cpu_allocator.h"
#include "core/error.h"

namespace loom {

int64_t configure_cpu(const RuntimeConfig& runtime, int64_t local_ranks) {
  int64_t threads = runtime.threads;
  if (threads == 0) threads = std::max<int64_t>(1, std::thread::hardware_concurrency() / std::max<int64_t>(1, local_ranks));
  torch::set_num_threads(static_cast<int>(threads));
  use_cpu_allocator(runtime.cpu_allocator);
  return threads;
}

torch::Device runtime_device(const RuntimeConfig& runtime, int64_t local_rank) {
  if (runtime.device == "cuda") {
    LOOM_CHECK(torch::cuda::is_available(), "runtime.device=cuda but no CUDA device is visible; use runtime.device=cpu");
    const auto gpus = static_cast<int64_t>(torch::cuda::device_count());
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank % gpus));
  }
  return torch::Device(torch::kCPU);
}

AutocastGuard::AutocastGuard(const PrecisionConfig& precision, torch::Device device)
    : enabled_(precision.dtype == "bf16" || precision.dtype == "fp16"), device_type_(device.type()) {
  if (!enabled_) return;
  was_enabled_ = at::autocast::is_autocast_enabled(device_type_);
  at::autocast::set_autocast_dtype(device_type_, precision.dtype == "fp16" ? at::kHalf : at::kBFloat16);
  at::autocast::set_autocast_enabled(device_type_, true);
}

AutocastGuard::~AutocastGuard() {
  if (!enabled_) return;
  at::autocast::set_autocast_enabled(device_type_, was_enabled_);
  at::autocast::clear_cache();
}

}  // namespace loom
