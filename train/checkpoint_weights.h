// A checkpoint's weights, stored like its optimizer state (train/optimizer_state.h) by name and element
// range: each writing rank stores the values of the tensors its optimizer steps (the fp32 parameters, their
// fp32 master under bf16 parameters, or its ZeRO shard of them), so no rank gathers the whole model to save
// it, and a load copies into its own tensors the elements they hold from whichever files hold them.
// Buffers, and parameters no optimizer tensor holds, are stored whole. Format 2 checkpoints kept the whole
// model (LibTorch's archive by module) in every shard file: they are read here too.
#pragma once
#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "train/optimizer_state.h"

namespace loom {

// Elements [parameter_offset, + length) of the flattened tensor `name` (a parameter or buffer, of shape
// `shape`), held from `offset` of a layout tensor.
struct NamedSlice {
  std::string name;
  std::vector<int64_t> shape;
  bool is_buffer = false;
  int64_t parameter_offset = 0;
  int64_t offset = 0;
  int64_t length = 0;
};

// The tensors whose values a checkpoint stores or receives, each with the elements of the model it holds.
struct WeightLayout {
  std::vector<torch::Tensor> tensors;
  std::vector<std::vector<NamedSlice>> slices;  // per tensor
};

// The optimizer's tensors (null: none, every parameter whole), then every parameter they do not hold and
// every buffer, whole.
WeightLayout weight_layout(torch::nn::Module& model, const OptimizerLayout* optimizer);

void write_weights(torch::serialize::OutputArchive& shard, const WeightLayout& layout);

// Fills the elements `layout` holds from the weights stored in `files` (the shard files of one (tp, pp)
// position). Throws loom::Error naming the tensor when an element is in none of them or a stored piece does
// not fit the model; nothing is written then.
void read_weights(const std::vector<std::filesystem::path>& files, const WeightLayout& layout);

// Resharding: the whole stored tensors of `names` (name -> whether a buffer) that `files` hold, by name.
std::map<std::string, torch::Tensor> read_whole_weights(const std::vector<std::filesystem::path>& files,
                                                        const std::map<std::string, bool>& names);

// Fills `layout` from whole values by name (what read_whole_weights gives, resharded). Throws as read_weights.
void install_whole_weights(const std::map<std::string, torch::Tensor>& values, const WeightLayout& layout,
                           const std::string& source);

}  // namespace loom
