// x W^T + b, the product of every Linear in loom's models (torch::linear's), with one path of its own: at inference
// on the CPU in fp32, when x has at most kFewRows rows (a decode step, a speculative verification of a few
// positions, a small batch), loom's kernel (models/few_rows_linear_kernels.h) reads W once for all of x's rows.
// ATen's GEMM packs W on every call, so for a model larger than the caches a product of 5 rows cost about 1.6x one of
// 1 row; here it costs what W's bytes cost to read (docs/performance.md). Anywhere else (gradients wanted, autocast,
// bf16, more rows, another device) it is torch::linear.
#pragma once
#include <torch/torch.h>

namespace loom {

constexpr int64_t kFewRows = 8;

// x (..., in), weight (out, in), bias (out) or undefined -> (..., out).
torch::Tensor linear_forward(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias = {});

// Whether linear_forward(x, weight, bias) takes loom's kernel.
bool few_rows_kernel_applies(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias = {});

// For benchmarks and tests: off, linear_forward is always torch::linear (process-wide; on by default).
void set_few_rows_kernel_enabled(bool enabled);

}  // namespace loom
