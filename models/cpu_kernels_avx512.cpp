// The AVX-512 build of models' CPU kernels (see core/cpu_kernels.h); CMakeLists.txt compiles this file with
// ATen's AVX-512 flags and CPU_CAPABILITY=AVX512, without the precompiled header. Callers run it only on CPUs
// that have AVX-512.
#include "models/blocked_attention_rows_impl.h"
#include "models/few_rows_linear_kernels_impl.h"
#include "models/gelu_kernels_impl.h"
#include "models/norm_kernels_impl.h"
#include "models/paged_attention_rows_impl.h"
