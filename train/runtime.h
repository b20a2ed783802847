// Process set-up shared by every command that runs a model: thread count, CPU allocator, device, autocast.
#pragma once
#include <torch/torch.h>

#include "core/config.h"

namespace loom {

// Threads for this rank (runtime.threads, or the cores divided among the ranks on this node) and the
// allocator of CPU tensors (runtime.cpu_allocator). Returns the thread count.
int64_t configure_cpu(const RuntimeConfig& runtime, int64_t local_ranks = 1);

// runtime.device; for cuda, the GPU of this rank's place on its node (local rank modulo the GPUs), made the
// current one. Turns on deterministic kernels for runtime.deterministic.
torch::Device runtime_device(const RuntimeConfig& runtime, int64_t local_rank = 0);

// Enables autocast for precision.dtype bf16 or fp16 while alive (fp32 master weights stay untouched).
class AutocastGuard {
 public:
  AutocastGuard(const PrecisionConfig& precision, torch::Device device);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool enabled_ = false;
  at::DeviceType device_type_;
  bool was_enabled_ = false;
};

}  // namespace loom
