// The tanh GELU's elementwise kernels (models/gelu.h) over contiguous arrays of n elements.
// fp32 is computed: gelu(x) = x * sigmoid(2u), one exp per element (gelu_kernels_impl.h has the algebra).
// bf16 has only 65536 inputs, so it is looked up: gelu.cpp computes gelu(x) (rounded to bf16) and gelu'(x) (in
// fp32) in fp64 once for every bf16 bit pattern, and the kernels index those tables with x's bits. The values
// are then the exact ones rounded once, and a step costs a load where ATen's bf16 GELU computes a tanh.
// gelu_kernels_impl.h is compiled twice, into the namespaces DEFAULT and AVX512 (core/cpu_kernels.h); gelu.cpp
// picks one at run time. Only these plain declarations cross between the two. bf16 arrays are their bits.
#pragma once
#include <cstdint>

namespace loom::gelu_kernels {

struct Bf16Tables {
  const uint16_t* value;  // [bits of x] -> bits of gelu(x) in bf16
  const float* slope;     // [bits of x] -> gelu'(x) in fp32
};

// forward_*: y = gelu(x). backward_*: grad_x = grad * gelu'(x).
namespace DEFAULT {
void forward_float(const float* x, float* y, int64_t n);
void backward_float(const float* grad, const float* x, float* grad_x, int64_t n);
void forward_bf16(const uint16_t* x, uint16_t* y, int64_t n, const Bf16Tables& tables);
void backward_bf16(const uint16_t* grad, const uint16_t* x, uint16_t* grad_x, int64_t n, const Bf16Tables& tables);
}  // namespace DEFAULT
namespace AVX512 {
void forward_float(const float* x, float* y, int64_t n);
void backward_float(const float* grad, const float* x, float* grad_x, int64_t n);
void forward_bf16(const uint16_t* x, uint16_t* y, int64_t n, const Bf16Tables& tables);
void backward_bf16(const uint16_t* grad, const uint16_t* x, uint16_t* grad_x, int64_t n, const Bf16Tables& tables);
}  // namespace AVX512

}  // namespace loom::gelu_kernels
