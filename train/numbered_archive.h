// A list inside a LibTorch archive, as checkpoints store pieces of tensors by element range (the weights,
// train/checkpoint_weights.h; AdamW state, train/optimizer_state.h): sub-archives "<prefix>0", "<prefix>1",
// ... and their count under `count_key`.
#pragma once
#include <torch/torch.h>

#include <string>

namespace loom {

// Calls visit(element) for each sub-archive of the list, in order.
template <typename Visit>
void for_each_numbered(torch::serialize::InputArchive& archive, const std::string& count_key, const std::string& prefix,
                       Visit&& visit) {
  c10::IValue count;
  archive.read(count_key, count);
  for (int64_t k = 0; k < count.toInt(); ++k) {
    torch::serialize::InputArchive element;
    archive.read(prefix + std::to_string(k), element);
    visit(element);
  }
}

}  // namespace loom
