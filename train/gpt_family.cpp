// The gpt family (model.arch gpt): the decoder-only model (models/gpt.h) trained on windows of token files
// (train/lm_task.h), its weights under GPT-2's or LLaMA's Hugging Face names (models/hf_weights.h).
#include "core/config_checks.h"
#include "models/gpt.h"
#include "models/hf_weights.h"
#include "train/lm_task.h"
#include "train/model_family.h"

namespace loom {
namespace {

// The keys of pair batches and of the encoder are refused; sequence parallelism cuts every window.
void validate_gpt(const Config& c, ConfigChecks& check) {
  const ModelConfig& m = c.model;
  check.require(m.norm_position == NormPosition::kPre, "model.norm_position",
                "post applies to model.arch=transformer and bert only");
  check.require(m.n_encoder_layers == 0, "model.n_encoder_layers", "applies to model.arch=transformer only");
  check.require(m.position != PositionKind::kRelative, "model.position",
                "relative (T5's bucketed bias) applies to model.arch=transformer only; gpt: rope or alibi");
  check.require(!m.scale_head, "model.scale_head", "applies to model.arch=transformer only");
  check.require(!c.data.span_corruption, "data.span_corruption", "T5's pretraining objective: model.arch=transformer only");
  check.require(m.num_labels == 0, "model.num_labels", "applies to model.arch=bert only");
  check.require(!c.data.whole_word_masking, "data.whole_word_masking", "applies to model.arch=bert only");
  check.require(c.data.synthetic == SyntheticTask::kNone, "data.synthetic",
                "synthetic pairs train model.arch=transformer, not gpt");
  check.require(c.data.pad_to_multiple == 1, "data.pad_to_multiple", "applies to model.arch=transformer only "
                "(gpt windows are data.seq_len long)");
  check.require(c.train.batch_tokens <= 0, "train.batch_tokens",
                "token-based batching is for encoder-decoder runs; a gpt language model batches train.batch_size "
                "windows of data.seq_len tokens: leave it 0");
  const ParallelConfig& p = c.parallel;
  if (p.sequence_parallel_active() && c.data.seq_len > 0)
    check.require(c.data.seq_len % p.tp == 0, "data.seq_len", c.data.seq_len, " must be a multiple of parallel.tp=",
                  p.tp, " with parallel.sequence_parallel (each rank keeps 1/tp of the positions)");
}

ModelShape gpt_shape(const ModelConfig& m) {
  ModelShape shape;
  shape.decoder_layers = m.n_layers;
  shape.fused_loss = true;  // LmTask: optim/linear_cross_entropy.h
  return shape;
}

}  // namespace

ModelFamily gpt_family() {
  ModelFamily family;
  family.arch = ModelArch::kGpt;
  family.rules = {validate_gpt, gpt_shape, "model.n_layers"};
  family.build = [](const Config& config, const TensorParallelism& tp, const ModelStage& stage,
                    const ContextParallelism& cp) {
    return std::static_pointer_cast<StagedModel>(Gpt(config.model, tp, stage, cp).ptr());
  };
  family.make_task = make_lm_task;
  // TaskData::kSynthetic: uniform random tokens (data/corpus/lm_batches.h SyntheticBatches).
  family.use_synthetic_data = [](Config& config) {
    if (config.data.document_mask)
      throw ConfigError(config.where("data.document_mask") + ": data.document_mask: synthetic tokens (loom bench) "
                        "have no documents to mask: set it false to measure");
  };
  family.import_hf = [](StagedModel& model, const std::filesystem::path& file) {
    load_weights_file(static_cast<GptImpl&>(model), file);
  };
  family.export_hf = [](const ModelConfig& config, StagedModel& model, const SpecialTokenIds& tokens) {
    return HfExport{export_weights(static_cast<GptImpl&>(model)), hf_config_json(config, tokens),
                    weight_names_label(weight_names(config))};
  };
  return family;
}

}  // namespace loom
