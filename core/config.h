// The run configuration: typed structs parsed once from YAML (+ `--set key.path=value` overrides) and
// validated. Only core/config* reads YAML; everything else takes these structs. Every key, its default
// and its meaning is declared once, in visit_fields() (config_fields.h), which drives parsing, dumping,
// overrides and the config reference (docs/config.md) alike.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/config_enums.h"

namespace loom {

struct RunConfig {
  std::string dir = "runs/default";
  int64_t seed = 1234;
};

// Mixture of Experts in the decoder (model.moe.*; models/moe.h): which blocks route their tokens to experts
// instead of one MLP, and how.
struct MoeConfig {
  int64_t num_experts = 0;  // 0: every block dense
  int64_t top_k = 2;
  int64_t every = 1;        // an MoE MLP in every Nth block (after first_dense)
  int64_t first_dense = 0;  // the first blocks keep a dense MLP
  int64_t d_ff = 0;         // each expert's inner size; 0: model.d_ff
  int64_t shared_experts = 0;
  int64_t shared_d_ff = 0;  // the shared expert's inner size; 0: shared_experts * the expert size
  bool shared_gate = true;  // the shared expert's output scaled by sigmoid(x . w) (Qwen2-MoE)
  MoeRouter router = MoeRouter::kTopkSoftmax;
  bool normalize = false;   // softmax_topk and sigmoid: the top-k weights divided by their sum
  double aux_loss_coef = 0.0;
  double z_loss_coef = 0.0;
  double bias_update_rate = 0.0;  // aux-loss-free balancing; 0: no expert bias
  double capacity_factor = 0.0;   // 0: dropless

  bool enabled() const { return num_experts > 0; }
  // Whether global block `layer` (0-based) is an MoE block.
  bool layer_is_moe(int64_t layer) const {
    return enabled() && layer >= first_dense && (layer - first_dense) % every == 0;
  }
};

struct ModelConfig {
  ModelArch arch = ModelArch::kGpt;
  int64_t vocab_size = 0;  // 0: taken from the tokenizer
  int64_t d_model = 256;
  int64_t n_layers = 4;          // transformer: decoder layers
  int64_t n_encoder_layers = 0;  // transformer: 0 means n_layers
  int64_t n_heads = 4;
  int64_t n_kv_heads = 0;  // 0: n_heads
  int64_t d_ff = 0;        // 0: 4 * d_model
  int64_t head_size = 0;   // model.head_dim; 0: d_model / n_heads
  bool qk_norm = false;    // RMSNorm over each query and key head (Qwen3)
  int64_t max_seq_len = 256;
  NormKind norm = NormKind::kLayerNorm;
  NormPosition norm_position = NormPosition::kPre;  // post: transformer and bert only
  double norm_eps = 1e-5;
  PositionKind position = PositionKind::kLearned;
  int64_t relative_buckets = 32;        // position relative (T5): buckets of the relative attention bias
  int64_t relative_max_distance = 128;  // ... the distance from which all fall in the last bucket
  double rope_theta = 10000.0;
  RopeScaling rope_scaling = RopeScaling::kNone;
  double rope_scaling_factor = 1.0;
  Activation activation = Activation::kGelu;
  bool bias = true;
  int64_t attention_window = 0;  // 0: full causal attention
  double dropout = 0.1;
  bool tie_embeddings = true;
  bool scale_embeddings = false;  // token embeddings * sqrt(d_model)
  bool scale_attention = true;    // scores q.k / sqrt(head_dim); false: q.k (T5)
  bool scale_head = false;        // the decoder's output * d_model^-0.5 before a tied head (T5)
  double init_std = 0.02;
  std::string init_from;  // safetensors weights a fresh run starts from; empty: random init
  int64_t num_labels = 0;  // bert: 0 pretrains the MLM head; >= 2 a sequence classifier over that many labels
  MoeConfig moe;

