// The portable build of models' CPU kernels (see core/cpu_kernels.h); CMakeLists.txt compiles this file with
// CPU_CAPABILITY=DEFAULT and without the precompiled header.
#include "models/blocked_attention_rows_impl.h"
#include "models/few_rows_linear_kernels_impl.h"
#include "models/gelu_kernels_impl.h"
#include "models/norm_kernels_impl.h"
#include "models/paged_attention_rows_impl.h"
