// How much of a stretch of CPU work is spent in matrix products and in fused attention kernels, measured
// by timing those ATen operators through RecordFunction callbacks (the hooks the PyTorch profiler uses),
// so `loom bench` can name the non-matmul share of a step. While an OpTimeCounter is alive every ATen call
// pays for a callback: `loom bench` counts extra steps with it, never the steps it times.
// The GPU runs kernels asynchronously, so the counts only mean something on the CPU.
#pragma once
#include <ATen/record_function.h>

namespace loom {

struct OpTimes {
  double gemm_s = 0;       // mm, addmm, bmm, baddbmm, ... (the innermost BLAS / oneDNN calls)
  double attention_s = 0;  // fused scaled-dot-product (or loom's blocked) attention kernels, forward and backward
};

// Counts from construction to destruction; only one may be alive at a time.
class OpTimeCounter {
 public:
  OpTimeCounter();
  ~OpTimeCounter();
  OpTimeCounter(const OpTimeCounter&) = delete;
  OpTimeCounter& operator=(const OpTimeCounter&) = delete;

  OpTimes times() const;

 private:
  at::CallbackHandle handle_;
};

}  // namespace loom
