// The sequence classification task (model.arch bert with model.num_labels > 0, BertForSequenceClassification's
// fine-tuning): labelled texts (data/labeled/labeled_texts.h: JSON Lines of text, optional text_pair, label)
// become [CLS] text [SEP] (text_pair [SEP], token type 1) sequences of at most data.seq_len tokens (the longer
// text cut first), padded with [PAD] to a batch's longest and masked as keys; the loss is the cross-entropy of
// the classifier's logits, averaged over the batch's texts. Training draws the texts in an order shuffled anew
// each epoch (a pure function of run.seed and the epoch, so a resume under any layout continues it exactly);
// validation covers data.valid once in file order and adds `accuracy`; `loom eval` adds macro F1 and the
// majority-class baseline (score_outputs).
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "data/corpus/mlm_masking.h"
#include "data/labeled/labeled_texts.h"
#include "models/bert.h"
#include "train/task.h"

namespace loom {

struct ClassifyBatch {
  torch::Tensor ids;         // (B, T) int64
  torch::Tensor token_types;  // (B, T) int64
  torch::Tensor padding;      // (B, T) bool, true at [PAD]
  torch::Tensor labels;       // (B) int64
  int64_t real_tokens = 0;
  int64_t loss_tokens() const { return labels.numel(); }  // the loss averages over texts
  int64_t tokens() const { return real_tokens; }
};

// Labelled texts as the classifier reads them: token ids and label indices.
struct ClassifyData {
  std::vector<LabeledText> texts;
  std::vector<int64_t> labels;
};

class ClassifyTask : public Task {
 public:
  ClassifyTask(Bert model, ClassifyData train, ClassifyData valid, std::vector<std::string> label_names,
               const MlmTokenIds& ids, const Config& config, std::unique_ptr<TensorParallelRng> tp_rng = nullptr);

  StagedModel& model() override { return *model_; }
  TaskBatch train_batch(int64_t step, int64_t first, int64_t count) const override;
  int64_t train_batch_size(int64_t) const override { return batch_size_; }
  TaskBatch eval_batch(int64_t first, int64_t count) const override;
  bool can_evaluate() const override { return !valid_.texts.empty(); }
  int64_t eval_size() const override { return static_cast<int64_t>(valid_.texts.size()); }
  std::string eval_data_name() const override { return valid_name_; }
  std::optional<OutputScores> score_outputs(const Config& config) override;
  std::vector<std::string> eval_metric_names() const override { return {"accuracy"}; }
  std::vector<double> take_eval_metric_sums() override;
  torch::Tensor loss(const TaskBatch& batch, torch::Device device, double label_smoothing) override;
  std::vector<torch::Tensor> stage_forward(const TaskBatch& batch, torch::Device device,
                                           const std::vector<torch::Tensor>& inputs, double label_smoothing) override;
  std::vector<std::vector<int64_t>> stage_output_shapes(const TaskBatch& batch) const override;

  // The label index the model predicts for each text (in eval mode, batches of train.batch_size).
  std::vector<int64_t> predict(const std::vector<LabeledText>& texts, torch::Device device);
  const std::vector<std::string>& label_names() const { return label_names_; }

 private:
  ClassifyBatch make_batch(const ClassifyData& data, const std::vector<int64_t>& rows) const;
  // The training text at position k of the endless shuffled stream: epoch k / n, that epoch's permutation.
  int64_t train_row(int64_t k) const;

  Bert model_;
  ClassifyData train_, valid_;
  std::vector<std::string> label_names_;
  MlmTokenIds ids_;
  uint64_t seed_;
  int64_t seq_len_, batch_size_;
  std::string valid_name_;
  mutable std::map<int64_t, std::vector<int64_t>> epochs_;  // permutations drawn so far, by epoch (the last two kept)
  double correct_ = 0;
};

// The bert family's task when model.num_labels > 0 (train/bert_family.cpp): data.train (and data.valid) as
// `data` asks (TaskData::kSynthetic: random texts and labels; kEvaluation reads data.train too: its labels are
// the classifier's, and the majority baseline counts them), then a Bert from `model`. The labels must number
// model.num_labels.
std::unique_ptr<ClassifyTask> make_classify_task(const Config& config, TaskData data, const ModelSource& model);

}  // namespace loom
