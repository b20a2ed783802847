// The transformer family (model.arch transformer): the encoder-decoder (models/encoder_decoder.h) trained on
// translation pairs (train/translation_task.h); with T5's options (model.position relative, ...) its weights
// are T5ForConditionalGeneration's under Hugging Face names (models/t5_weights.h).
#include "core/config_checks.h"
#include "models/encoder_decoder.h"
#include "models/t5_weights.h"
#include "train/model_family.h"
#include "train/translation_task.h"

namespace loom {
namespace {

// What a pair batch needs of the padding, and what the encoder-decoder does not do (yet), refused saying why.
void validate_encoder_decoder(const Config& c, ConfigChecks& check) {
  const ModelConfig& m = c.model;
  // Batches are padded to multiples of the sequence shards; a padded length must still fit the positions.
  const int64_t multiple = c.sequence_pad_multiple();
  check.require(m.max_seq_len % multiple == 0, "model.max_seq_len", m.max_seq_len, " must be a multiple of ",
                multiple, ", what pair batches are padded to (data.pad_to_multiple=", c.data.pad_to_multiple,
                c.parallel.sequence_parallel_active()
                    ? ", lcm with parallel.tp=" + std::to_string(c.parallel.tp) + " under parallel.sequence_parallel)"
                    : std::string(")"));
  // Hugging Face's T5ForConditionalGeneration is the one encoder-decoder whose names it reads (MarianMT differs
  // in its sinusoid layout, output bias, activation, special token ids and tokenizers).
  if (!m.init_from.empty()) {
    const auto [key, why] = t5_hf_names_problem(m);
    check.require(key.empty(), "model.init_from", "model.arch=transformer reads Hugging Face "
                  "T5ForConditionalGeneration weights only, and this config is not T5's (", key, ": ", why, "): set "
                  "T5's options (configs/t5-small.yaml), or leave it empty and train from the random init");
  }
  if (m.position == PositionKind::kRelative)
    check.require(m.attention_window == 0, "model.attention_window",
                  "model.position=relative (T5) attends to every position: set it 0");
  check.require(m.num_labels == 0, "model.num_labels", "applies to model.arch=bert only");
  check.require(!m.qk_norm, "model.qk_norm", "applies to model.arch=gpt only");
  check.require(!c.data.whole_word_masking, "data.whole_word_masking", "applies to model.arch=bert only");
  check.require(!c.data.document_mask, "data.document_mask", "packs documents into model.arch=gpt windows; pair "
                "batches hold one pair per row, grouped by length (train.batch_tokens), so little padding is left "
                "to pack away: set it false");
  if (c.data.span_corruption) {
    const DataConfig& d = c.data;
    check.require(d.synthetic == SyntheticTask::kNone, "data.synthetic",
                  "data.span_corruption makes its pairs from token windows: leave data.synthetic empty");
    check.require(c.train.batch_tokens <= 0, "train.batch_tokens", "data.span_corruption batches train.batch_size "
                  "windows of data.seq_len tokens: leave it 0");
    check.require(m.vocab_size > 0, "model.vocab_size", "data.span_corruption takes its sentinels from the top of "
                  "model.vocab_size: set it to the tokenizer's vocabulary plus the sentinels (at least round(seq_len x "
                  "noise_density / mean_noise_span))");
    check.require(d.noise_density > 0 && d.noise_density < 1, "data.noise_density", d.noise_density, " must be in (0, 1)");
    check.require(d.mean_noise_span >= 1, "data.mean_noise_span", d.mean_noise_span, " must be >= 1");
    check.require(d.seq_len >= 2 && d.seq_len < m.max_seq_len, "data.seq_len", d.seq_len,
                  " must be in [2, model.max_seq_len=", m.max_seq_len, "): a window's source and target (eos included) fit");
  }
  check.require(c.parallel.cp <= 1, "parallel.cp", c.parallel.cp,
                ": context parallelism is built for model.arch=gpt: it splits one long sequence over ranks, and "
                "translation pairs are sentences; use parallel.cp 1 and split the batch over parallel.dp (the heads "
                "over parallel.tp)");
}

// Two stacks, the decoder's blocks attending to the encoder's output; source and target embedded (a position
// table each) and passed between pipeline stages side by side.
ModelShape encoder_decoder_shape(const ModelConfig& m) {
  ModelShape shape;
  shape.encoder_layers = m.encoder_layers();
  shape.decoder_layers = m.n_layers;
  shape.cross_attention = true;
  shape.position_tables = 2;
  shape.relative_bias_tables = 2;  // T5: the encoder's and the decoder's
  shape.final_norms = m.norm_position == NormPosition::kPre;
  shape.stage_outputs = 2;
  shape.ends_kept = true;
  return shape;
}

// Copy pairs of seq_len - 1 tokens over the whole vocabulary, train.batch_size a step: the source, the
// decoder input (bos + target) and the labels (target + eos) are all seq_len long.
void use_synthetic_pairs(Config& config) {
  if (config.data.seq_len < 2 || config.data.seq_len > config.model.max_seq_len)
    throw ConfigError(config.where("data.seq_len") + ": data.seq_len: loom bench of a transformer trains on pairs of " +
                      "data.seq_len tokens, which must be in [2, model.max_seq_len=" +
                      std::to_string(config.model.max_seq_len) + "]");
  config.data.synthetic = SyntheticTask::kCopy;
  config.data.span_corruption = false;  // a span-corruption run is timed on copy pairs of the same lengths
  config.data.synthetic_vocab = config.model.vocab_size;
  config.data.synthetic_min_len = config.data.synthetic_max_len = config.data.seq_len - 1;
  config.train.batch_tokens = 0;
}

}  // namespace

ModelFamily encoder_decoder_family() {
  ModelFamily family;
  family.arch = ModelArch::kTransformer;
  family.rules = {validate_encoder_decoder, encoder_decoder_shape, "model.n_encoder_layers + model.n_layers"};
  family.build = [](const Config& config, const TensorParallelism& tp, const ModelStage& stage,
                    const ContextParallelism& cp) {
    LOOM_CHECK(cp.size() == 1, "the encoder-decoder is not context-parallel (parallel.cp)");
    return std::static_pointer_cast<StagedModel>(EncoderDecoder(config.model, tp, stage).ptr());
  };
  family.make_task = make_translation_task;
  family.use_synthetic_data = use_synthetic_pairs;
  // T5ForConditionalGeneration's names (models/t5_weights.h), for a config of T5's options.
  family.import_hf = [](StagedModel& model, const std::filesystem::path& file) {
    load_t5_weights(static_cast<EncoderDecoderImpl&>(model), file);
  };
  family.export_hf = [](const ModelConfig& config, StagedModel& model, const SpecialTokenIds& tokens) {
    return HfExport{export_t5_weights(static_cast<EncoderDecoderImpl&>(model)), t5_config_json(config, tokens), "t5"};
  };
  return family;
}

}  // namespace loom
