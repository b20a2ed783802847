#include "train/translation_task.h"

#include <numeric>

#include "core/error.h"
#include "data/corpus/data_files.h"
#include "data/corpus/lm_mixture.h"
#include "data/pairs/span_corruption.h"
#include "optim/cross_entropy.h"
#include "train/lm_task.h"
#include "train/translation_eval.h"

namespace loom {

TranslationTask::TranslationTask(EncoderDecoder model, std::unique_ptr<Seq2SeqSource> data, std::string eval_data_name,
                                 std::unique_ptr<TensorParallelRng> tp_rng, int64_t pad_multiple)
    : model_(std::move(model)),
      data_(std::move(data)),
      eval_data_name_(std::move(eval_data_name)),
      pad_multiple_(std::lcm(pad_multiple, model_->sequence_multiple())) {
  tp_rng_ = std::move(tp_rng);
}

TaskBatch TranslationTask::train_batch(int64_t step, int64_t first, int64_t count) const {
  return pad_to_multiple(data_->train_batch(step, first, count), pad_multiple_);
}

TaskBatch TranslationTask::eval_batch(int64_t first, int64_t count) const {
  return pad_to_multiple(data_->eval_batch(first, count), pad_multiple_);
}

torch::Tensor TranslationTask::loss(const TaskBatch& batch, torch::Device device, double label_smoothing) {
  const auto& b = batch.as<Seq2SeqBatch>();
  // (B, T, V), or this TP rank's vocabulary slice (B, T, V_r): teacher forcing, every target position at once
  auto logits = model_->forward(b.source.to(device), b.source_lengths.to(device), b.target_inputs.to(device));
  return cross_entropy(logits.flatten(0, 1), b.target_labels.to(device).flatten(), label_smoothing, kIgnoreLabel,
                       model_->tp_group());
}

std::vector<torch::Tensor> TranslationTask::stage_forward(const TaskBatch& batch, torch::Device device,
                                                          const std::vector<torch::Tensor>& inputs,
                                                          double label_smoothing) {
  const auto& b = batch.as<Seq2SeqBatch>();
  const auto& stage = model_->stage();
  // Every stage has the batch: the source padding comes from it, not from the previous stage.
  const auto source = b.source.to(device);
  const auto padding = padding_mask(b.source_lengths.to(device), source.size(1));  // (B, S)
  auto outs = model_->forward_stage(stage.first ? source : torch::Tensor(), padding,
                                    stage.first ? b.target_inputs.to(device) : torch::Tensor(), inputs);
  if (!stage.last) return outs;
  return {cross_entropy(outs.front().flatten(0, 1), b.target_labels.to(device).flatten(), label_smoothing,
                        kIgnoreLabel, model_->tp_group())};
}

std::vector<std::vector<int64_t>> TranslationTask::stage_output_shapes(const TaskBatch& batch) const {
  const auto& b = batch.as<Seq2SeqBatch>();
  return model_->stage_output_shapes(b.source.size(0), b.source.size(1), b.target_inputs.size(1));
}

std::optional<OutputScores> TranslationTask::score_outputs(const Config& config) {
  if (config.data.span_corruption) return std::nullopt;  // denoising windows: the loss says it all
  const auto scores = evaluate_translation(model_, *data_, config.decode);
  OutputScores out;
  out.fields = {{"exact_match", scores.exact_match}, {"sentences", scores.references.size()}, {"beam", config.decode.beam}};
  out.summary = " | exact match " + std::to_string(scores.exact_match) + " of " + std::to_string(scores.references.size()) +
                " sentences (beam " + std::to_string(config.decode.beam) + ")";
  std::unique_ptr<Tokenizer> tokenizer;
  if (!config.tokenizer.model.empty()) {
    tokenizer = load_tokenizer(config.tokenizer);
    const BleuScore bleu = corpus_bleu(scores, *tokenizer);
    out.fields["bleu"] = bleu.score;
    out.summary += " | " + bleu.format();
  }
  for (const auto& ids : scores.hypotheses) out.lines.push_back(translation_text(ids, tokenizer.get()));
  return out;
}

namespace {

// data.span_corruption: the token windows of data.train / data.valid as T5's span-corrupted pairs, the
// sentinels at the top of model.vocab_size above every corpus's vocabulary.
std::unique_ptr<Seq2SeqSource> span_corruption_source(const Config& config, TaskData data_use) {
  const int64_t seq_len = config.data.seq_len, vocab = config.model.vocab_size;
  SpanCorruptionOptions options;
  options.noise_density = config.data.noise_density;
  options.mean_noise_span = config.data.mean_noise_span;
  options.vocab_size = vocab;
  options.seed = static_cast<uint64_t>(config.run.seed);
  LmData opened = open_lm_data(config, data_use == TaskData::kEvaluation ? TaskData::kEvaluation : TaskData::kTraining);
  const int64_t sentinels = noise_tokens_and_spans(seq_len, options).second;
  for (const TokenCorpus* corpus : opened.corpora())
    if (corpus->vocab_size() + sentinels > vocab)
      throw ConfigError(config.where("model.vocab_size") + ": model.vocab_size: " + std::to_string(vocab) +
                        " leaves no room for data.span_corruption's " + std::to_string(sentinels) +
                        " sentinels above the " + std::to_string(corpus->vocab_size()) + " ids of " + corpus->name() +
                        ": set it to at least " + std::to_string(corpus->vocab_size() + sentinels));
  std::unique_ptr<LmBatches> train;
  if (!opened.sources.empty())
    train = std::make_unique<LmMixture>(std::move(opened.sources), LmSampler(options.seed, seq_len),
                                        config.train.batch_size);
  return std::make_unique<SpanCorruptionSource>(std::move(train), std::move(opened.valid), seq_len,
                                                config.train.batch_size, options);
}

}  // namespace

std::unique_ptr<TranslationTask> make_translation_task(const Config& config, TaskData data_use, const ModelSource& model) {
  auto data = config.data.span_corruption ? span_corruption_source(config, data_use)
                                          : make_seq2seq_source(config, data_use != TaskData::kEvaluation);
  check_vocab(config, data->vocab_size(), config.data.span_corruption ? "the span-corrupted windows" : "the training pairs");
  TaskModel built = model();
  const std::string name = config.data.span_corruption ? "span-corrupted windows"
                           : config.data.synthetic == SyntheticTask::kNone
                               ? "pairs"
                               : "synthetic " + std::string(enum_name(config.data.synthetic)) + " pairs";
  return std::make_unique<TranslationTask>(built.as<EncoderDecoder>(), std::move(data), name, std::move(built.tp_rng),
                                           config.data.pad_to_multiple);
}

}  // namespace loom
