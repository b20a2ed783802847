// The AVX-512 build of the fused rows of blocked attention (see models/blocked_attention_rows.h);
// CMakeLists.txt compiles this file with ATen's AVX-512 flags and CPU_CAPABILITY=AVX512, without the
// precompiled header. blocked_attention.cpp calls it only on CPUs that have AVX-512.
#include "models/blocked_attention_rows_impl.h"
