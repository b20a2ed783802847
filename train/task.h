// What the Trainer trains, behind one small interface: a model (a StagedModel, models/model_stage.h, which
// the Trainer asks for its stage's tied parameter and ZeRO-3 units), its batches for (step, first, count),
// and its loss. The Trainer keeps the story of a step (micro-batches, gradient sync, clipping, optimizer,
// checkpoints, metrics) for every task; a task knows only what a batch is and how a model scores it.
//   LmTask (train/lm_task.h):                   the GPT on windows of a token file
//   TranslationTask (train/translation_task.h): the encoder-decoder on Seq2SeqBatch pairs
//   MlmTask (train/mlm_task.h):                 BERT's masked language modelling on windows of token files
//   ClassifyTask (train/classify_task.h):       a BERT sequence classifier on labelled texts
// Which task and model a config means (model.arch) is train/model_family.h's; make_task() below builds
// any of them the one way (seed, TP stream, model, stage dropout).
#pragma once
#include <torch/torch.h>

#include <any>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/config.h"
#include "core/error.h"
#include "models/model_stage.h"
#include "parallel/communicator.h"
#include "parallel/context_parallel_layout.h"
#include "parallel/tensor_parallel_rng.h"

namespace loom {

// One batch of a task's data, of the task's own type (LmBatch, Seq2SeqBatch, ...). Everything outside the
// task (the Trainer, evaluation, the pipeline runner) passes it from the task's train_batch() or
// eval_batch() back to its loss(), weighs the loss by the tokens it averages over (any batch type says
// so with loss_tokens()) and counts for throughput the tokens it holds (tokens()). The two differ where a
// loss mask leaves targets out (SFT's prompts).
class TaskBatch {
 public:
  template <class Batch, class = std::enable_if_t<!std::is_same_v<std::decay_t<Batch>, TaskBatch>>>
  TaskBatch(Batch batch)  // implicit: any batch is one
      : tokens_(batch.tokens()), loss_tokens_(batch.loss_tokens()), batch_(std::move(batch)) {}

  int64_t tokens() const { return tokens_; }
  int64_t loss_tokens() const { return loss_tokens_; }
  template <class Batch>
  const Batch& as() const {
    const Batch* batch = std::any_cast<Batch>(&batch_);
    LOOM_CHECK(batch != nullptr, "a task was handed a batch of another task");
    return *batch;
  }

 private:
  int64_t tokens_;
  int64_t loss_tokens_;
  std::any batch_;
};

// What `loom eval` reports besides the loss, from a model's own outputs over the evaluation set.
struct OutputScores {
  nlohmann::json fields;           // for --json ("exact_match", "bleu", ...)
  std::string summary;             // appended to the text line: " | exact match ..."
  std::vector<std::string> lines;  // the outputs, one per evaluation item in order (--translations FILE)
};

class Task {
 public:
  virtual ~Task() = default;
  virtual StagedModel& model() = 0;

  // Sequences [first, first + count) of the global training batch of `step`, on the CPU.
  virtual TaskBatch train_batch(int64_t step, int64_t first, int64_t count) const = 0;
  // Sequences in the global training batch of `step`: train.batch_size, or as many pairs as fill
  // train.batch_tokens. The Trainer shares them out by data/corpus/batch_slices.h.
  virtual int64_t train_batch_size(int64_t step) const = 0;
  // Sequences [first, first + count) of the fixed evaluation set (wrapping around at its end).
  virtual TaskBatch eval_batch(int64_t first, int64_t count) const = 0;
  virtual bool can_evaluate() const = 0;
  // Sequences in the evaluation set when it is a fixed list (translation pairs), which evaluation then
  // covers at most once; 0: windows of a token stream, taken as train.eval_batches asks.
  virtual int64_t eval_size() const { return 0; }
  // What the evaluation set is, for `loom eval`'s summary line: a file, "pairs", "synthetic reverse pairs".
  virtual std::string eval_data_name() const = 0;
  // Beyond the loss: the quality of the model's own outputs (translations' exact match and BLEU); none for
  // a task whose outputs are not scored.
  virtual std::optional<OutputScores> score_outputs(const Config&) { return std::nullopt; }

  // A mixture of training sources (data/corpus/lm_mixture.h): their names, and per source the tokens of the whole
  // global batch of `step`, for metrics.jsonl's tokens_by_source. Empty: one source.
  virtual std::vector<std::string> source_names() const { return {}; }
  virtual std::vector<int64_t> source_tokens(int64_t) const { return {}; }

