// The translation task: the encoder-decoder trained on Seq2SeqBatch pairs with teacher forcing (decoder
// input bos + target, labels target + eos), loss the label-smoothed cross-entropy over the non-padding
// target tokens. Its batches are padded to multiples of data.pad_to_multiple and, under sequence
// parallelism, of the TP size (data/pairs/seq2seq_source.h pad_to_multiple): the padding counts for nothing.
// With data.span_corruption its pairs are T5's span-corrupted token windows (data/pairs/span_corruption.h),
// trained alike; validation then reports the loss only.
#pragma once
#include <memory>

#include "data/pairs/seq2seq_source.h"
#include "models/encoder_decoder.h"
#include "train/task.h"

namespace loom {

class TranslationTask : public Task {
 public:
  // eval_data_name: "pairs", or "synthetic reverse pairs" (data.synthetic).
  TranslationTask(EncoderDecoder model, std::unique_ptr<Seq2SeqSource> data, std::string eval_data_name,
                  std::unique_ptr<TensorParallelRng> tp_rng = nullptr, int64_t pad_multiple = 1);

  StagedModel& model() override { return *model_; }
  TaskBatch train_batch(int64_t step, int64_t first, int64_t count) const override;
  int64_t train_batch_size(int64_t step) const override { return data_->train_batch_size(step); }
  std::vector<std::string> source_names() const override { return data_->source_names(); }
  std::vector<int64_t> source_tokens(int64_t step) const override { return data_->source_tokens(step); }
  TaskBatch eval_batch(int64_t first, int64_t count) const override;
  bool can_evaluate() const override { return data_->eval_size() > 0; }
  int64_t eval_size() const override { return data_->eval_size(); }
  std::string eval_data_name() const override { return eval_data_name_; }
  // Every evaluation pair (not span corruption's) decoded as decode.* says: exact match, and corpus BLEU of the detokenized
  // translations when the run has a tokenizer (train/translation_eval.h).
  std::optional<OutputScores> score_outputs(const Config& config) override;
  torch::Tensor loss(const TaskBatch& batch, torch::Device device, double label_smoothing) override;
  std::vector<torch::Tensor> stage_forward(const TaskBatch& batch, torch::Device device,
                                           const std::vector<torch::Tensor>& inputs, double label_smoothing) override;
  std::vector<std::vector<int64_t>> stage_output_shapes(const TaskBatch& batch) const override;

  EncoderDecoder& encoder_decoder() { return model_; }
  const Seq2SeqSource& data() const { return *data_; }

 private:
  EncoderDecoder model_;
  std::unique_ptr<Seq2SeqSource> data_;
  std::string eval_data_name_;
  int64_t pad_multiple_;  // S and T of every batch are multiples of this
};

// The transformer family's task (train/encoder_decoder_family.cpp): opens the config's pair source (training
// data too unless TaskData::kEvaluation), checks that model.vocab_size covers it, then takes an EncoderDecoder
// from `model`.
std::unique_ptr<TranslationTask> make_translation_task(const Config& config, TaskData data, const ModelSource& model);

}  // namespace loom
