// LayerNorm and RMSNorm on CPU through loom's row kernels (models/norm_kernels.h), for an fp32 input whose
// normalized output feeds a matrix product under bf16 autocast. ATen would write the output in fp32 and the
// product's autocast would then cast it to bf16 (and in backward cast the bf16 gradient back to fp32): here
// the kernel writes bf16 directly and takes the bf16 gradient as it is. The values are the fp32 ones rounded
// once, as the two steps give.
#pragma once
#include <torch/torch.h>

namespace loom {

// Whether fused_norm runs here: x and weight (and bias) fp32 on the CPU.
bool fused_norm_applies(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);

// x (..., C) fp32 -> (..., C) in out_dtype (float or bf16): LayerNorm with weight and bias (bias may be
// undefined), or RMSNorm (rms: no mean, bias undefined). Statistics and arithmetic in fp32; differentiable in
// x, weight and bias. `force_portable` takes the portable kernels where the AVX-512 ones would run (for tests).
torch::Tensor fused_norm(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias, double eps,
                         bool rms, c10::ScalarType out_dtype, bool force_portable = false);

}  // namespace loom
