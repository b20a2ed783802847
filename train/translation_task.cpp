#include "train/translation_task.h"

#include <numeric>

#include "core/error.h"
#include "data/data_files.h"
#include "optim/cross_entropy.h"

namespace loom {

TranslationTask::TranslationTask(EncoderDecoder model, std::unique_ptr<Seq2SeqSource> data,
                                 std::unique_ptr<TensorParallelRng> tp_rng, int64_t pad_multiple)
    : model_(std::move(model)), data_(std::move(data)), pad_multiple_(std::lcm(pad_multiple, model_->sequence_multiple())) {
  tp_rng_ = std::move(tp_rng);
}

TaskBatch TranslationTask::train_batch(int64_t step, int64_t first, int64_t count) const {
  return pad_to_multiple(data_->train_batch(step, first, count), pad_multiple_);
}

TaskBatch TranslationTask::eval_batch(int64_t first, int64_t count) const {
  return pad_to_multiple(data_->eval_batch(first, count), pad_multiple_);
}

torch::Tensor TranslationTask::loss(const TaskBatch& batch, torch::Device device, double label_smoothing) {
  const auto& b = std::get<Seq2SeqBatch>(batch);
  // (B, T, V), or this TP rank's vocabulary slice (B, T, V_r): teacher forcing, every target position at once
  auto logits = model_->forward(b.source.to(device), b.source_lengths.to(device), b.target_inputs.to(device));
  return cross_entropy(logits.flatten(0, 1), b.target_labels.to(device).flatten(), label_smoothing, kIgnoreLabel,
                       model_->tp_group());
}

std::vector<torch::Tensor> TranslationTask::stage_forward(const TaskBatch& batch, torch::Device device,
                                                          const std::vector<torch::Tensor>& inputs,
                                                          double label_smoothing) {
  const auto& b = std::get<Seq2SeqBatch>(batch);
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
  const auto& b = std::get<Seq2SeqBatch>(batch);
  return model_->stage_output_shapes(b.source.size(0), b.source.size(1), b.target_inputs.size(1));
}

void TranslationTask::load_weights(const std::filesystem::path& file) {
  throw Error("model.init_from: " + file.string() + ": importing weights into model.arch=transformer is not available");
}

std::unique_ptr<TranslationTask> make_translation_task(Config& config, torch::Device device, TaskData data_use,
                                                       EncoderDecoder trained, Communicator* tp,
                                                       int64_t pp_stage) {
  auto data = make_seq2seq_source(config, data_use == TaskData::kTraining);
  resolve_vocab(config, data->vocab_size(), "the training pairs");
  std::unique_ptr<TensorParallelRng> tp_rng;
  if (!trained) {
    // Every rank draws the same full weights from the seed and keeps its TP shard: any layout starts alike.
    torch::manual_seed(static_cast<uint64_t>(config.run.seed));
    tp_rng = make_tp_rng(config, tp, pp_stage);
    trained = EncoderDecoder(config.model, TensorParallelism{tp, tp_rng.get(), config.parallel.sequence_parallel},
                             model_stage(config.model, config.parallel, pp_stage));
    trained->to(device);
    seed_stage_dropout(config, pp_stage);
  }
  return std::make_unique<TranslationTask>(trained, std::move(data), std::move(tp_rng), config.data.pad_to_multiple);
}

}  // namespace loom
