#include "models/norm.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include "core/cpu_kernels.h"
#include "core/error.h"
#include "models/norm_kernels.h"

namespace loom {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

int64_t row_grain(int64_t C) { return std::max<int64_t>(1, 32768 / C); }  // rows per task: ~128 KB of input

const float* data_or_null(const torch::Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; }

struct FusedNorm : public torch::autograd::Function<FusedNorm> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               const torch::Tensor& bias, double eps, bool rms, c10::ScalarType out_dtype,
                               bool portable) {
    RECORD_FUNCTION("loom::norm_forward", std::vector<c10::IValue>{});
    const int64_t C = x.size(-1), N = x.numel() / C;
    const auto x2 = x.reshape({N, C}).contiguous();
    const auto w = weight.contiguous(), b = bias.numel() > 0 ? bias.contiguous() : torch::Tensor();
    auto y = torch::empty({N, C}, x.options().dtype(out_dtype));
    auto mean = torch::empty({N}, x.options()), rstd = torch::empty({N}, x.options());
    const norm_kernels::Rows shape{0, 0, C, static_cast<float>(eps), rms, out_dtype == torch::kBFloat16};
    at::parallel_for(0, N, row_grain(C), [&](int64_t begin, int64_t end) {
      norm_kernels::Rows part = shape;
      part.begin = begin;
      part.end = end;
      (portable ? norm_kernels::DEFAULT::forward_rows : norm_kernels::AVX512::forward_rows)(
          part, x2.data_ptr<float>(), w.data_ptr<float>(), data_or_null(b), y.data_ptr(), mean.data_ptr<float>(),
          rstd.data_ptr<float>());
    });
    ctx->save_for_backward({x2, w, mean, rstd});
    ctx->saved_data["shape"] = x.sizes().vec();
    ctx->saved_data["rms"] = rms;
    ctx->saved_data["bias"] = b.defined();
    ctx->saved_data["portable"] = portable;
    return y.view(x.sizes());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    RECORD_FUNCTION("loom::norm_backward", std::vector<c10::IValue>{});
    const auto saved = ctx->get_saved_variables();
    const auto &x2 = saved[0], &w = saved[1], &mean = saved[2], &rstd = saved[3];
    const bool rms = ctx->saved_data["rms"].toBool(), with_bias = ctx->saved_data["bias"].toBool();
    const bool portable = ctx->saved_data["portable"].toBool();
    const int64_t N = x2.size(0), C = x2.size(1);
    // dy in the output's dtype (autograd hands it so); float or bf16 are what the kernels read.
    auto dy = grads[0].reshape({N, C});
    if (dy.scalar_type() != torch::kBFloat16) dy = dy.to(torch::kFloat);
    dy = dy.contiguous();
    auto dx = torch::empty_like(x2);
    // dw and db sum over rows: one partial sum per thread, added in thread order (deterministic for a thread count).
    const int64_t threads = at::get_num_threads();
    auto dw = torch::zeros({threads, C}, x2.options());
    auto db = with_bias ? torch::zeros({threads, C}, x2.options()) : torch::Tensor();
    const norm_kernels::Rows shape{0, 0, C, 0.0f, rms, dy.scalar_type() == torch::kBFloat16};
    at::parallel_for(0, N, row_grain(C), [&](int64_t begin, int64_t end) {
      norm_kernels::Rows part = shape;
      part.begin = begin;
      part.end = end;
      const int64_t t = at::get_thread_num();
      (portable ? norm_kernels::DEFAULT::backward_rows : norm_kernels::AVX512::backward_rows)(
          part, dy.data_ptr(), x2.data_ptr<float>(), w.data_ptr<float>(), mean.data_ptr<float>(),
          rstd.data_ptr<float>(), dx.data_ptr<float>(), dw[t].data_ptr<float>(),
          with_bias ? db[t].data_ptr<float>() : nullptr);
    });
    const auto shape_x = ctx->saved_data["shape"].toIntVector();
    return {dx.view(shape_x), dw.sum(0), with_bias ? db.sum(0) : torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

bool fused_norm_applies(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  auto fp32_cpu = [](const torch::Tensor& t) { return t.device().is_cpu() && t.scalar_type() == torch::kFloat; };
  return fp32_cpu(x) && fp32_cpu(weight) && (!bias.defined() || fp32_cpu(bias)) && x.dim() >= 1 &&
         x.size(-1) == weight.numel();
}

torch::Tensor fused_norm(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias, double eps,
                         bool rms, c10::ScalarType out_dtype, bool force_portable) {
  LOOM_CHECK(fused_norm_applies(x, weight, bias), "fused_norm takes fp32 CPU x (..., C), weight (C) and bias (C)");
  LOOM_CHECK(!rms || !bias.defined(), "fused_norm: RMSNorm has no bias");
  LOOM_CHECK(out_dtype == torch::kFloat || out_dtype == torch::kBFloat16, "fused_norm writes float or bf16");
  // An undefined tensor cannot be a custom Function's input: no bias goes in as an empty one.
  const auto bias_or_empty = bias.defined() ? bias : torch::empty({0}, weight.options());
  return FusedNorm::apply(x, weight, bias_or_empty, eps, rms, out_dtype, force_portable || !cpu_has_avx512());
}

}  // namespace loom
