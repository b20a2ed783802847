// GPT-2's GELU, the tanh approximation: gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), equal to
// torch::gelu(x, "tanh"). On an AVX-512 CPU, for float and bf16, it runs loom's own kernels
// (models/gelu_kernels.h): ATen's tanh GELU spends most of its time in a full-precision tanh (measured on this
// CPU, 2 threads, 2048 x 2048 bf16: forward 5.5 ms, backward 4.6 ms, against 1.0 / 2.1 ms for the exact erf
// GELU). Elsewhere (CUDA, fp16, CPUs without AVX-512) it is torch::gelu.
#pragma once
#include <torch/torch.h>

namespace loom {

// Differentiable in x. `force_portable` runs the portable kernel build even where the AVX-512 one would run,
// and on any CPU (for tests).
torch::Tensor gelu_tanh(const torch::Tensor& x, bool force_portable = false);

}  // namespace loom
