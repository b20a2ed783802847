#include "train/classify_task.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <numeric>

#include "core/error.h"
#include "data/corpus/splitmix.h"
#include "data/tokenizers/tokenizer.h"
#include "optim/cross_entropy.h"
#include "train/mlm_task.h"

namespace loom {
namespace {

// A permutation of [0, n) drawn from (seed, epoch) by Fisher-Yates over SplitMix64.
std::vector<int64_t> epoch_permutation(uint64_t seed, int64_t epoch, int64_t n) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  uint64_t state = splitmix64(seed ^ splitmix64(static_cast<uint64_t>(epoch) + 0x636c6173ull));
  for (int64_t i = n - 1; i > 0; --i) {
    state = splitmix64(state);
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(state % static_cast<uint64_t>(i + 1))]);
  }
  return order;
}

std::string labeled_file(const Config& config, const std::string& key) {
  if (key == "data.train") {
    if (config.data.train.size() != 1)
      throw ConfigError(config.where(key) + ": " + key + ": a classifier trains on one JSON Lines file of " +
                        "{\"text\", \"label\"}, not a mixture");
    return config.data.train.front().path;
  }
  return config.data.valid;
}

std::vector<LabeledText> read_texts(const std::string& path, const Tokenizer& tokenizer) {
  if (std::filesystem::is_directory(path))
    throw ConfigError(path + ": a classifier reads a JSON Lines file of {\"text\", \"label\"}, not a directory");
  return read_labeled_texts(path, tokenizer);
}

// The classifier's labels: the training texts' distinct labels (label_set), which must number model.num_labels.
std::vector<std::string> classifier_labels(const Config& config, const std::vector<LabeledText>& train,
                                           const std::string& path) {
  const auto labels = label_set(train);
  if (static_cast<int64_t>(labels.size()) != config.model.num_labels) {
    std::string names;
    for (const auto& l : labels) names += (names.empty() ? "" : ", ") + l;
    throw ConfigError(config.where("model.num_labels") + ": model.num_labels: " +
                      std::to_string(config.model.num_labels) + ", but " + path + " has " +
                      std::to_string(labels.size()) + " labels (" + names + "): set it to " +
                      std::to_string(labels.size()));
  }
  return labels;
}

}  // namespace

ClassifyTask::ClassifyTask(Bert model, ClassifyData train, ClassifyData valid, std::vector<std::string> label_names,
                           const MlmTokenIds& ids, const Config& config, std::unique_ptr<TensorParallelRng> tp_rng)
    : model_(std::move(model)),
      train_(std::move(train)),
      valid_(std::move(valid)),
      label_names_(std::move(label_names)),
      ids_(ids),
      seed_(static_cast<uint64_t>(config.run.seed)),
      seq_len_(config.data.seq_len),
      batch_size_(config.train.batch_size),
      valid_name_(config.data.valid) {
  tp_rng_ = std::move(tp_rng);
}

int64_t ClassifyTask::train_row(int64_t k) const {
  const auto n = static_cast<int64_t>(train_.texts.size());
  const int64_t epoch = k / n;
  auto found = epochs_.find(epoch);
  if (found == epochs_.end()) {
    while (epochs_.size() >= 2) epochs_.erase(epochs_.begin());
    found = epochs_.emplace(epoch, epoch_permutation(seed_, epoch, n)).first;
  }
  return found->second[static_cast<size_t>(k % n)];
}

