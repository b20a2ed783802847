// The portable build of optim's CPU kernels (see core/cpu_kernels.h); CMakeLists.txt compiles this file with
// CPU_CAPABILITY=DEFAULT and without the precompiled header.
#include "optim/cross_entropy_rows_impl.h"
