#include "models/gelu.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <cmath>
#include <vector>

#include "core/cpu_kernels.h"
#include "models/gelu_kernels.h"

namespace loom {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int64_t kGrain = 32768;  // elements per task, as ATen's elementwise kernels

// gelu(x) and gelu'(x) in fp64 for every bf16 bit pattern (the formulas of gelu_kernels_impl.h).
struct Bf16GeluTables {
  std::vector<uint16_t> value = std::vector<uint16_t>(65536);
  std::vector<float> slope = std::vector<float>(65536);

  Bf16GeluTables() {
    const double beta = std::sqrt(2.0 / M_PI), kappa = 0.044715;
    for (uint32_t bits = 0; bits < 65536; ++bits) {
      const double x = static_cast<float>(c10::BFloat16(static_cast<uint16_t>(bits), c10::BFloat16::from_bits()));
      const double e = std::exp(-2.0 * beta * (x + kappa * x * x * x)), s = 1.0 / (1.0 + e);
      const double one_minus_s = e < 1.0 ? e * s : 1.0 - s;  // as the fp32 kernel: no inf * 0, no cancellation
      value[bits] = c10::BFloat16(static_cast<float>(x * s)).x;
      slope[bits] = static_cast<float>(s + x * s * one_minus_s * 2.0 * beta * (1.0 + 3.0 * kappa * x * x));
    }
  }
};

gelu_kernels::Bf16Tables bf16_tables() {
  static const Bf16GeluTables tables;
  return {tables.value.data(), tables.slope.data()};
}

const uint16_t* bf16_bits(const torch::Tensor& t) { return reinterpret_cast<const uint16_t*>(t.data_ptr<at::BFloat16>()); }
uint16_t* bf16_bits(torch::Tensor& t) { return reinterpret_cast<uint16_t*>(t.data_ptr<at::BFloat16>()); }

struct GeluTanh : public torch::autograd::Function<GeluTanh> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, bool portable) {
    RECORD_FUNCTION("loom::gelu_tanh", std::vector<c10::IValue>{});
    const auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    at::parallel_for(0, xc.numel(), kGrain, [&](int64_t begin, int64_t end) {
      if (xc.scalar_type() == torch::kBFloat16)
        (portable ? gelu_kernels::DEFAULT::forward_bf16 : gelu_kernels::AVX512::forward_bf16)(
            bf16_bits(xc) + begin, bf16_bits(y) + begin, end - begin, bf16_tables());
      else
        (portable ? gelu_kernels::DEFAULT::forward_float : gelu_kernels::AVX512::forward_float)(
            xc.data_ptr<float>() + begin, y.data_ptr<float>() + begin, end - begin);
    });
    ctx->save_for_backward({xc});
    ctx->saved_data["portable"] = portable;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    RECORD_FUNCTION("loom::gelu_tanh_backward", std::vector<c10::IValue>{});
    const auto x = ctx->get_saved_variables()[0];
    const bool portable = ctx->saved_data["portable"].toBool();
    const auto grad = grads[0].to(x.scalar_type()).contiguous();
    auto grad_x = torch::empty_like(x);
    at::parallel_for(0, x.numel(), kGrain, [&](int64_t begin, int64_t end) {
      if (x.scalar_type() == torch::kBFloat16)
        (portable ? gelu_kernels::DEFAULT::backward_bf16 : gelu_kernels::AVX512::backward_bf16)(
            bf16_bits(grad) + begin, bf16_bits(x) + begin, bf16_bits(grad_x) + begin, end - begin, bf16_tables());
      else
        (portable ? gelu_kernels::DEFAULT::backward_float : gelu_kernels::AVX512::backward_float)(
            grad.data_ptr<float>() + begin, x.data_ptr<float>() + begin, grad_x.data_ptr<float>() + begin, end - begin);
    });
    return {grad_x, torch::Tensor()};
  }
};

}  // namespace

torch::Tensor gelu_tanh(const torch::Tensor& x, bool force_portable) {
  const bool ours = x.device().is_cpu() && (x.scalar_type() == torch::kFloat || x.scalar_type() == torch::kBFloat16) &&
                    (force_portable || cpu_has_avx512());
  if (!ours) return torch::gelu(x, "tanh");
  return GeluTanh::apply(x, force_portable);
}

}  // namespace loom
