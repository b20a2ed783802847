// What every model family shares about being built as one pipeline stage of a (tensor-parallel) model:
//   ModelStage     which blocks (over ModelConfig::pipeline_layers()) and which ends a stage holds;
//   StageBuilder   builds every part of the whole model, in the whole model's order (so every rank draws
//                  the single-process model's initial weights from the RNG), and registers only the parts
//                  this stage holds; blocks keep their global names ("blocks.5" on the second stage too),
//                  so checkpoints name parameters alike under every layout;
//   VocabularyEnds the token embedding (first stage) and the LM head (last stage): the head's own matrix,
//                  or with model.tie_embeddings the embedding itself, of which a last stage that is not also
//                  the first keeps its own copy (stage_tied_embedding), kept equal by summing the two
//                  stages' gradients (train/pipeline_runner.h).
//   ends_and_block_units  a stage's ZeRO-3 units (parallel/parameter_units.h): its ends, then its blocks.
//   StagedModel    the base of every family's model: what the Trainer, the pipeline runner and the gradient
//                  sync ask of a stage, whatever its family, and the BlockRunner (models/block_runner.h) its
//                  blocks run through under the parallelism the Trainer applies (ZeRO-3, recompute).
// A family's constructor is then its own parts in order between these (models/gpt.cpp, encoder_decoder.cpp).
#pragma once
#include <torch/torch.h>

#include <string>
#include <vector>

#include "core/config.h"
#include "models/block_runner.h"
#include "models/parallel_linear.h"
#include "models/vocab_parallel_embedding.h"
#include "parallel/communicator.h"

namespace loom {

// The part of the model a pipeline stage holds; the default is the whole model. Blocks count over
// ModelConfig::pipeline_layers(): the GPT's blocks, or the encoder-decoder's encoder blocks then its
// decoder blocks.
struct ModelStage {
  int64_t first_block = 0;
  int64_t end_block = -1;  // -1: model.pipeline_layers()
  bool first = true;       // embeds the tokens
  bool last = true;        // final norm, head (and the loss)
  bool whole() const { return first && last; }
};
// Stage `stage` of the parallel.pp stages (parallel.pp_layers, or balanced).
ModelStage model_stage(const ModelConfig& model, const ParallelConfig& parallel, int64_t stage);

class StageBuilder {
 public:
  // Resolves stage.end_block = -1 to `layers` (the family's pipeline_layers()) and checks the range;
  // `layers_key` names what `layers` counts in the message ("model.n_layers").
  StageBuilder(torch::nn::Module& model, ModelStage& stage, int64_t layers, const char* layers_key);

  const ModelStage& stage() const { return stage_; }
  bool holds_block(int64_t block) const { return stage_.first_block <= block && block < stage_.end_block; }

  // `part` (already built: its draws made) registered under `name` when `kept`; an empty holder otherwise,
  // the caller's handle then being the part's last.
  template <class Holder>
  Holder keep(const std::string& name, Holder part, bool kept) {
    if (!kept) return Holder(nullptr);
    return Holder(model_.register_module(name, part));
  }

  // Blocks `first`, first + 1, ... of the global numbering, count of them, all built from `options` in
  // order, those this stage holds registered under a plain module `container` by their index from 0 here
  // (as a ModuleList of them all would name them) and returned.
  template <class Block, class Options>
  std::vector<Block> blocks(const std::string& container, int64_t first, int64_t count, const Options& options) {
    return blocks_by<Block>(container, first, count, [&](int64_t) { return options; });
  }
  // The same, block i (from 0 here) built from options_of(i) (the GPT's MoE blocks differ from its dense ones).
  template <class Block, class OptionsOf>
  std::vector<Block> blocks_by(const std::string& container, int64_t first, int64_t count, OptionsOf&& options_of) {
    auto holder = model_.register_module(container, std::make_shared<torch::nn::Module>());
    std::vector<Block> kept;
    for (int64_t i = 0; i < count; ++i) {
      Block block(options_of(i));
      if (!holds_block(first + i)) continue;
      kept.push_back(block);
      holder->register_module(std::to_string(i), block);
    }
    return kept;
  }

