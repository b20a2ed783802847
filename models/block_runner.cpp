#include "models/block_runner.h"

namespace loom {

torch::Tensor BlockRunner::block(size_t i, const torch::Tensor& x, KVCache* cache, const BlockInputs& inputs) {
  return run_unit(parallelism_.units, i + 1,
                  [&] { return blocks_.at(i)->forward(x, cache, inputs, parallelism_.checkpointing); });
}

void BlockRunner::keep_ends() {
  if (parallelism_.units != nullptr) parallelism_.units->before_forward(0);
}

}  // namespace loom
