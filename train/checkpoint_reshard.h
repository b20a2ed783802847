// Loading a checkpoint written with another tensor-parallel size: every old TP shard of this rank's
// pipeline stage is read, each split parameter (and its AdamW moments) is joined along the layout the
// manifest records (parallel/tensor_parallel.h's ShardLayout) and cut again for this rank; replicated
// tensors come from the first shard. So tp2 resumes as tp1 (or generates from one process) and tp1 as tp2.
// Pipeline resharding is not here.
#pragma once
#include <torch/torch.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "parallel/mesh.h"
#include "train/checkpoint_weights.h"
#include "train/optimizer_state.h"

namespace loom {

// The shard files of each (tp, pp) position in a checkpoint of this manifest layout: the first replica's
// alone without ZeRO; with it one per rank of its shard group (cp x shard_size, shard_size the whole dp in
// a layout that does not name it), each holding a part of the optimizer state.
int64_t saved_shard_files(const nlohmann::json& layout);

// dir: the checkpoint directory; manifest: its parsed manifest.json (layout, tensor_parallel, pipeline).
// Fills `weights` (the model's tensors or what its optimizer steps) and, if given, the optimizer tensors
// of `optimizer` (whole parameters or ZeRO shards) with this rank's share. Each old TP rank's stage is
// read whole (its pieces joined from every file of the saved shard group).
void load_resharded(const std::filesystem::path& dir, const nlohmann::json& manifest, const Mesh& mesh,
                    torch::nn::Module& model, const WeightLayout& weights, const OptimizerLayout* optimizer);

}  // namespace loom
