// The portable build of the fused rows of blocked attention (see models/blocked_attention_rows.h);
// CMakeLists.txt compiles this file with CPU_CAPABILITY=DEFAULT and without the precompiled header.
#include "models/blocked_attention_rows_impl.h"
