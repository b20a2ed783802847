// Checkpoints: RUN_DIR/checkpoints/<step>/ holding one shard per (tp, pp) position, or with ZeRO per rank of
// its shard group (named by mesh coordinates: weights and optimizer state by name and element range, each
// rank's own part, never gathered; RNG states, counters), the resolved config and manifest.json (step, tokens,
// layout, how each tensor-parallel parameter is split, which parameters each pipeline stage holds, size
// and CRC-32 of every file). Written under a temporary name, fsynced, then renamed: a directory named by a
// step with a manifest whose checksums match is complete, anything else is not. A checkpoint loads under
// any DP, TP and PP layout (checkpoint_reshard.h).
#pragma once
#include <torch/torch.h>

#include <filesystem>
#include <optional>

#include "core/config.h"
#include "parallel/gradient_sync.h"
#include "optim/loss_scaler.h"
#include "parallel/mesh.h"
#include "parallel/tensor_parallel_rng.h"

namespace loom {

// Counters that travel with a checkpoint.
struct TrainState {
  int64_t step = 0;    // optimizer steps taken
  int64_t tokens = 0;  // training tokens consumed
  double elapsed_s = 0;
  int64_t skipped_steps = 0;  // steps without an update (non-finite loss or gradients, fp16 overflow)
  int64_t bad_streak = 0;     // bad steps in a row up to now (train/nonfinite_guard.h)
  std::vector<int64_t> tokens_by_source = {};  // a mixture's training tokens per source (Task::source_tokens)
};

struct CheckpointParts {
  torch::nn::Module& model;
  torch::optim::AdamW* optimizer = nullptr;  // null for inference-only loads
  bool sharded_optimizer = false;            // ZeRO-1: every DP rank's optimizer state differs
  // Per optimizer tensor, the parameter elements it holds (GradientSync::optimizer_slices); empty: every
  // optimizer tensor is a whole parameter.
  std::vector<std::vector<ParameterSlice>> optimizer_slices = {};
  LossScaler* loss_scaler = nullptr;         // fp16 runs: its scale travels with the checkpoint
  TensorParallelRng* tp_rng = nullptr;       // TP runs: this rank's dropout stream ("rng.tp.<device>")
};

std::filesystem::path checkpoint_dir(const std::filesystem::path& run_dir, int64_t step);
// "shard-dp0-tp1-pp0.pt": the shard file of the rank at `coords` whose place in ZeRO's shard group is
// shard_rank (parallel/mesh.h shard_coords_name); the second form for a saved layout's (tp, pp) position.
std::string shard_file_name(int64_t shard_rank, const MeshCoords& coords);
std::string shard_file_name(int64_t shard_rank, int64_t tp, int64_t pp);

// Collective over mesh.world(): rank 0 of dp x cp of each (tp, pp) writes its shard (replicas are identical;
// with a sharded optimizer every rank of the shard group writes its own part of the weights and optimizer
// state: what parts.optimizer steps, so the fp32 master of bf16 parameters), rank 0 the config and manifest. If any rank
// fails, every rank throws and no checkpoint appears.
void save_checkpoint(const std::filesystem::path& run_dir, const Config& config, const Mesh& mesh,
                     const CheckpointParts& parts, const TrainState& state);

// Checks the manifest and every checksum; returns the reason it is not loadable, or nothing if it is.
std::optional<std::string> checkpoint_problem(const std::filesystem::path& dir);

// Steps of every checkpoint directory of the run, complete or not, in increasing order.
std::vector<int64_t> checkpoint_steps(const std::filesystem::path& run_dir);

// Newest complete checkpoint; broken ones are skipped with a warning naming the problem.
std::optional<int64_t> latest_checkpoint(const std::filesystem::path& run_dir);

// Restores the weights (and optimizer, RNG state if given) from the shards of this rank's (tp, pp) position.
// The DP size, ZeRO stage and shard size may differ from the checkpoint's: weights and optimizer state are
// stored per parameter range and re-partitioned on load. A different TP size or pipeline split reshards
// (checkpoint_reshard.h). With an optimizer the weights go into what it steps (parts.optimizer_slices: ZeRO
// shards, an fp32 master): GradientSync::gather_parameters() then makes the working weights of them. Returns
// the counters.
TrainState load_checkpoint(const std::filesystem::path& run_dir, int64_t step, const Mesh& mesh,
                           const CheckpointParts& parts, bool restore_rng = true);

// Deletes all but the newest `keep` complete checkpoints and any leftover temporary directories.
void prune_checkpoints(const std::filesystem::path& run_dir, int64_t keep);

}  // namespace loom
