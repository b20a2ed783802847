// loom's hand-written CPU kernels (models/: the fused rows of blocked attention, the tanh GELU, LayerNorm / RMSNorm
// rows; optim/: the rows of the fused head's cross-entropy) are built twice per library, the way ATen builds its own:
// DIR/cpu_kernels_default.cpp (portable) and DIR/cpu_kernels_avx512.cpp (AVX-512 flags and ATen's
// CPU_CAPABILITY=AVX512; see loom_cpu_kernels in CMakeLists.txt) each include the kernels' *_impl.h bodies, which
// land in the namespaces ...::DEFAULT and ...::AVX512. The callers pick a build at run time with cpu_has_avx512()
// and split rows over threads with at::parallel_for, which runs in parallel only because loom compiles with
// OpenMP (cmake/dependencies.cmake).
#pragma once

#include <ATen/Version.h>

namespace loom {

// Whether loom's AVX-512 build runs: the CPU has the instructions it is compiled for, and ATen runs its own AVX-512
// kernels. The second half is ATen's rule: ATEN_CPU_CAPABILITY=avx2 or =default lowers ATen's choice, and loom's
// kernels follow, so that a run restricted that way (scripts/test_isa.sh) takes the path of a CPU without AVX-512.
inline bool cpu_has_avx512() {
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                          at::get_cpu_capability() == "AVX512";
  return yes;
}

}  // namespace loom
