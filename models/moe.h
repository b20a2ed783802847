// The Mixture-of-Experts MLP (model.moe.*), the part a GPT block holds in place of its Mlp in the MoE layers
// (models/block.h; which layers: MoeConfig::layer_is_moe). Each token's router logits pick its top-k experts
// (models/moe_router.h), the experts' outputs are summed with the router's weights, plus an optional shared
// MLP every token passes through (scaled by sigmoid(x . w) with model.moe.shared_gate, as Qwen2-MoE).
//
// Parameters, under the block's "mlp.": router.weight (E, C); experts.gate / experts.up (E, F, C) (gate only
// for gated activations) and experts.down (E, C, F): every expert's matrices stacked along a first expert
// axis, so an expert-parallel rank keeps a slice of experts of each and "experts." names every expert
// parameter (a second parameter group for the gradient sync); shared.{gate,up,down} (an Mlp), shared_gate
// (1, C). Experts, router and shared MLP have no biases. The expert bias of model.moe.bias_update_rate is a
// buffer, expert_bias (E), used for selection only and saved in checkpoints.
//
// Expert parallelism (parallel.ep, keep_local_experts): each rank keeps E / ep rows of the stacked experts and
// the sorted slots go to their experts' ranks and back by all-to-all (models/moe_dispatch.h). The shared MLP
// runs while the rows are in flight: its first half of the tokens during the dispatch, the second during the
// combine (forward; backward overlaps the reverse exchanges with those halves' backward the same way).
// Under activation checkpointing (models/recompute.h) the first run keeps the exchanges' results (and the
// CP load's all-reduce) in the recompute's stash, and the re-run in backward takes them from there: it
// routes and runs the experts again but communicates nothing (2 x slots x C per layer kept meanwhile).
// The experts run grouped: the (token, expert) slots are sorted by expert, each expert's rows gathered into
// one contiguous block and multiplied by its matrices as one GEMM per expert, then scattered back with their
// weights (index_add); backward is autograd's through the same ops. Dropless unless model.moe.capacity_factor
// drops overflow slots.
//
// Training (not evaluation) adds the load-balancing and z losses without changing what forward returns: an
// identity function on the output whose backward adds aux_weight x the losses' gradient (Megatron's
// MoEAuxLossAutoScaler), so the gradient reaches the router from any pipeline stage. aux_weight is the
// factor the trainer scales the micro-batch's loss by (set_moe_aux_loss_weight) so the aux losses are weighted
// as the micro-batch's mean loss is. Each training forward also counts the step's statistics (MoeStepStats),
// once per micro-batch (a recomputed forward does not count again).
#pragma once
#include <torch/torch.h>

#include "core/config.h"
#include "models/mlp.h"
#include "models/moe_dispatch.h"
#include "parallel/communicator.h"

#include <map>
#include <string>

namespace loom {

struct MoeOptions {
  int64_t d_model = 0;
  int64_t num_experts = 0;
  int64_t top_k = 2;
  int64_t d_ff = 0;         // each expert's
  int64_t shared_d_ff = 0;  // 0: no shared MLP
  bool shared_gate = true;
  Activation activation = Activation::kSwiglu;
  MoeRouter router = MoeRouter::kTopkSoftmax;
  bool normalize = false;
  double aux_loss_coef = 0.0;
  double z_loss_coef = 0.0;
  bool expert_bias = false;  // model.moe.bias_update_rate > 0
  double capacity_factor = 0.0;
  double init_std = 0.02;
  double out_init_std = 0.02;
  // Context parallelism (the cp group; null: whole sequences): the ranks holding the other tokens of this
  // rank's sequences. The routing statistics spanning a micro-batch (each expert's load and the token count
  // in the aux losses) are summed over it, so each rank's aux losses are its part of the whole sequences'
  // (models/moe_router.h) and the gradient sync adds the parts; capacity serves the whole sequences' slots in
  // token order (capacity_keep_over_sequences), as one process does.
  Communicator* token_group = nullptr;
  // Sequence parallelism (the tp group; null: none): the layer gathers the sequence (replicate_sequence),
  // runs its replicated router and experts on the whole of it as under TP alone, and keeps its positions.
  Communicator* sequence_group = nullptr;
};
MoeOptions moe_options(const ModelConfig& config);

// The stacked experts: x (N, C), each token's experts and weights (N, k), keep (N, k) bool or undefined (all)
// -> (N, C) = sum over kept slots of weight * expert(x).
class MoeExpertsImpl : public torch::nn::Module {
 public:
  MoeExpertsImpl(int64_t num_experts, int64_t d_model, int64_t d_ff, Activation activation, double init_std,
                 double out_init_std);
  // Under ep, `overlap` runs while the dispatch's (phase 0) and the combine's (phase 1) rows are in flight and
  // `replay` records or replays the exchanges (models/moe_dispatch.h); without ep neither is used.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& experts, const torch::Tensor& weights,
                        const torch::Tensor& keep = {}, const WhileExchanging& overlap = {},
                        DispatchReplay* replay = nullptr);
  bool exchanges() const { return ep_ != nullptr; }  // expert parallelism over more than one rank
  // Expert e (of those this rank holds: local index) on rows x (n, C) -> (n, C).
  torch::Tensor expert(int64_t e, const torch::Tensor& x);

