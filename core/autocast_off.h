// AutocastOff: autocast off for one device type within a scope, restored on exit. For the functions that cast
// for themselves (the fused head + loss: products in the autocast dtype, softmax in fp32; ring attention:
// everything in fp32), where autocast must not re-cast the products inside them.
#pragma once
#include <ATen/autocast_mode.h>

namespace loom {

class AutocastOff {
 public:
  explicit AutocastOff(c10::DeviceType type) : type_(type), was_(at::autocast::is_autocast_enabled(type)) {
    at::autocast::set_autocast_enabled(type_, false);
  }
  ~AutocastOff() { at::autocast::set_autocast_enabled(type_, was_); }
  AutocastOff(const AutocastOff&) = delete;
  AutocastOff& operator=(const AutocastOff&) = delete;

 private:
  c10::DeviceType type_;
  bool was_;
};

}  // namespace loom