ClassifyBatch ClassifyTask::make_batch(const ClassifyData& data, const std::vector<int64_t>& rows) const {
  std::vector<std::vector<int64_t>> tokens, types;
  int64_t longest = 0, real = 0;
  for (const int64_t row : rows) {
    const LabeledText& t = data.texts[static_cast<size_t>(row)];
    const bool pair = !t.text_pair.empty();
    // Room for the texts: seq_len less [CLS], [SEP] (and the pair's [SEP]); the longer text is cut first.
    size_t a = t.text.size(), b = t.text_pair.size();
    const size_t room = static_cast<size_t>(std::max<int64_t>(0, seq_len_ - (pair ? 3 : 2)));
    while (a + b > room) (a >= b ? a : b) -= 1;
    std::vector<int64_t> seq = {ids_.cls}, type = {0};
    seq.insert(seq.end(), t.text.begin(), t.text.begin() + static_cast<std::ptrdiff_t>(a));
    seq.push_back(ids_.sep);
    type.resize(seq.size(), 0);
    if (pair) {
      seq.insert(seq.end(), t.text_pair.begin(), t.text_pair.begin() + static_cast<std::ptrdiff_t>(b));
      seq.push_back(ids_.sep);
      type.resize(seq.size(), 1);
    }
    longest = std::max<int64_t>(longest, static_cast<int64_t>(seq.size()));
    real += static_cast<int64_t>(seq.size());
    tokens.push_back(std::move(seq));
    types.push_back(std::move(type));
  }
  const auto B = static_cast<int64_t>(rows.size());
  ClassifyBatch batch;
  batch.ids = torch::full({B, longest}, ids_.pad, torch::kLong);
  batch.token_types = torch::zeros({B, longest}, torch::kLong);
  batch.padding = torch::ones({B, longest}, torch::kBool);
  batch.labels = torch::empty({B}, torch::kLong);
  for (int64_t i = 0; i < B; ++i) {
    const auto n = static_cast<int64_t>(tokens[static_cast<size_t>(i)].size());
    batch.ids[i].narrow(0, 0, n).copy_(torch::tensor(tokens[static_cast<size_t>(i)], torch::kLong));
    batch.token_types[i].narrow(0, 0, n).copy_(torch::tensor(types[static_cast<size_t>(i)], torch::kLong));
    batch.padding[i].narrow(0, 0, n).fill_(false);
    batch.labels[i] = data.labels[static_cast<size_t>(rows[static_cast<size_t>(i)])];
  }
  batch.real_tokens = real;
  return batch;
}

TaskBatch ClassifyTask::train_batch(int64_t step, int64_t first, int64_t count) const {
  LOOM_CHECK(!train_.texts.empty(), "no training data (data.train)");
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < count; ++i) rows.push_back(train_row(step * batch_size_ + first + i));
  return make_batch(train_, rows);
}

TaskBatch ClassifyTask::eval_batch(int64_t first, int64_t count) const {
  LOOM_CHECK(!valid_.texts.empty(), "no validation data (data.valid)");
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < count; ++i) rows.push_back((first + i) % eval_size());
  return make_batch(valid_, rows);
}

torch::Tensor ClassifyTask::loss(const TaskBatch& batch, torch::Device device, double label_smoothing) {
  return stage_forward(batch, device, {}, label_smoothing).front();
}

std::vector<torch::Tensor> ClassifyTask::stage_forward(const TaskBatch& batch, torch::Device device,
                                                       const std::vector<torch::Tensor>&, double label_smoothing) {
  const auto& b = batch.as<ClassifyBatch>();
  const auto logits = model_->forward_stage(b.ids.to(device), {}, b.padding.to(device), b.token_types.to(device));
  const auto labels = b.labels.to(device);
  if (!model_->is_training())
    correct_ += static_cast<double>((logits.argmax(-1) == labels).sum().item<int64_t>());
  return {cross_entropy(logits, labels, label_smoothing)};
}

std::vector<double> ClassifyTask::take_eval_metric_sums() {
  const double correct = correct_;
  correct_ = 0;
  return {correct};
}

std::vector<std::vector<int64_t>> ClassifyTask::stage_output_shapes(const TaskBatch& batch) const {
  const auto& ids = batch.as<ClassifyBatch>().ids;
  return {model_->hidden_shape(ids.size(0), ids.size(1))};
}

std::vector<int64_t> ClassifyTask::predict(const std::vector<LabeledText>& texts, torch::Device device) {
  torch::NoGradGuard no_grad;
  model_->eval();
  ClassifyData data{texts, std::vector<int64_t>(texts.size(), 0)};
  std::vector<int64_t> out;
  for (size_t start = 0; start < texts.size(); start += static_cast<size_t>(batch_size_)) {
    std::vector<int64_t> rows;
    for (size_t i = start; i < std::min(texts.size(), start + static_cast<size_t>(batch_size_)); ++i)
      rows.push_back(static_cast<int64_t>(i));
    const auto b = make_batch(data, rows);
    const auto predicted =
        model_->forward_stage(b.ids.to(device), {}, b.padding.to(device), b.token_types.to(device)).argmax(-1).cpu();
    for (int64_t i = 0; i < predicted.size(0); ++i) out.push_back(predicted[i].item<int64_t>());
  }
  return out;
}

