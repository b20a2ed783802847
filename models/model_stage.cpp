#include "models/model_stage.h"

#include <unordered_set>

#include "core/error.h"
#include "parallel/pipeline_schedule.h"

namespace loom {

ModelStage model_stage(const ModelConfig& model, const ParallelConfig& parallel, int64_t stage) {
  const auto layers = stage_layers(model.pipeline_layers(), parallel.pp, parallel.pp_layers);
  const BlockRange blocks = stage_blocks(layers, stage);
  ModelStage out;
  out.first_block = blocks.first;
  out.end_block = blocks.end;
  out.first = stage == 0;
  out.last = stage == parallel.pp - 1;
  return out;
}

StageBuilder::StageBuilder(torch::nn::Module& model, ModelStage& stage, int64_t layers, const char* layers_key)
    : model_(model), stage_(stage) {
  if (stage_.end_block < 0) stage_.end_block = layers;
  LOOM_CHECK(0 <= stage_.first_block && stage_.first_block < stage_.end_block && stage_.end_block <= layers,
             "pipeline stage blocks [", stage_.first_block, ", ", stage_.end_block, ") outside ", layers_key, "=",
             layers);
}

void VocabularyEnds::build_embedding(StageBuilder& builder, const ModelConfig& config, const TensorParallelism& tp) {
  VocabParallelEmbeddingOptions options;
  options.vocab_size = config.vocab_size;
  options.dim = config.d_model;
  options.tp = tp;
  built_ = VocabParallelEmbedding(options);
  const auto& stage = builder.stage();
  const bool holds = stage.first || (stage.last && config.tie_embeddings);
  embedding_ = builder.keep("token_embedding", built_, holds);
  tied_copy_ = config.tie_embeddings && !stage.whole();
}

void VocabularyEnds::build_head(StageBuilder& builder, const ModelConfig& config, const TensorParallelism& tp) {
  if (config.tie_embeddings) return;
  ParallelLinearOptions options;
  options.in = config.d_model;
  options.out = config.vocab_size;
  options.bias = false;
  options.init_std = config.init_std;
  options.tp = tp;
  head_ = builder.keep("lm_head", ColumnParallelLinear(options), builder.stage().last);
}

void VocabularyEnds::init_embedding(double std) {
  built_->reset_normal(std);
  built_ = nullptr;
}

torch::Tensor VocabularyEnds::logits(const torch::Tensor& hidden) {
  return head_ ? head_->forward(hidden) : embedding_->logits(hidden);
}

const torch::Tensor& VocabularyEnds::head_weight() const { return head_ ? head_->weight : embedding_->weight; }

torch::Tensor VocabularyEnds::stage_tied_embedding() const {
  return tied_copy_ && embedding_ ? embedding_->weight : torch::Tensor();
}

std::vector<std::vector<torch::Tensor>> ends_and_block_units(const torch::nn::Module& model,
                                                             const std::vector<const torch::nn::Module*>& blocks) {
  std::vector<std::vector<torch::Tensor>> units(1 + blocks.size());
  std::unordered_set<const void*> in_blocks;
  for (size_t i = 0; i < blocks.size(); ++i) {
    units[i + 1] = blocks[i]->parameters();
    for (const auto& p : units[i + 1]) in_blocks.insert(p.unsafeGetTensorImpl());
  }
  for (const auto& p : model.parameters())
    if (in_blocks.count(p.unsafeGetTensorImpl()) == 0) units[0].push_back(p);
  return units;
}

std::vector<std::vector<torch::Tensor>> StagedModel::parameter_units() const {
  std::vector<const torch::nn::Module*> blocks;
  for (const auto& block : runner_.blocks()) blocks.push_back(block.get());
  if (blocks.empty()) return {};
  return ends_and_block_units(*this, blocks);
}

}  // namespace loom