  int64_t ffn_dim() const { return d_ff > 0 ? d_ff : 4 * d_model; }
  int64_t expert_dim() const { return moe.d_ff > 0 ? moe.d_ff : ffn_dim(); }
  int64_t shared_expert_dim() const { return moe.shared_d_ff > 0 ? moe.shared_d_ff : moe.shared_experts * expert_dim(); }
  int64_t kv_heads() const { return n_kv_heads > 0 ? n_kv_heads : n_heads; }
  int64_t head_dim() const { return head_size > 0 ? head_size : d_model / n_heads; }
  bool gated_mlp() const { return activation == Activation::kSwiglu || activation == Activation::kGeglu; }
  int64_t encoder_layers() const { return n_encoder_layers > 0 ? n_encoder_layers : n_layers; }
  // The blocks a pipeline (parallel.pp, parallel.pp_layers) splits into stages: its family's model's
  // (core/family_rules.h ModelShape), the encoder's before the decoder's.
  int64_t pipeline_layers() const;
};

// One source of training data: a prepared directory (`loom prepare`) or a token file, and its weight in
// a mixture (the share of training sequences drawn from it is weight / the sum of the weights).
struct DataSource {
  std::string path;
  double weight = 1.0;
};
// nlohmann::json's hook (found by ADL; a template, so config.h needs no JSON header): {"path", "weight"}.
template <class Json>
void to_json(Json& j, const DataSource& s) {
  j = Json{{"path", s.path}, {"weight", s.weight}};
}

struct DataConfig {
  std::vector<DataSource> train;  // YAML: a path, or a list of {path, weight}; empty: none
  std::string valid;
  std::string test;
  int64_t seq_len = 128;
  // Packed documents: attention stays inside each document of a window and positions restart there.
  bool document_mask = false;
  bool whole_word_masking = false;  // bert: MLM chooses whole words
  // Synthetic source -> target pairs for the encoder-decoder (data/pairs/synthetic_pairs.h) instead of files.
  SyntheticTask synthetic = SyntheticTask::kNone;
  int64_t synthetic_vocab = 32;
  int64_t synthetic_min_len = 1;
  int64_t synthetic_max_len = 16;
  int64_t synthetic_valid_size = 512;
  // Pair batches: source and target lengths padded up to a multiple of this (lcm with parallel.tp under
  // sequence parallelism).
  int64_t pad_to_multiple = 1;
  // model.arch transformer: T5's span corruption of token windows instead of pairs (data/pairs/span_corruption.h).
  bool span_corruption = false;
  double noise_density = 0.15;
  double mean_noise_span = 3.0;
};

// tokenizer.special_tokens: a named preset (`gpt2`, `cl100k_base`, `o200k_base`, `llama3`) or text -> id;
// both empty: the preset of tokenizer.pattern when that is a name.
struct SpecialTokensSetting {
  std::string preset;
  std::map<std::string, int64_t> ids;
  bool empty() const { return preset.empty() && ids.empty(); }
};

struct TokenizerConfig {
  std::string model;          // a SentencePiece .model, a Hugging Face tokenizer.json or a .tiktoken rank file
  TokenizerType type = TokenizerType::kAuto;
  std::string pattern;        // tiktoken: the split regex, or a name (data/tokenizers/tokenizer_presets.h)
  SpecialTokensSetting special_tokens;  // tiktoken only
};

struct OptimConfig {
  double lr = 3e-4;
  std::vector<double> betas = {0.9, 0.95};
  double eps = 1e-8;
  double weight_decay = 0.1;
  double grad_clip = 1.0;
  double label_smoothing = 0.0;
};

struct ScheduleConfig {
  ScheduleKind name = ScheduleKind::kWarmupCosine;
  int64_t warmup_steps = 100;
  double min_lr = 0.0;
  int64_t total_steps = 0;  // 0: train.max_steps
  double decay_fraction = 0.2;
};

struct TrainConfig {
  int64_t max_steps = 1000;
  int64_t batch_size = 32;
  int64_t batch_tokens = 0;      // encoder-decoder runs: padded tokens per global batch; 0 off
  int64_t micro_batch_size = 0;  // 0: batch_size / dp
  int64_t log_every = 10;
  int64_t eval_every = 100;
  int64_t eval_batches = 20;
  ActivationCheckpointing activation_checkpointing = ActivationCheckpointing::kNone;
  int64_t max_bad_steps = 10;  // non-finite steps in a row that stop the run; 0: never
  int64_t loss_chunk_tokens = 1024;  // fused LM head + cross-entropy chunk; 0: plain logits
};

// Decoding for translation (loom translate, loom eval of a translation run).
struct DecodeConfig {
  int64_t beam = 5;  // 1: greedy
  double length_penalty = 1.0;
  double max_len_a = 1.5;
  int64_t max_len_b = 10;
  int64_t batch_size = 32;
};

struct PrecisionConfig {
  Dtype dtype = Dtype::kFp32;
  ParamDtype param_dtype = ParamDtype::kFp32;  // bf16: pure bf16 weights over an fp32 master copy; dtype bf16 only
  // fp16 dynamic loss scaling (optim/loss_scaler.h)
  double loss_scale_init = 65536.0;
  int64_t loss_scale_growth_interval = 2000;
  double loss_scale_growth = 2.0;
  double loss_scale_backoff = 0.5;