  // Expert parallelism: keeps only this rank's experts of the group's split (rows [rank * E / ep, + E / ep) of
  // every stacked tensor; the rest is freed) and dispatches the slots to their owners in forward.
  void keep_local_experts(Communicator& ep);
  int64_t first_expert() const { return first_expert_; }
  int64_t num_experts() const { return num_experts_; }  // all of the layer's, on every rank

  torch::Tensor gate, up, down;  // (E, F, C) (gated only), (E, F, C), (E, C, F); under ep E / ep rows

 private:
  // Rows sorted by expert, counts[e] of local expert e -> each row through its expert.
  torch::Tensor grouped(const torch::Tensor& rows, const std::vector<int64_t>& counts);
  Communicator* ep_ = nullptr;
  int64_t first_expert_ = 0, num_experts_ = 0;
  // An expert's MLP given its matrices (g undefined: not gated).
  torch::Tensor expert_of(const torch::Tensor& g, const torch::Tensor& u, const torch::Tensor& d,
                          const torch::Tensor& x) const;
  Activation activation_;
};
TORCH_MODULE(MoeExperts);

// What one MoE layer saw over a step's micro-batches on this rank (training forwards only).
struct MoeStepStats {
  torch::Tensor load;      // (E) double: routed slots per expert (before capacity dropping)
  double aux_loss = 0.0;   // sum over micro-batches of the load-balancing loss (unscaled by its coef)
  double z_loss = 0.0;     // sum over micro-batches of the router z-loss
  int64_t dropped = 0;     // slots dropped by the capacity
  int64_t micro_batches = 0;
};

class MoeImpl : public torch::nn::Module {
 public:
  explicit MoeImpl(const MoeOptions& options);
  torch::Tensor forward(const torch::Tensor& x);  // (..., C) -> (..., C)

  const MoeOptions& options() const { return options_; }
  void set_aux_loss_weight(double weight) { aux_loss_weight_ = weight; }
  // The step's statistics so far, and a fresh start for the next step.
  MoeStepStats take_stats();
  torch::Tensor expert_bias() const { return expert_bias_; }  // (E) fp32, or undefined
  MoeExperts& experts() { return experts_; }

 private:
  torch::Tensor routed(const torch::Tensor& x);  // forward on the tokens this rank routes
  torch::Tensor shared_expert(const torch::Tensor& x);  // the shared MLP, gated
  // Context parallelism: this rank's tokens are part of sequences other ranks hold the rest of.
  bool splits_sequences() const { return options_.token_group != nullptr && options_.token_group->size() > 1; }

  MoeOptions options_;
  torch::nn::Linear router_{nullptr};
  MoeExperts experts_{nullptr};
  Mlp shared_{nullptr};
  torch::Tensor shared_gate_;  // (1, C)
  torch::Tensor expert_bias_;
  double aux_loss_weight_ = 1.0;
  // The step's sums so far, on the layer's device (read once, by take_stats: no device wait per micro-batch):
  // load (E) and (aux loss, z loss, dropped slots), double.
  torch::Tensor load_sum_, scalar_sums_;
  int64_t micro_batches_ = 0;
};
TORCH_MODULE(Moe);

// Whether a parameter (by its name in the model) is an expert's: the expert parameter group of the gradient
// sync (averaged over the expert-data-parallel ranks under ep).
bool is_expert_parameter(const std::string& name);
// Expert parallelism: every MoE layer of `model` keeps only its share of the experts of the group (parallel.ep).
void keep_local_experts(torch::nn::Module& model, Communicator& ep);
// Where an expert-parallel rank's stacked expert tensor lies in the whole one (E, ...) every checkpoint names:
// the whole shape and the element offset of the local rows.
struct ExpertPlacement {
  std::vector<int64_t> shape;
  int64_t offset = 0;
};
std::map<const void*, ExpertPlacement> expert_placements(torch::nn::Module& model);  // by TensorImpl

// Every MoE layer of a model, in module order.
std::vector<MoeImpl*> moe_layers(torch::nn::Module& model);
// Sets each MoE layer's aux-loss weight (the trainer: the factor of the micro-batch's loss, before its
// forward and its backward).
void set_moe_aux_loss_weight(torch::nn::Module& model, double weight);
// Whether a checkpointed MoE layer's re-run replays its first run's exchanges (true, the default) or
// exchanges again: tests turn it off to see the second dispatch counted.
void set_moe_recompute_replay(bool replay);
// Whether the shared expert runs while the exchanges are in flight (true, the default) or after them, as
// before the overlap: the benchmark of tests/unit/test_all_to_all.cpp ([.moe-ep-bench]) compares the two.
void set_moe_shared_overlap(bool overlap);

}  // namespace loom
