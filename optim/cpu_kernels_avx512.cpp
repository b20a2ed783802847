// The AVX-512 build of optim's CPU kernels (see core/cpu_kernels.h); CMakeLists.txt compiles this file with
// ATen's AVX-512 flags and CPU_CAPABILITY=AVX512, without the precompiled header. Callers run it only on CPUs
// that have AVX-512.
#include "optim/cross_entropy_rows_impl.h"