  // How logs and reports name it: "bf16", or "bf16 (bf16 weights, fp32 master)" with param_dtype bf16.
  std::string label() const;
};

// The rule, written once: sequence parallelism applies when it is asked for and there is more than one
// tensor-parallel rank to split the positions over (with one rank it would split nothing).
inline bool sequence_parallel_applies(bool asked, int64_t tp_size) { return asked && tp_size > 1; }

struct ParallelConfig {
  int64_t dp = 1;  // -1: world / (cp * tp * pp)
  int64_t tp = 1;
  int64_t cp = 1;  // context parallelism: each rank holds 1/cp of every sequence (ring attention)
  int64_t pp = 1;
  int64_t ep = 1;  // expert parallelism: each rank of an ep group (carved from dp) keeps 1/ep of the experts
  std::vector<int64_t> pp_layers;  // blocks per pipeline stage; empty: balanced
  int64_t microbatches = 0;        // pipeline micro-batches per step; 0: train.micro_batch_size decides
  PipelineSchedule pp_schedule = PipelineSchedule::k1F1B;
  double bucket_mb = 25.0;
  double timeout_s = 300.0;
  ZeroStage zero = ZeroStage::kNone;
  int64_t shard_size = 0;  // hybrid sharding: ZeRO shards over groups of this many DP ranks; 0: the whole DP group
  bool reshard_after_forward = true;  // zero 3: free a unit's gathered parameters after its forward
  bool sequence_parallel = false;  // asked for; it applies only with tp > 1: see sequence_parallel_active()

  // Sequence parallelism is on for this layout (sequence_parallel_applies): what the checks, padding and
  // estimates made before a model exists read; a built model reads its TensorParallelism.
  bool sequence_parallel_active() const { return sequence_parallel_applies(sequence_parallel, tp); }
  // The DP ranks ZeRO shards over (times cp: the shard group) at data-parallel size dp: shard_size of them
  // under hybrid sharding, else all dp.
  int64_t zero_shard_dp(int64_t dp) const { return shard_size > 0 && shard_size < dp ? shard_size : dp; }
  // One process holding the whole model, whatever layout trained it (loom eval, generate, export, serve: a
  // checkpoint's tensors are joined by name when it loads): every size 1, balanced stages, no hybrid groups.
  void set_one_process() {
    dp = tp = cp = pp = ep = 1;
    pp_layers.clear();
    shard_size = 0;
  }
};

struct CheckpointConfig {
  int64_t every = 100;
  int64_t keep = 3;
};

struct RuntimeConfig {
  int64_t threads = 0;  // 0: all cores of this rank
  DeviceKind device = DeviceKind::kCpu;
  CpuAllocatorKind cpu_allocator = CpuAllocatorKind::kCaching;
  bool deterministic = false;
};

struct Config {
  RunConfig run;
  ModelConfig model;
  DataConfig data;
  TokenizerConfig tokenizer;
  OptimConfig optim;
  ScheduleConfig schedule;
  TrainConfig train;
  DecodeConfig decode;
  PrecisionConfig precision;
  ParallelConfig parallel;
  CheckpointConfig checkpoint;
  RuntimeConfig runtime;

  // Where each key that was set came from ("configs/x.yaml:12" or "--set"), for error messages; a key
  // left at its default is "configs/x.yaml (default)".
  std::map<std::string, std::string> origin;
  std::string source;  // the config file's name
  std::string where(const std::string& key_path) const;

  int64_t micro_batch_size(int64_t dp) const;
  int64_t accumulation_steps(int64_t dp) const;
  // What the encoder-decoder's pair batches are padded to a multiple of: data.pad_to_multiple, lcm with
  // parallel.tp under sequence parallelism (each TP rank keeps 1/tp of the positions). 1 for invalid values.
  int64_t sequence_pad_multiple() const;
  int64_t schedule_total_steps() const;
};

// Parses YAML text (name is used in messages) and applies overrides ("a.b=value"), then validates.
// Throws ConfigError naming file:line (or the --set) and the key path.
Config parse_config(const std::string& yaml_text, const std::string& name,
                    const std::vector<std::string>& overrides = {});
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});

// Checks ranges and cross-key constraints; parse_config calls it. Throws ConfigError.
void validate(const Config& config);

// The global batch splits into micro-batches on `dp` ranks (for parallel.dp = -1, once dp is known).
void validate_batch_split(const Config& config, int64_t dp);

// The resolved config as YAML, every key present: what RUN_DIR/config.yaml holds.
std::string to_yaml(const Config& config);

// The value of one key as YAML text ("runs/gpt-kjv", "0.001", "[0.9, 0.95]"); throws ConfigError if unknown.
std::string config_value_text(const Config& config, const std::string& key_path);

// Markdown table of every key, its default and its meaning (docs/config.md).
std::string config_reference_markdown();

}  // namespace loom
