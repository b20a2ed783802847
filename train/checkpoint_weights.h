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

// Fills the elements `layout` holds from the weights of the shard files of one (tp, pp) position, handed
// in one by one (each loaded once by the caller, who reads the optimizer state from it too): add() keeps
// each stored piece's overlap with the layout's slices, finish() checks that every element was found and
// only then writes them. Throws loom::Error naming the tensor when an element is in none of the files or a
// stored piece does not fit the model.
class WeightReader {
 public:
  // A stored piece: elements [offset, + value.numel()) of the flattened tensor `name` of shape `shape`.
  struct Piece {
    std::string name;
    int64_t offset = 0;
    std::vector<int64_t> shape;
    torch::Tensor value;  // flat
  };

  explicit WeightReader(const WeightLayout& layout);  // `layout` must outlive the reader
  void add(torch::serialize::InputArchive& shard, const std::string& source);
  void add(const Piece& piece, const std::string& source);
  void finish(const std::string& source);

 private:
  const WeightLayout& layout_;
  std::map<std::string, bool> names_;                                      // name -> whether a buffer
  std::map<std::string, std::vector<std::pair<size_t, size_t>>> by_name_;  // (tensor, slice) of each name
  std::vector<torch::Tensor> covered_;                                     // per tensor
  std::vector<std::pair<torch::Tensor, torch::Tensor>> copies_;            // (target view, stored values)
  bool saw_whole_model_ = false;  // a format-2 file: the rest hold the same
};

// Resharding: the whole stored tensors of `names` (name -> whether a buffer) that `files` hold, by name.
std::map<std::string, torch::Tensor> read_whole_weights(const std::vector<std::filesystem::path>& files,
                                                        const std::map<std::string, bool>& names);

// Fills `layout` from whole values by name (what read_whole_weights gives, resharded). Throws as
// WeightReader does.
void install_whole_weights(const std::map<std::string, torch::Tensor>& values, const WeightLayout& layout,
                           const std::string& source);

}  // namespace loom
