#include "models/few_rows_linear.h"

#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>

#include <atomic>

#include "core/cpu_kernels.h"
#include "models/few_rows_linear_kernels.h"

namespace loom {
namespace {

std::atomic<bool> few_rows_kernel_enabled{true};
thread_local bool in_inference_scope = false;
constexpr int64_t kRowsPerTask = 4;            // rows of W: the kernel's tile
constexpr int64_t kProductsPerTask = 1 << 16;  // multiply-adds a thread is worth starting for

bool inference_tensor(const torch::Tensor& t) {
  return !t.defined() || (t.device().is_cpu() && t.scalar_type() == torch::kFloat &&
                          !(t.requires_grad() && torch::GradMode::is_enabled()));
}

}  // namespace

InferenceScope::InferenceScope() : outer_(in_inference_scope) { in_inference_scope = true; }
InferenceScope::~InferenceScope() { in_inference_scope = outer_; }

void set_few_rows_kernel_enabled(bool enabled) { few_rows_kernel_enabled = enabled; }

bool few_rows_kernel_applies(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  if (!few_rows_kernel_enabled || !in_inference_scope) return false;
  if (!x.defined() || x.dim() == 0 || weight.dim() != 2 || !weight.is_contiguous()) return false;
  if (!inference_tensor(x) || !inference_tensor(weight) || !inference_tensor(bias)) return false;
  if (at::autocast::is_autocast_enabled(at::kCPU)) return false;  // torch::linear would compute in bf16
  const int64_t in = weight.size(1);
  if (x.size(-1) != in || in == 0 || (bias.defined() && (bias.dim() != 1 || bias.size(0) != weight.size(0))))
    return false;
  const int64_t rows = x.numel() / in;
  return rows >= 1 && rows <= kFewRows;
}

torch::Tensor linear_forward(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  if (!few_rows_kernel_applies(x, weight, bias)) return torch::linear(x, weight, bias);
  const int64_t in = weight.size(1), out = weight.size(0);
  const auto rows = x.contiguous().view({-1, in});
  auto y = torch::empty({rows.size(0), out}, x.options());
  const float* xp = rows.data_ptr<float>();
  const float* wp = weight.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const int64_t m = rows.size(0), tasks = (out + kRowsPerTask - 1) / kRowsPerTask;
  const int64_t grain = std::max<int64_t>(1, kProductsPerTask / (kRowsPerTask * in * m));
  const auto kernel = cpu_has_avx512() ? few_rows_linear_kernels::AVX512::rows : few_rows_linear_kernels::DEFAULT::rows;
  at::parallel_for(0, tasks, grain, [&](int64_t begin, int64_t end) {
    kernel(xp, m, in, wp, yp, out, begin * kRowsPerTask, std::min(out, end * kRowsPerTask));
  });
  if (bias.defined()) y.add_(bias);
  auto sizes = x.sizes().vec();
  sizes.back() = out;
  return y.view(sizes);
}

}  // namespace loom