 private:
  torch::nn::Module& model_;
  ModelStage& stage_;
};

class VocabularyEnds {
 public:
  // The token embedding, built (torch::nn::Embedding's draws) first among the model's parts and registered
  // as "token_embedding" on the first stage and, tied, on the last.
  void build_embedding(StageBuilder& builder, const ModelConfig& config, const TensorParallelism& tp);
  // The untied head (no bias), built after the blocks and registered as "lm_head" on the last stage.
  void build_head(StageBuilder& builder, const ModelConfig& config, const TensorParallelism& tp);
  // The embedding's own initialization, N(0, std), drawn on every stage whether it keeps the embedding or
  // not (a stage that does not then lets it go).
  void init_embedding(double std);

  torch::Tensor embed(const torch::Tensor& tokens) { return embedding_->forward(tokens); }  // (B, T) -> (B, T, C)
  // hidden (B, T, C), or (B, T / tp, C) under sequence parallelism -> logits (B, T, V), or this TP rank's
  // columns (B, T, V_r).
  torch::Tensor logits(const torch::Tensor& hidden);
  const torch::Tensor& head_weight() const;  // (V or V_r, C): the embedding's when tied
  // The embedding when it is tied to the head and the stages split embedding and head apart: its gradient
  // must be summed with the other stage's copy. Undefined otherwise.
  torch::Tensor stage_tied_embedding() const;

 private:
  VocabParallelEmbedding built_{nullptr};      // until init_embedding(): every stage's
  VocabParallelEmbedding embedding_{nullptr};  // this stage's, if it holds one
  ColumnParallelLinear head_{nullptr};         // the untied head, on the last stage
  bool tied_copy_ = false;                     // the embedding is held by two stages
};

// Every family's model (models/gpt.h, encoder_decoder.h) is one pipeline stage of it, built by its family
// (train/model_family.h); its forwards are its task's business. It runs its blocks, embeddings and head
// through runner(), to which its constructor hands its blocks; the parallelism applied to them comes from
// outside, by parallelize() (the Trainer).
class StagedModel : public torch::nn::Module {
 public:
  virtual const ModelStage& stage() const = 0;
  // The tensor-parallel group it was built with (null: none): its loss and gradient norm span it.
  virtual Communicator* tp_group() const = 0;
  // A parameter the first and the last stage both hold (the tied embedding when a pipeline puts embedding
  // and head on different stages), whose gradients are summed across them; undefined if none.
  virtual torch::Tensor stage_tied_embedding() const { return {}; }
  // ZeRO-3 (parallel/parameter_units.h): its units, ends_and_block_units of the runner's blocks; empty for
  // a model that handed the runner no blocks (parallel.zero 3 refuses it).
  std::vector<std::vector<torch::Tensor>> parameter_units() const;
  // ZeRO-3's units (from parameter_units()) gathered around each use in its training and evaluation forwards,
  // and activation checkpointing (training only). Generation and incremental decoding take no units.
  void parallelize(const BlockParallelism& parallelism) { runner_.parallelize(parallelism); }

 protected:
  BlockRunner& runner() { return runner_; }
  const BlockRunner& runner() const { return runner_; }

 private:
  BlockRunner runner_;
};

// ZeRO-3's units of a stage (parallel/parameter_units.h): unit 0 every parameter of `model` outside the
// blocks (the ends: embeddings, final norms, head; none on a stage between the first and the last but a
// norm ending a stack), unit 1 + i the parameters of blocks[i], the stage's blocks in forward order.
std::vector<std::vector<torch::Tensor>> ends_and_block_units(const torch::nn::Module& model,
                                                             const std::vector<const torch::nn::Module*>& blocks);

}  // namespace loom
