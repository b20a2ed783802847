#include "train/mlm_task.h"

#include "train/lm_task.h"

#include <cctype>

#include "core/error.h"
#include "data/tokenizers/tokenizer.h"
#include "optim/cross_entropy.h"
#include "parallel/tensor_parallel.h"

namespace loom {

namespace {

// Whole-word masking: which ids continue the word of the token before them, told by decoding each after a
// reference word ("a"): a continuation follows it with no whitespace between. Ids that decode to nothing
// (specials, control pieces) or not at all stand alone.
std::shared_ptr<const std::vector<bool>> word_continuations(const Tokenizer& tokenizer, const std::string& path) {
  std::vector<int32_t> reference;
  tokenizer.encode_to("a", reference);
  LOOM_CHECK(!reference.empty(), path, ": encodes \"a\" to nothing: data.whole_word_masking cannot tell its words");
  const int32_t word = reference.back();
  const std::string alone = tokenizer.decode({word});
  auto continues = std::make_shared<std::vector<bool>>(static_cast<size_t>(tokenizer.vocab_size()), false);
  for (int32_t id = 0; id < static_cast<int32_t>(continues->size()); ++id) {
    std::string both;
    try {
      both = tokenizer.decode({word, id});
    } catch (const Error&) {
      continue;  // an id the tokenizer does not use
    }
    (*continues)[static_cast<size_t>(id)] = both.size() > alone.size() && both.compare(0, alone.size(), alone) == 0 &&
                                            !std::isspace(static_cast<unsigned char>(both[alone.size()]));
  }
  return continues;
}

}  // namespace

MlmTokenIds mlm_token_ids(const Config& config) {
  MlmTokenIds ids;
  const int64_t V = config.model.vocab_size;
  if (config.data.whole_word_masking && config.tokenizer.model.empty())
    throw ConfigError(config.where("data.whole_word_masking") + ": data.whole_word_masking: words are told apart by "
                      "tokenizer.model: name it");
  if (config.tokenizer.model.empty()) {  // synthetic text: the specials are the last four ids
    if (V < 5) throw ConfigError(config.where("model.vocab_size") + ": model.vocab_size: model.arch=bert needs at "
                                 "least 5 ids ([CLS], [SEP], [MASK], [PAD] and text)");
    ids = {V - 4, V - 3, V - 2, V - 1, std::nullopt, V - 4, nullptr};
    return ids;
  }
  const auto tokenizer = load_tokenizer(config.tokenizer);
  ids.text_vocab = tokenizer->vocab_size();
  ids.eos = tokenizer->eos_id();
  int64_t next = ids.text_vocab;
  std::string appended;
  auto find = [&](const char* text, std::optional<int32_t> fallback) {
    if (const auto id = tokenizer->special_id(text)) return static_cast<int64_t>(*id);
    if (fallback) return static_cast<int64_t>(*fallback);
    appended += std::string(appended.empty() ? "" : ", ") + text + "=" + std::to_string(next);
    return next++;
  };
  ids.cls = find("[CLS]", std::nullopt);
  ids.sep = find("[SEP]", std::nullopt);
  ids.mask = find("[MASK]", std::nullopt);
  ids.pad = find("[PAD]", tokenizer->pad_id());
  if (config.data.whole_word_masking) ids.continues_word = word_continuations(*tokenizer, config.tokenizer.model);
  if (next > V)
    throw ConfigError(config.where("model.vocab_size") + ": model.vocab_size: " + std::to_string(V) + ", but " +
                      config.tokenizer.model + " has no " + appended + " (ids after its " +
                      std::to_string(ids.text_vocab) + "): set model.vocab_size to at least " + std::to_string(next));
  return ids;
}

MlmTask::MlmTask(Bert model, std::unique_ptr<LmBatches> batches, std::unique_ptr<TokenCorpus> valid,
                 const MlmTokenIds& ids, const Config& config, std::unique_ptr<TensorParallelRng> tp_rng)
    : WindowTask(std::move(batches), std::move(valid), config, config.data.seq_len - 2, std::move(tp_rng)),
      model_(std::move(model)),
      ids_(ids),
      seed_(static_cast<uint64_t>(config.run.seed)) {}

TaskBatch MlmTask::train_batch(int64_t step, int64_t first, int64_t count) const {
  return MlmBatch{mask_for_mlm(train_windows(step, first, count).inputs, ids_, seed_, step, first)};
}

TaskBatch MlmTask::eval_batch(int64_t first, int64_t count) const {
  return MlmBatch{mask_for_mlm(eval_windows(first, count).inputs, ids_, seed_, kMlmEvalStep, first)};
}

torch::Tensor MlmTask::loss(const TaskBatch& batch, torch::Device device, double label_smoothing) {
  return stage_forward(batch, device, {}, label_smoothing).front();
}

std::vector<torch::Tensor> MlmTask::stage_forward(const TaskBatch& batch, torch::Device device,
                                                  const std::vector<torch::Tensor>& inputs, double label_smoothing) {
  const MlmMasked& m = batch.as<MlmBatch>().masked;
  const auto& stage = model_->stage();
  const auto selected = m.selected.to(device);
  // Packed windows have no padding; the head runs on the chosen positions only: (N, V or V_r).
  auto out = model_->forward_stage(stage.first ? m.inputs.to(device) : torch::Tensor(),
                                   stage.first ? torch::Tensor() : inputs.at(0), {}, {}, selected);
  if (!stage.last) return {out};
  const auto targets = m.targets.flatten().index_select(0, m.selected).to(device);
  if (!model_->is_training()) {
    Communicator* tp = model_->tp_group();
    const auto logits = tp_size(tp) > 1 ? gather_from_tp_region(out, *tp, model_->config().vocab_size) : out;
    correct_ += static_cast<double>((logits.argmax(-1) == targets).sum().item<int64_t>());
  }
  return {cross_entropy(out, targets, label_smoothing, kIgnoreIndex, model_->tp_group())};
}

std::vector<double> MlmTask::take_eval_metric_sums() {
  const double correct = correct_;
  correct_ = 0;
  return {correct};
}

std::vector<std::vector<int64_t>> MlmTask::stage_output_shapes(const TaskBatch& batch) const {
  const auto& inputs = batch.as<MlmBatch>().masked.inputs;
  return {model_->hidden_shape(inputs.size(0), inputs.size(1))};
}

std::unique_ptr<MlmTask> make_mlm_task(const Config& config, TaskData data, const ModelSource& model) {
  const MlmTokenIds ids = mlm_token_ids(config);
  const int64_t text_len = config.data.seq_len - 2;
  std::unique_ptr<LmBatches> train_batches;
  if (data == TaskData::kSynthetic)
    train_batches = std::make_unique<SyntheticBatches>(static_cast<uint64_t>(config.run.seed), text_len, ids.text_vocab);
  LmData opened = open_lm_data(config, data);
  if (!opened.sources.empty())
    train_batches = std::make_unique<LmMixture>(std::move(opened.sources),
                                                LmSampler(static_cast<uint64_t>(config.run.seed), text_len),
                                                config.train.batch_size);
  TaskModel built = model();
  return std::make_unique<MlmTask>(built.as<Bert>(), std::move(train_batches), std::move(opened.valid), ids, config,
                                   std::move(built.tp_rng));
}

}  // namespace loom