std::optional<OutputScores> ClassifyTask::score_outputs(const Config&) {
  const torch::Device device = model_->parameters().front().device();
  const auto predicted = predict(valid_.texts, device);
  const auto N = static_cast<int64_t>(label_names_.size());
  std::vector<int64_t> true_positive(N), predicted_count(N), actual_count(N), train_count(N);
  int64_t correct = 0;
  for (size_t i = 0; i < predicted.size(); ++i) {
    const int64_t p = predicted[i], y = valid_.labels[i];
    predicted_count[p] += 1, actual_count[y] += 1;
    if (p == y) true_positive[p] += 1, correct += 1;
  }
  for (const int64_t y : train_.labels) train_count[y] += 1;
  // Macro F1 over the labels that occur in the validation set or among the predictions.
  double f1_sum = 0;
  int64_t counted = 0;
  for (int64_t c = 0; c < N; ++c) {
    if (actual_count[c] + predicted_count[c] == 0) continue;
    f1_sum += 2.0 * static_cast<double>(true_positive[c]) / static_cast<double>(actual_count[c] + predicted_count[c]);
    counted += 1;
  }
  const auto n = static_cast<double>(predicted.size());
  const int64_t majority = std::max_element(train_count.begin(), train_count.end()) - train_count.begin();
  OutputScores out;
  const double accuracy = correct / n, macro_f1 = counted ? f1_sum / static_cast<double>(counted) : 0.0;
  const double baseline = static_cast<double>(actual_count[majority]) / n;
  out.fields = {{"accuracy", accuracy}, {"macro_f1", macro_f1}, {"texts", predicted.size()},
                {"majority_label", label_names_[static_cast<size_t>(majority)]}, {"majority_accuracy", baseline}};
  char summary[200];
  std::snprintf(summary, sizeof summary, " | accuracy %.4f, macro F1 %.4f over %zu texts (majority label '%s': %.4f)",
                accuracy, macro_f1, predicted.size(), label_names_[static_cast<size_t>(majority)].c_str(), baseline);
  out.summary = summary;
  for (const int64_t p : predicted) out.lines.push_back(label_names_[static_cast<size_t>(p)]);
  return out;
}

std::unique_ptr<ClassifyTask> make_classify_task(const Config& config, TaskData data, const ModelSource& model) {
  const MlmTokenIds ids = mlm_token_ids(config);
  const int64_t N = config.model.num_labels;
  ClassifyData train, valid;
  std::vector<std::string> labels;
  if (data == TaskData::kSynthetic) {  // loom bench: random texts of data.seq_len - 2 tokens, random labels
    const auto texts = 4 * config.train.batch_size;
    auto tokens = torch::randint(ids.text_vocab, {texts, config.data.seq_len - 2}, torch::kLong);
    for (int64_t i = 0; i < texts; ++i) {
      LabeledText t;
      const auto row = tokens[i];
      t.text.assign(row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + row.numel());
      train.texts.push_back(std::move(t));
      train.labels.push_back(i % N);
    }
    for (int64_t c = 0; c < N; ++c) labels.push_back(std::to_string(c));
  } else {
    if (config.tokenizer.model.empty())
      throw ConfigError(config.where("tokenizer.model") + ": tokenizer.model: a classifier reads text: name the "
                        "tokenizer its texts are encoded with");
    const auto tokenizer = load_tokenizer(config.tokenizer);
    if (tokenizer->vocab_size() > config.model.vocab_size)
      throw ConfigError(config.where("model.vocab_size") + ": model.vocab_size: " +
                        std::to_string(config.model.vocab_size) + " is smaller than " + config.tokenizer.model +
                        "'s " + std::to_string(tokenizer->vocab_size()));
    // Read for evaluation too: the labels are the training file's, and the majority baseline counts them.
    const std::string train_path = labeled_file(config, "data.train");
    train.texts = read_texts(train_path, *tokenizer);
    labels = classifier_labels(config, train.texts, train_path);
    train.labels = label_ids(train.texts, labels, train_path);
    if (!config.data.valid.empty()) {
      valid.texts = read_texts(config.data.valid, *tokenizer);
      valid.labels = label_ids(valid.texts, labels, config.data.valid);
    }
  }
  TaskModel built = model();
  return std::make_unique<ClassifyTask>(built.as<Bert>(), std::move(train), std::move(valid), std::move(labels), ids,
                                        config, std::move(built.tp_rng));
}

}  // namespace loom
