#include "train/lm_task.h"

#include "core/error.h"
#include "data/corpus/data_files.h"
#include "data/corpus/lm_mixture.h"
#include "data/tokenizers/tokenizer.h"
#include "optim/cross_entropy.h"
#include "optim/linear_cross_entropy.h"
#include "parallel/context_parallel_layout.h"

namespace loom {
static_assert(kIgnoreTarget == kIgnoreIndex, "data/ and optim/ must skip the same target");

namespace {

// data.document_mask: every corpus gives its windows' positions. A token file's documents end at
// tokenizer.model's EOS; a prepared directory has document indexes.
void read_documents(const Config& config, const std::vector<TokenCorpus*>& corpora) {
  if (!config.data.document_mask) return;
  std::optional<int32_t> eos;
  if (!config.tokenizer.model.empty()) eos = load_tokenizer(config.tokenizer)->eos_id();
  for (TokenCorpus* corpus : corpora) {
    try {
      corpus->read_documents(eos);
    } catch (const Error& e) {
      throw ConfigError(config.where("data.document_mask") + ": data.document_mask: " + e.what());
    }
  }
}

// Context parallelism: this rank's part of every sequence of a batch (parallel/context_parallel_layout.h),
// packed documents' positions and loss-masked targets included. Its loss averages over its own targets; the
// Trainer and evaluation sum tokens and losses over dp x cp.
LmBatch context_part(LmBatch batch, const ContextParallelism& cp) {
  if (cp.size() == 1) return batch;
  auto cut = [&cp](const torch::Tensor& t) { return t.defined() ? cp_split(t, 1, cp.size(), cp.rank()) : t; };
  batch.inputs = cut(batch.inputs);
  batch.targets = cut(batch.targets);
  batch.positions = cut(batch.positions);
  batch.ignored_targets = (batch.targets == kIgnoreTarget).sum().item<int64_t>();
  return batch;
}

}  // namespace

LmTask::LmTask(Gpt model, std::unique_ptr<LmBatches> batches, std::unique_ptr<TokenCorpus> valid, const Config& config,
               std::unique_ptr<TensorParallelRng> tp_rng)
    : WindowTask(std::move(batches), std::move(valid), config, config.data.seq_len, std::move(tp_rng)),
      model_(std::move(model)),
      loss_chunk_tokens_(config.train.loss_chunk_tokens) {}

TaskBatch LmTask::train_batch(int64_t step, int64_t first, int64_t count) const {
  return context_part(train_windows(step, first, count), model_->context_parallelism());
}

TaskBatch LmTask::eval_batch(int64_t first, int64_t count) const {
  return context_part(eval_windows(first, count), model_->context_parallelism());
}

torch::Tensor LmTask::loss(const TaskBatch& batch, torch::Device device, double label_smoothing) {
  return stage_forward(batch, device, {}, label_smoothing).front();
}

std::vector<torch::Tensor> LmTask::stage_forward(const TaskBatch& batch, torch::Device device,
                                                 const std::vector<torch::Tensor>& inputs, double label_smoothing) {
  const auto& b = batch.as<LmBatch>();
  const auto& stage = model_->stage();
  const torch::Tensor positions = b.positions.defined() ? b.positions.to(device) : torch::Tensor();  // every stage's
  // The fused head + loss for a whole, unsplit model (under TP its gradients do not yet match the
  // vocabulary-parallel path: tests/e2e/test_tensor_parallel.sh).
  if (stage.first && stage.last && tp_size(model_->tp_group()) <= 1 && loss_chunk_tokens_ > 0) {
    auto hidden = model_->final_hidden(b.inputs.to(device), positions);  // (B, T, C)
    return {linear_cross_entropy(hidden.flatten(0, 1), model_->head_weight(), b.targets.to(device).flatten(),
                                 loss_chunk_tokens_, label_smoothing, kIgnoreIndex, model_->tp_group())};
  }
  // (B, T, V), or this TP rank's vocabulary slice (B, T, V_r), on the last stage; hidden_shape() before it.
  auto out = model_->forward_stage(stage.first ? b.inputs.to(device) : torch::Tensor(),
                                   stage.first ? torch::Tensor() : inputs.at(0), positions);
  if (!stage.last) return {out};
  return {cross_entropy(out.flatten(0, 1), b.targets.to(device).flatten(), label_smoothing, kIgnoreIndex,
                        model_->tp_group())};
}

std::vector<std::vector<int64_t>> LmTask::stage_output_shapes(const TaskBatch& batch) const {
  const auto& b = batch.as<LmBatch>();
  return {model_->hidden_shape(b.inputs.size(0), b.inputs.size(1))};
}

LmData open_lm_data(const Config& config, TaskData data) {
  LmData out;
  if (data == TaskData::kTraining) {
    if (config.data.train.empty())
      throw ConfigError(config.where("data.train") + ": data.train: no training data given (a token file, a "
                        "directory made by loom prepare, or a list of {path, weight})");
    for (const auto& source : config.data.train)
      out.sources.push_back({source.path, source.weight, open_token_corpus(source.path, "data.train", "train", config)});
  }
  out.valid = open_token_corpus(config.data.valid, "data.valid", "valid", config);
  if (data == TaskData::kEvaluation && !out.valid)
    throw ConfigError(config.where("data.valid") + ": data.valid: no evaluation token file (pass --set data.valid=FILE)");
  const auto corpora = out.corpora();
  if (!corpora.empty()) {
    check_tokenizer(config, {corpora.begin(), corpora.end()});
    for (const TokenCorpus* c : corpora) check_vocab(config, c->vocab_size(), c->name());
  }
  return out;
}

std::vector<TokenCorpus*> LmData::corpora() const {
  std::vector<TokenCorpus*> out;
  for (const auto& s : sources) out.push_back(s.corpus.get());
  if (valid) out.push_back(valid.get());
  return out;
}

std::unique_ptr<LmTask> make_lm_task(const Config& config, TaskData data, const ModelSource& model) {
  std::unique_ptr<LmBatches> train_batches;
  if (data == TaskData::kSynthetic)
    train_batches = std::make_unique<SyntheticBatches>(static_cast<uint64_t>(config.run.seed), config.data.seq_len,
                                                       config.model.vocab_size);
  LmData opened = open_lm_data(config, data);
  read_documents(config, opened.corpora());
  if (!opened.sources.empty())
    train_batches = std::make_unique<LmMixture>(
        std::move(opened.sources), LmSampler(static_cast<uint64_t>(config.run.seed), config.data.seq_len),
        config.train.batch_size);
  TaskModel built = model();
  return std::make_unique<LmTask>(built.as<Gpt>(), std::move(train_batches), std::move(opened.valid), config,
                                  std::move(built.tp_rng));
}

}  // namespace loom
