// x W^T + b, the product of every Linear in loom's models (torch::linear's), with one path of its own: inside an
// InferenceScope on the CPU in fp32, when x has at most kFewRows rows (a decode step, a speculative verification of a
// few positions, a small batch), loom's kernel (models/few_rows_linear_kernels.h) reads W once for all of x's rows.
// ATen's GEMM packs W on every call, so for a model larger than the caches a product of 5 rows cost about 2x one of
// 1 row; here it costs about what W's bytes cost to read (docs/performance.md). Anywhere else (outside inference,
// gradients wanted, autocast, bf16, more rows, another device) it is torch::linear.
#pragma once
#include <torch/torch.h>

namespace loom {

constexpr int64_t kFewRows = 8;

// The extent of loom's inference on this thread (the engine's steps, the draft model, `generate`, beam search): it
// turns gradients off, and inside it linear_forward may take the few-row kernel. Outside it never does, so training
// keeps torch::linear's sums everywhere, the no-grad first pass of activation checkpointing too, whose re-run with
// gradients must reproduce it bit for bit. Scopes nest.
class InferenceScope {
 public:
  InferenceScope();
  ~InferenceScope();
  InferenceScope(const InferenceScope&) = delete;
  InferenceScope& operator=(const InferenceScope&) = delete;

 private:
  torch::NoGradGuard no_grad_;
  bool outer_;
};

// x (..., in), weight (out, in), bias (out) or undefined -> (..., out).
torch::Tensor linear_forward(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias = {});

// Whether linear_forward(x, weight, bias) takes loom's kernel.
bool few_rows_kernel_applies(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias = {});

// For benchmarks and tests: off, linear_forward is always torch::linear (process-wide; on by default).
void set_few_rows_kernel_enabled(bool enabled);

}  // namespace loom
