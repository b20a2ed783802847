// The bert family (model.arch bert): the encoder-only BERT (models/bert.h) trained by masked language
// modelling on windows of token files (train/mlm_task.h), or with model.num_labels > 0 fine-tuned as a
// sequence classifier on labelled texts (train/classify_task.h), its weights under BertForMaskedLM's (or
// BertForSequenceClassification's) Hugging Face names (models/bert_weights.h).
#include "core/config_checks.h"
#include "models/bert.h"
#include "models/bert_weights.h"
#include "train/classify_task.h"
#include "train/mlm_task.h"
#include "train/model_family.h"

namespace loom {
namespace {

// What BERT is (learned positions, one stack) and what its packed MLM windows take of the data keys.
void validate_bert(const Config& c, ConfigChecks& check) {
  const ModelConfig& m = c.model;
  check.require(m.position == PositionKind::kLearned, "model.position", "model.arch=bert has learned positions");
  check.require(!m.scale_head, "model.scale_head", "applies to model.arch=transformer only");
  check.require(!c.data.span_corruption, "data.span_corruption", "T5's pretraining objective: model.arch=transformer only");
  check.require(m.n_encoder_layers == 0, "model.n_encoder_layers",
                "applies to model.arch=transformer only (bert: model.n_layers)");
  check.require(m.attention_window == 0, "model.attention_window", "model.arch=bert attends to the whole window");
  check.require(!m.gated_mlp(), "model.activation", "model.arch=bert has an ungated MLP (gelu_erf, gelu, relu)");
  check.require(c.data.synthetic == SyntheticTask::kNone, "data.synthetic", "synthetic pairs train model.arch=transformer");
  check.require(!c.data.document_mask, "data.document_mask",
                "model.arch=bert packs documents into [CLS] ... [SEP] windows, [SEP] between them: set it false");
  check.require(c.data.pad_to_multiple == 1, "data.pad_to_multiple", "applies to model.arch=transformer only");
  check.require(c.train.batch_tokens <= 0, "train.batch_tokens",
                "model.arch=bert batches train.batch_size windows of data.seq_len tokens: leave it 0");
  check.require(c.data.seq_len >= 3 && c.data.seq_len <= m.max_seq_len, "data.seq_len", c.data.seq_len,
                ": a window is [CLS], at least one token, [SEP], and at most model.max_seq_len=", m.max_seq_len);
  check.require(c.parallel.cp <= 1, "parallel.cp", "context parallelism is built for model.arch=gpt");
  check.require(!c.parallel.sequence_parallel_active(), "parallel.sequence_parallel",
                "model.arch=bert is not sequence-parallel yet: set it false");
  check.require(m.head_size == 0, "model.head_dim", "model.arch=bert's heads are d_model / n_heads: leave it 0");
  check.require(!m.qk_norm, "model.qk_norm", "applies to model.arch=gpt only");
  check.require(m.num_labels == 0 || m.num_labels >= 2, "model.num_labels", m.num_labels,
                ": 0 pretrains the MLM head, a classifier has at least 2 labels");
  check.require(m.num_labels == 0 || !c.data.whole_word_masking, "data.whole_word_masking",
                "applies to masked language modelling (model.num_labels 0), not to a classifier");
  check.require(m.num_labels == 0 || c.parallel.pp == 1, "parallel.pp",
                "a BERT classifier (model.num_labels > 0) is not pipelined yet: set it 1");
}

// One stack of blocks (counted as the GPT's), BERT's ends: token types, the embedding norm, the MLM head or
// the classifier's.
ModelShape bert_shape(const ModelConfig& m) {
  ModelShape shape;
  shape.decoder_layers = m.n_layers;
  shape.final_norms = m.norm_position == NormPosition::kPre;
  shape.token_types = kBertTokenTypes;
  shape.embedding_norm = true;
  shape.mlm_head = m.num_labels == 0;
  shape.classifier_labels = m.num_labels;
  shape.ends_kept = true;  // ZeRO-3 (models/bert.h)
  return shape;
}

}  // namespace

ModelFamily bert_family() {
  ModelFamily family;
  family.arch = ModelArch::kBert;
  family.rules = {validate_bert, bert_shape, "model.n_layers"};
  family.build = [](const Config& config, const TensorParallelism& tp, const ModelStage& stage,
                    const ContextParallelism& cp) {
    LOOM_CHECK(cp.size() == 1, "BERT is not context-parallel (parallel.cp)");
    return std::static_pointer_cast<StagedModel>(Bert(config.model, tp, stage).ptr());
  };
  family.make_task = [](const Config& config, TaskData data, const ModelSource& model) -> std::unique_ptr<Task> {
    if (config.model.num_labels > 0) return make_classify_task(config, data, model);
    return make_mlm_task(config, data, model);
  };
  // TaskData::kSynthetic: uniform random text, the last four ids the specials (mlm_token_ids).
  family.use_synthetic_data = [](Config&) {};
  family.import_hf = [](StagedModel& model, const std::filesystem::path& file) {
    load_bert_weights(static_cast<BertImpl&>(model), file);
  };
  family.export_hf = [](const ModelConfig& config, StagedModel& model, const SpecialTokenIds& tokens) {
    return HfExport{export_bert_weights(static_cast<BertImpl&>(model)), bert_config_json(config, tokens), "bert"};
  };
  return family;
}

}  // namespace loom
