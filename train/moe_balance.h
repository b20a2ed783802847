// The trainer's bookkeeping of the MoE layers (model.moe; models/moe.h): the aux-loss weight each
// micro-batch's forward and backward runs under, and after each step the routing statistics of every MoE
// layer of the whole model, summed over the DP ranks and gathered from every pipeline stage: the
// auxiliary-loss-free expert bias moves by them (the same global load on every rank, so replicas stay equal)
// and they become the step's metrics (metrics.jsonl's "moe": per layer max and mean tokens per expert, the
// load-balancing and z losses, dropped slots; a short summary on the progress line).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "core/config.h"
#include "models/moe.h"
#include "parallel/mesh.h"

namespace loom {

class MoeBalance {
 public:
  // model: this rank's stage (its MoE layers named "blocks.N.mlp").
  MoeBalance(const ModelConfig& config, torch::nn::Module& model);
  bool active() const { return !moe_blocks_.empty(); }

  // The factor the micro-batch's loss is scaled by in backward, for its aux losses (models/moe.h).
  void set_loss_weight(double weight);
  // The loss tokens of each micro-batch's whole sequences: `tokens` (this rank's) summed over the cp group (a
  // collective over it), else as given. Under context parallelism each rank's aux losses are its part of the
  // micro-batch's (models/moe_router.h), weighted by the whole micro-batch's share of the global batch, so
  // that the gradient sync's sum over dp x cp gives the single process's aux-loss gradient.
  std::vector<int64_t> whole_sequence_tokens(const std::vector<int64_t>& tokens, const Mesh& mesh) const;
  // After the step's backward on every rank (a collective over the world): sums the step's statistics,
  // moves the expert biases (model.moe.bias_update_rate) and keeps the metrics.
  void finish_step(const Mesh& mesh);
  // The last step's metrics: {"blocks.N": {max_load, mean_load, aux_loss, z_loss, dropped}}; and a summary,
  // "moe max/mean load 1.31 | aux 1.02 | dropped 12".
  const nlohmann::json& metrics() const { return metrics_; }
  std::string summary() const;

 private:
  ModelConfig config_;
  std::vector<int64_t> moe_blocks_;  // the whole model's MoE blocks (global indices)
  std::vector<std::pair<int64_t, MoeImpl*>> local_;  // this stage's: (index among moe_blocks_, layer)
  nlohmann::json metrics_;
  double max_over_mean_ = 0, aux_ = 0;
  int64_t dropped_ = 0;
};

}  // namespace loom