  // Evaluation's measures besides the loss (the MLM's "accuracy"): their names, and per name a sum over the
  // loss tokens that the evaluation-mode forwards counted since the last call (which resets them), which
  // evaluation sums over the mesh and divides by the loss tokens (train/evaluate.h). None by default.
  virtual std::vector<std::string> eval_metric_names() const { return {}; }
  virtual std::vector<double> take_eval_metric_sums() { return {}; }

  // Forward pass: the mean loss over the batch's tokens() (a scalar with gradient).
  virtual torch::Tensor loss(const TaskBatch& batch, torch::Device device, double label_smoothing) = 0;

  // The dropout stream of this rank's sharded activations (null without TP); checkpoints keep its state.
  TensorParallelRng* tp_rng() const { return tp_rng_.get(); }

  // Pipeline parallelism (the model is one stage of parallel.pp; train/pipeline_runner.h). This stage's
  // forward of a batch: `inputs` are the previous stage's outputs (empty on the first stage). Returns the
  // mean loss as loss() does (a list of one) on the last stage, else what the next stage takes, of
  // stage_output_shapes(): the GPT's hidden (B, T, C); the encoder-decoder's [source side (B, S, C),
  // target side (B, T, C)]. Shapes follow the batch (pairs vary in B, S and T from batch to batch).
  virtual std::vector<torch::Tensor> stage_forward(const TaskBatch& batch, torch::Device device,
                                                   const std::vector<torch::Tensor>& inputs, double label_smoothing) = 0;
  virtual std::vector<std::vector<int64_t>> stage_output_shapes(const TaskBatch& batch) const = 0;

 protected:
  std::unique_ptr<TensorParallelRng> tp_rng_;
};

// Which data a task opens: training (data.train required, data.valid if given), evaluation only, or
// synthetic training data and no files (`loom bench`, after its family's use_synthetic_data).
enum class TaskData { kTraining, kEvaluation, kSynthetic };

// A task's model and the TP dropout stream it was built with (null without TP).
struct TaskModel {
  std::shared_ptr<StagedModel> module;
  std::unique_ptr<TensorParallelRng> tp_rng;
  // The model as its family's holder (Gpt, EncoderDecoder): its family built it, or loaded it
  // (train/inference.h).
  template <class Holder>
  Holder as() const {
    Holder model(std::dynamic_pointer_cast<typename Holder::ContainedType>(module));
    LOOM_CHECK(model, "a task was handed a model of another family");
    return model;
  }
};
// Where a task's model comes from, asked once the task has opened its data and checked that
// model.vocab_size covers it.
using ModelSource = std::function<TaskModel()>;

// The task of config.model.arch with its data opened (model.vocab_size resolved before: train/run_plan.h,
// planned_vocab_size; the data must fit it). Its model is `trained` (a loaded one), or else built afresh on `device` the one way for every family: from
// torch::manual_seed(run.seed), so every rank draws the whole model's weights alike, split over the TP group
// `tp` (null: whole; with parallel.sequence_parallel) with its own dropout stream, as pipeline stage
// `pp_stage` of parallel.pp, its sequences split over `cp`'s group (none: whole; the task then cuts each
// batch to this rank's part); its dropout then draws from the seed of its stage and CP rank (seed_dropout).
std::unique_ptr<Task> make_task(const Config& config, torch::Device device, TaskData data,
                                std::shared_ptr<StagedModel> trained = nullptr, Communicator* tp = nullptr,
                                int64_t pp_stage = 0, const ContextParallelism& cp = {});

// The TP dropout stream of this rank of `tp` in pipeline stage `pp_stage` and CP rank `cp_rank`, seeded
// from run.seed, the TP rank, the stage and the CP rank (TensorParallelRng::stream_seed); null for no TP.
std::unique_ptr<TensorParallelRng> make_tp_rng(const Config& config, const Communicator* tp, int64_t pp_stage = 0,
                                               int64_t cp_rank = 0);

// After a stage's model is built (every rank drew the whole model's weights from run.seed), the default
// generator that its dropout draws from: stage 0 of CP rank 0 keeps its stream (a run without stages or
// CP is unchanged); stage s and CP rank c restart it from run.seed + 100 s + 1000003 c (the strides of
// TensorParallelRng::stream_seed), as Megatron's seed does for stages, so stages holding blocks of the same
// shape do not drop the same units, and CP ranks holding other positions of the same sequences do not drop
// alike either.
void seed_dropout(const Config& config, int64_t pp_stage, int64_t cp_rank = 0);

}  // namespace loom
