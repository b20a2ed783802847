#include "parallel/tensor_parallel_rng.h"

#include <ATen/Context.h>

#include <mutex>

namespace loom {
namespace {

at::Generator default_generator(torch::Device device) { return at::globalContext().defaultGenerator(device); }

std::string key(torch::Device device) { return c10::DeviceTypeName(device.type(), /*lower_case=*/true); }

}  // namespace

torch::Tensor TensorParallelRng::state(torch::Device device) {
  auto it = states_.find(key(device));
  if (it != states_.end()) return it->second;
  // The state a generator of this device type has right after manual_seed(seed_): seed the default
  // generator, read its state, then put its own back.
  auto generator = default_generator(device);
  std::lock_guard<std::mutex> lock(generator.mutex());
  const auto saved = generator.get_state();
  generator.set_current_seed(seed_);
  auto fresh = generator.get_state();
  generator.set_state(saved);
  return states_[key(device)] = fresh;
}

void TensorParallelRng::set_state(torch::Device device, const torch::Tensor& state) {
  states_[key(device)] = state.clone();
}

TensorParallelRng::Fork::Fork(TensorParallelRng& rng, torch::Device device) : rng_(rng), device_(device) {
  const auto stream = rng_.state(device_);
  auto generator = default_generator(device_);
  std::lock_guard<std::mutex> lock(generator.mutex());
  default_state_ = generator.get_state();
  generator.set_state(stream);
}

TensorParallelRng::Fork::~Fork() {
  auto generator = default_generator(device_);
  std::lock_guard<std::mutex> lock(generator.mutex());
  rng_.states_[key(device_)] = generator.get_state();
  generator.set_state(default_state_);
}

}  // namespace loom
