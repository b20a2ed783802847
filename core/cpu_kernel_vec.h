// Helpers for loom's CPU kernel bodies (the *_impl.h files, core/cpu_kernels.h): ATen's float vectors with
// partial loads and stores for the end of a row. Include it only from those bodies: it must be compiled for the
// including file's CPU_CAPABILITY.
#pragma once
#include <ATen/cpu/vec/vec.h>

#include <cstdint>

namespace loom::CPU_CAPABILITY {

using FloatVec = at::vec::Vectorized<float>;
constexpr int64_t kFloatLanes = FloatVec::size();

// Loads n <= kFloatLanes floats; the lanes past n are 0.
inline FloatVec load_floats(const float* p, int64_t n) {
  return n == kFloatLanes ? FloatVec::loadu(p) : FloatVec::loadu(p, n);
}
inline void store_floats(const FloatVec& v, float* p, int64_t n) { n == kFloatLanes ? v.store(p) : v.store(p, n); }

// The lanes' sum and maximum.
inline float lane_sum(const FloatVec& v) {
  float lanes[kFloatLanes];
  v.store(lanes);
  float sum = 0.0f;
  for (float x : lanes) sum += x;
  return sum;
}
inline float lane_max(const FloatVec& v) {
  float lanes[kFloatLanes];
  v.store(lanes);
  float m = lanes[0];
  for (float x : lanes) m = x > m ? x : m;
  return m;
}

}  // namespace loom::CPU_CAPABILITY
