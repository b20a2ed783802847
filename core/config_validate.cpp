// Range and cross-key checks of a parsed Config, and those of its model family (FamilyRules::validate,
// core/family_rules.h). Every message names the key, and where it was set. (An enum-like key holds one of its
// values by the time it gets here: its names are checked as it is parsed.)
#include <filesystem>

#include "core/config.h"
#include "core/config_checks.h"
#include "core/error.h"
#include "core/family_rules.h"
#include "core/system.h"

namespace loom {
namespace {

void check_batch_split(ConfigChecks& check, const Config& c, int64_t dp) {
  const int64_t n = c.parallel.microbatches;
  if (n > 0) {
    check.require(c.train.batch_size % (dp * n) == 0, "parallel.microbatches", n, " micro-batches per DP rank do not ",
                  "divide train.batch_size=", c.train.batch_size, " over parallel.dp=", dp);
    check.require(c.train.micro_batch_size == 0 || c.train.micro_batch_size * dp * n == c.train.batch_size,
                  "parallel.microbatches", n, " micro-batches of train.micro_batch_size=", c.train.micro_batch_size,
                  " do not make train.batch_size=", c.train.batch_size, " over parallel.dp=", dp,
                  ": set one of the two (or train.micro_batch_size=0)");
    return;
  }
  const int64_t micro = c.micro_batch_size(dp);
  check.require(micro > 0 && c.train.batch_size % (micro * dp) == 0, "train.batch_size", c.train.batch_size,
                " must be a multiple of train.micro_batch_size * parallel.dp = ", micro, " * ", dp);
}

// parallel.cp > 1: what ring attention (parallel/ring_attention.h) and the sequence layout
// (parallel/context_parallel_layout.h) need; the rest is refused rather than run some other way.
void check_context_parallel(ConfigChecks& check, const Config& c) {
  const int64_t cp = c.parallel.cp;
  check.require(c.data.seq_len % (2 * cp) == 0, "data.seq_len", c.data.seq_len, " must be a multiple of 2 * parallel.cp = ",
                2 * cp, " (each sequence is cut into 2 * cp equal chunks, two per context-parallel rank)");
  if (c.parallel.sequence_parallel_active() && c.data.seq_len % (2 * cp) == 0)
    check.require((c.data.seq_len / cp) % c.parallel.tp == 0, "data.seq_len", c.data.seq_len, " / parallel.cp=", cp,
                  " must be a multiple of parallel.tp=", c.parallel.tp,
                  " with parallel.sequence_parallel (each tensor-parallel rank keeps 1/tp of a context-parallel rank's positions)");
}

// Every key that sizes a resource (threads, memory, time) has a bound, so that no value, however it was
// mistyped, can exhaust the machine: the bounds sit far above any real run and far below what would hurt.
// What a model's weights and a batch's activations need in memory is checked against the memory there is
// when a run starts (train/memory_check.h).
constexpr int64_t kMaxSequences = int64_t{1} << 24;  // per batch, micro-batch or evaluation
constexpr int64_t kMaxTokens = int64_t{1} << 30;     // per batch or loss chunk
constexpr double kMaxBucketMb = 64 * 1024.0;
constexpr double kMaxTimeoutS = 7 * 24 * 3600.0;
constexpr int64_t kMaxBeamHypotheses = int64_t{1} << 16;  // decode.beam * decode.batch_size in flight

void check_resource_bounds(ConfigChecks& check, const Config& c) {
  const auto at_most = [&](const char* key, auto value, auto limit, const char* what) {
    check.require(value <= limit, key, value, " is beyond loom's limit of ", limit, " ", what);
  };
  const int64_t cores = usable_cpu_cores();
  check.require(c.runtime.threads <= cores, "runtime.threads", c.runtime.threads, " exceeds the ", cores,
                " CPU cores this process can use (0: all of them, shared among the node's ranks)");
  const auto& t = c.train;
  at_most("train.batch_size", t.batch_size, kMaxSequences, "sequences per step");
  at_most("train.micro_batch_size", t.micro_batch_size, kMaxSequences, "sequences per micro-batch");
  at_most("train.batch_tokens", t.batch_tokens, kMaxTokens, "tokens per step");
  at_most("train.loss_chunk_tokens", t.loss_chunk_tokens, kMaxTokens, "tokens per chunk");
  at_most("train.eval_batches", t.eval_batches, kMaxSequences, "batches per evaluation");
  at_most("parallel.microbatches", c.parallel.microbatches, kMaxSequences, "micro-batches per step");
  at_most("parallel.bucket_mb", c.parallel.bucket_mb, kMaxBucketMb, "MB per gradient bucket");
  at_most("parallel.timeout_s", c.parallel.timeout_s, kMaxTimeoutS, "seconds (a week)");
  at_most("data.synthetic_valid_size", c.data.synthetic_valid_size, kMaxSequences, "pairs");
  at_most("data.pad_to_multiple", c.data.pad_to_multiple, c.model.max_seq_len, "(model.max_seq_len)");
  at_most("decode.max_len_a", c.decode.max_len_a, 1024.0, "(translations are cut at model.max_seq_len anyway)");
  at_most("decode.max_len_b", c.decode.max_len_b, kMaxTokens, "tokens (translations are cut at model.max_seq_len anyway)");
  if (c.decode.beam >= 1 && c.decode.batch_size >= 1)
    check.require(c.decode.beam * c.decode.batch_size <= kMaxBeamHypotheses, "decode.beam", c.decode.beam,
                  " hypotheses for each of decode.batch_size=", c.decode.batch_size, " sentences are beyond loom's limit of ",
                  kMaxBeamHypotheses, " in flight: lower either");
}

// model.moe.*: sizes and coefficients, and the layouts the MoE blocks do not support yet.
void validate_moe(const Config& c, ConfigChecks& check) {
  const MoeConfig& e = c.model.moe;
  check.require(e.num_experts >= 0, "model.moe.num_experts", e.num_experts, " must be >= 0 (0: dense)");
  if (!e.enabled()) return;
  check.require(c.model.arch == ModelArch::kGpt, "model.moe.num_experts",
                "Mixture of Experts applies to model.arch=gpt only, not ", enum_name(c.model.arch));
  check.require(e.num_experts <= 65536, "model.moe.num_experts", e.num_experts, " is beyond what loom builds");
  check.require(e.top_k >= 1 && e.top_k <= e.num_experts, "model.moe.top_k", e.top_k,
                " must be in [1, model.moe.num_experts=", e.num_experts, "]");
  check.require(e.every >= 1, "model.moe.every", e.every, " must be >= 1");
  check.require(e.first_dense >= 0 && e.first_dense < c.model.n_layers, "model.moe.first_dense", e.first_dense,
                " must be in [0, model.n_layers=", c.model.n_layers, ") (at least one MoE block)");
  check.require(e.d_ff >= 0, "model.moe.d_ff", e.d_ff, " must be >= 0 (0: model.d_ff)");
  check.require(e.shared_experts >= 0, "model.moe.shared_experts", e.shared_experts, " must be >= 0");
  check.require(e.shared_d_ff >= 0, "model.moe.shared_d_ff", e.shared_d_ff, " must be >= 0");
  check.require(e.shared_d_ff == 0 || e.shared_experts > 0, "model.moe.shared_d_ff",
                "sizes the shared experts: set model.moe.shared_experts >= 1 too");
  check.require(!e.normalize || e.router != MoeRouter::kTopkSoftmax, "model.moe.normalize",
                "topk_softmax's weights already sum to 1: applies to routers softmax_topk and sigmoid");
  check.require(e.aux_loss_coef >= 0, "model.moe.aux_loss_coef", e.aux_loss_coef, " must be >= 0");
  check.require(e.z_loss_coef >= 0, "model.moe.z_loss_coef", e.z_loss_coef, " must be >= 0");
  check.require(e.bias_update_rate >= 0, "model.moe.bias_update_rate", e.bias_update_rate, " must be >= 0");
  check.require(e.capacity_factor >= 0, "model.moe.capacity_factor", e.capacity_factor, " must be >= 0 (0: dropless)");
}

// parallel.ep: a split of the ranks of dp x cp and of every MoE layer's experts (with any tp, pp, cp and ZeRO stage).
void validate_expert_parallel(const Config& c, ConfigChecks& check) {
  const ParallelConfig& p = c.parallel;
  check.require(p.ep >= 1, "parallel.ep", p.ep, " must be >= 1");
  if (p.ep <= 1) return;
  const MoeConfig& e = c.model.moe;
  check.require(e.enabled(), "parallel.ep", p.ep, " splits the experts of a Mixture-of-Experts model, but model.moe.num_experts "
                "is 0 (a dense model): set parallel.ep 1, or model.moe.num_experts");
  if (!e.enabled()) return;
  check.require(e.num_experts % p.ep == 0, "parallel.ep", p.ep, " does not divide model.moe.num_experts=", e.num_experts,
                ": each rank of an ep group keeps num_experts / ep experts");
  // Megatron's folding (parallel/mesh.h): an ep group is ep consecutive ranks of dp x cp, cp innermost, so it
  // holds whole cp groups and ep / cp DP ranks, or lies inside one cp group.
  if (p.cp >= 1 && p.ep % p.cp != 0 && p.cp % p.ep != 0) {
    check.require(false, "parallel.ep", p.ep, " with parallel.cp=", p.cp, ": an ep group is ep consecutive ranks of "
                  "dp x cp (cp innermost), so ep must be a multiple of parallel.cp (each group whole cp groups) or "
                  "divide it (each group inside one cp group)");
    return;
  }
  const int64_t ep_dp = p.cp >= 1 && p.ep % p.cp == 0 ? p.ep / p.cp : 1;  // the DP ranks of an ep group
  if (p.dp >= 1)
    check.require(p.dp % ep_dp == 0, "parallel.ep", p.ep, " does not divide parallel.dp x parallel.cp=", p.dp, " x ",
                  p.cp, ": the ep groups are carved from the ranks of dp x cp");
  if (p.shard_size > 0)
    check.require(p.shard_size % ep_dp == 0, "parallel.ep", p.ep, " / parallel.cp=", ep_dp,
                  " does not divide parallel.shard_size=", p.shard_size,
                  ": each ep group lies inside one ZeRO shard group (its DP ranks inside shard_size)");
}

}  // namespace

void validate_batch_split(const Config& c, int64_t dp) {
  ConfigChecks check(c);
  check_batch_split(check, c, dp);
  check.finish();
}

void validate(const Config& c) {
  ConfigChecks check(c);
  const auto& m = c.model;
  check.require(!c.run.dir.empty(), "run.dir", "must not be empty");
  check.require(c.run.seed >= 0, "run.seed", c.run.seed, " must be >= 0");

  check.require(m.n_encoder_layers >= 0, "model.n_encoder_layers", m.n_encoder_layers, " must be >= 0 (0: n_layers)");
  family_rules(m.arch).validate(c, check);
  const auto& d = c.data;
  check.require(d.pad_to_multiple >= 1, "data.pad_to_multiple", d.pad_to_multiple, " must be >= 1");
  if (d.synthetic != SyntheticTask::kNone) {
    check.require(d.train.size() <= 1, "data.train", "data.synthetic makes its own pairs: a mixture of data.train "
                  "files would not be read; drop data.synthetic to train on them");
    check.require(d.synthetic_vocab > 3, "data.synthetic_vocab", d.synthetic_vocab, " must be > 3 (ids 0-2 are reserved)");
    check.require(d.synthetic_min_len >= 1, "data.synthetic_min_len", d.synthetic_min_len, " must be >= 1");
    check.require(d.synthetic_max_len >= d.synthetic_min_len, "data.synthetic_max_len", d.synthetic_max_len,
                  " must be >= data.synthetic_min_len=", d.synthetic_min_len);
    check.require(d.synthetic_max_len + 1 <= m.max_seq_len, "data.synthetic_max_len", d.synthetic_max_len,
                  " + 1 (bos or eos) exceeds model.max_seq_len=", m.max_seq_len);
    check.require(d.synthetic_valid_size > 0, "data.synthetic_valid_size", d.synthetic_valid_size, " must be > 0");
    check.require(c.train.batch_tokens == 0, "train.batch_tokens", "synthetic pairs come train.batch_size per step: "
                  "leave it 0");
    check.require(m.vocab_size == 0 || m.vocab_size >= d.synthetic_vocab, "model.vocab_size", m.vocab_size,
                  " is smaller than data.synthetic_vocab=", d.synthetic_vocab);
  }
  for (size_t i = 0; i < d.train.size(); ++i) {
    check.require(!d.train[i].path.empty(), "data.train", "source ", i, " has an empty path");
    check.require(d.train[i].weight > 0, "data.train", "source ", i, " (", d.train[i].path, ") has weight ",
                  d.train[i].weight, ": weights must be > 0");
    for (size_t j = 0; j < i; ++j)
      check.require(d.train[j].path != d.train[i].path, "data.train", "sources ", j, " and ", i, " are both ",
                    d.train[i].path, ": list it once, with the sum of the weights");
  }
  const auto& dec = c.decode;
  check.require(dec.beam >= 1, "decode.beam", dec.beam, " must be >= 1 (1: greedy)");
  check.require(dec.length_penalty >= 0, "decode.length_penalty", dec.length_penalty, " must be >= 0");
  check.require(dec.max_len_a >= 0, "decode.max_len_a", dec.max_len_a, " must be >= 0");
  check.require(dec.max_len_b >= 1, "decode.max_len_b", dec.max_len_b, " must be >= 1");
  check.require(dec.batch_size >= 1, "decode.batch_size", dec.batch_size, " must be >= 1");
  check.require(m.vocab_size >= 0, "model.vocab_size", m.vocab_size, " must be >= 0 (0: the tokenizer's)");
  check.require(m.d_model > 0, "model.d_model", m.d_model, " must be > 0");
  check.require(m.n_layers > 0, "model.n_layers", m.n_layers, " must be > 0");
  check.require(m.n_heads > 0, "model.n_heads", m.n_heads, " must be > 0");
  check.require(m.head_size >= 0, "model.head_dim", m.head_size, " must be >= 0 (0: d_model / n_heads)");
  if (m.n_heads > 0 && m.d_model > 0 && m.head_size == 0)
    check.require(m.d_model % m.n_heads == 0, "model.n_heads", m.n_heads, " does not divide model.d_model=", m.d_model);
  check.require(!m.qk_norm || c.parallel.tp == 1, "model.qk_norm", "with parallel.tp > 1 is not supported yet (the "
                "gains' gradients would need a sum over the TP group): set parallel.tp 1");
  check.require(m.n_kv_heads >= 0, "model.n_kv_heads", m.n_kv_heads, " must be >= 0 (0: n_heads)");
  if (m.n_kv_heads > 0 && m.n_heads > 0)
    check.require(m.n_heads % m.n_kv_heads == 0, "model.n_kv_heads", m.n_kv_heads,
                  " does not divide model.n_heads=", m.n_heads, " (each key/value head serves a whole group of query heads)");
  check.require(m.d_ff >= 0, "model.d_ff", m.d_ff, " must be >= 0 (0: 4 * d_model)");
  check.require(m.norm_eps > 0, "model.norm_eps", m.norm_eps, " must be > 0");
  if (m.position == PositionKind::kRope && m.n_heads > 0 && m.head_dim() > 0)
    check.require(m.head_dim() % 2 == 0, "model.position", "rope needs an even head size, got ",
                  m.head_dim());
  if (m.position == PositionKind::kSinusoidal)
    check.require(m.d_model % 2 == 0, "model.position", "sinusoidal needs an even d_model, got ", m.d_model);
  check.require(m.rope_theta > 0, "model.rope_theta", m.rope_theta, " must be > 0");
  check.require(m.rope_scaling_factor >= 1, "model.rope_scaling_factor", m.rope_scaling_factor, " must be >= 1");
  check.require(m.rope_scaling == RopeScaling::kNone || m.position == PositionKind::kRope, "model.rope_scaling",
                "applies to model.position=rope only, not ", enum_name(m.position));
  if (m.position == PositionKind::kRelative) {
    check.require(m.relative_buckets >= 4 && m.relative_buckets % 2 == 0, "model.relative_buckets", m.relative_buckets,
                  " must be an even number >= 4 (the encoder's bias takes half for each direction, each half an exact "
                  "and a logarithmic part)");
    check.require(m.relative_max_distance > m.relative_buckets / 2, "model.relative_max_distance",
                  m.relative_max_distance, " must exceed model.relative_buckets / 2 = ", m.relative_buckets / 2,
                  " (the exact buckets of the causal bias)");
  }
  check.require(!m.scale_head || m.tie_embeddings, "model.scale_head",
                "scales the decoder's output before a tied head: it needs model.tie_embeddings=true");
  check.require(m.attention_window >= 0, "model.attention_window", m.attention_window,
                " must be >= 0 (0: full attention)");
  check.require(m.max_seq_len > 0, "model.max_seq_len", m.max_seq_len, " must be > 0");
  check.require(m.dropout >= 0 && m.dropout < 1, "model.dropout", m.dropout, " must be in [0, 1)");
  check.require(m.init_std > 0, "model.init_std", m.init_std, " must be > 0");
  // A directory (a Hugging Face model's: its model.safetensors) has no extension.
  const auto init_extension = std::filesystem::path(m.init_from).extension();
  check.require(m.init_from.empty() || init_extension == ".safetensors" || init_extension.empty(), "model.init_from",
                "'", m.init_from, "' is not a .safetensors file");
  const std::pair<const char*, int64_t> sizes[] = {
      {"model.vocab_size", m.vocab_size}, {"model.d_model", m.d_model},         {"model.n_layers", m.n_layers},
      {"model.n_encoder_layers", m.n_encoder_layers},
      {"model.d_ff", m.d_ff},             {"model.max_seq_len", m.max_seq_len}, {"model.n_kv_heads", m.n_kv_heads},
      {"model.attention_window", m.attention_window}, {"model.num_labels", m.num_labels}};
  for (const auto& [key, size] : sizes)
    check.require(size <= (int64_t{1} << 24), key, size, " is beyond what loom builds (at most 2^24)");

  validate_moe(c, check);
  validate_expert_parallel(c, check);

  check.require(c.data.seq_len > 0, "data.seq_len", c.data.seq_len, " must be > 0");
  check.require(c.data.seq_len <= m.max_seq_len, "data.seq_len", c.data.seq_len,
                " exceeds model.max_seq_len=", m.max_seq_len);

  const auto& o = c.optim;
  check.require(o.lr > 0, "optim.lr", o.lr, " must be > 0");
  check.require(o.betas.size() == 2, "optim.betas", "expected two values [beta1, beta2], got ", o.betas.size());
  for (double b : o.betas) check.require(b >= 0 && b < 1, "optim.betas", b, " must be in [0, 1)");
  check.require(o.eps > 0, "optim.eps", o.eps, " must be > 0");
  check.require(o.weight_decay >= 0, "optim.weight_decay", o.weight_decay, " must be >= 0");
  check.require(o.grad_clip >= 0, "optim.grad_clip", o.grad_clip, " must be >= 0 (0 disables clipping)");
  check.require(o.label_smoothing >= 0 && o.label_smoothing < 1, "optim.label_smoothing", o.label_smoothing,
                " must be in [0, 1)");

  const auto& s = c.schedule;
  check.require(s.warmup_steps >= 0, "schedule.warmup_steps", s.warmup_steps, " must be >= 0");
  check.require(s.name != ScheduleKind::kInverseSqrt || s.warmup_steps > 0, "schedule.warmup_steps",
                "inverse_sqrt needs warmup_steps > 0");
  check.require(s.min_lr >= 0 && s.min_lr <= o.lr, "schedule.min_lr", s.min_lr, " must be in [0, optim.lr=", o.lr, "]");
  check.require(s.total_steps >= 0, "schedule.total_steps", s.total_steps, " must be >= 0 (0: train.max_steps)");
  check.require(s.decay_fraction > 0 && s.decay_fraction <= 1, "schedule.decay_fraction", s.decay_fraction,
                " must be in (0, 1]");

  const auto& t = c.train;
  const auto& p = c.parallel;
  check.require(t.max_steps > 0, "train.max_steps", t.max_steps, " must be > 0");
  check.require(t.batch_size > 0, "train.batch_size", t.batch_size, " must be > 0");
  check.require(t.batch_tokens >= 0, "train.batch_tokens", t.batch_tokens, " must be >= 0 (0: off)");
  check.require(t.micro_batch_size >= 0, "train.micro_batch_size", t.micro_batch_size, " must be >= 0");
  check.require(t.log_every > 0, "train.log_every", t.log_every, " must be > 0");
  check.require(t.eval_every >= 0, "train.eval_every", t.eval_every, " must be >= 0");
  check.require(t.eval_batches >= 0, "train.eval_batches", t.eval_batches, " must be >= 0");
  check.require(t.max_bad_steps >= 0, "train.max_bad_steps", t.max_bad_steps, " must be >= 0 (0: never stop)");
  check.require(t.loss_chunk_tokens >= 0, "train.loss_chunk_tokens", t.loss_chunk_tokens, " must be >= 0 (0: unfused)");
  check.require(p.dp >= 1 || p.dp == -1, "parallel.dp", p.dp, " must be >= 1, or -1 for world / (cp * tp * pp)");
  check.require(p.tp >= 1, "parallel.tp", p.tp, " must be >= 1");
  check.require(p.cp >= 1, "parallel.cp", p.cp, " must be >= 1");
  if (p.cp > 1) check_context_parallel(check, c);
  check.require(p.pp >= 1, "parallel.pp", p.pp, " must be >= 1");
  check.require(p.bucket_mb > 0, "parallel.bucket_mb", p.bucket_mb, " must be > 0");
  check.require(p.timeout_s > 0, "parallel.timeout_s", p.timeout_s, " must be > 0");
  check.require(p.shard_size >= 0, "parallel.shard_size", p.shard_size, " must be >= 0 (0: shard over the whole DP group)");
  if (p.shard_size > 0) {
    check.require(p.zero != ZeroStage::kNone, "parallel.shard_size", p.shard_size, " shards ZeRO's state, but parallel.zero is 0: "
                  "set parallel.zero 1, 2 or 3, or parallel.shard_size 0");
    if (p.dp >= 1)
      check.require(p.dp % p.shard_size == 0, "parallel.shard_size", p.shard_size, " does not divide parallel.dp=",
                    p.dp, ": the DP ranks split into groups of shard_size");
  }
  if (p.tp >= 1 && m.n_heads > 0)
    check.require(m.n_heads % p.tp == 0, "parallel.tp", p.tp, " does not divide model.n_heads=", m.n_heads);
  if (p.tp >= 1 && m.n_kv_heads > 0)
    check.require(m.n_kv_heads % p.tp == 0, "parallel.tp", p.tp, " does not divide model.n_kv_heads=", m.n_kv_heads);
  const std::string& pipeline_blocks = family_rules(m.arch).pipeline_keys;
  if (p.pp >= 1 && m.n_layers > 0)
    check.require(p.pp <= m.pipeline_layers(), "parallel.pp", p.pp, " exceeds ", pipeline_blocks, "=",
                  m.pipeline_layers());
  check.require(p.microbatches >= 0, "parallel.microbatches", p.microbatches, " must be >= 0 (0: train.micro_batch_size)");
  if (!p.pp_layers.empty()) {
    int64_t sum = 0, smallest = p.pp_layers[0];
    for (int64_t n : p.pp_layers) {
      sum += n;
      smallest = std::min(smallest, n);
    }
    check.require(static_cast<int64_t>(p.pp_layers.size()) == p.pp, "parallel.pp_layers", "lists ",
                  p.pp_layers.size(), " stages but parallel.pp is ", p.pp, ": give one block count per stage");
    check.require(smallest >= 1, "parallel.pp_layers", "every stage needs at least one block (got ", smallest, ")");
    check.require(sum == m.pipeline_layers(), "parallel.pp_layers", "the stages hold ", sum, " blocks but ",
                  pipeline_blocks, " is ", m.pipeline_layers(), ": the counts must add up to it",
                  model_shape(m).encoder_layers > 0 ? " (encoder blocks first, then decoder blocks)" : "");
  }
  if (p.dp >= 1 && t.batch_size > 0 && t.micro_batch_size >= 0) check_batch_split(check, c, p.dp);

  const auto& pr = c.precision;
  check.require(pr.param_dtype != ParamDtype::kBf16 || pr.dtype == Dtype::kBf16, "precision.param_dtype",
                "bf16 weights need precision.dtype=bf16 (autocast keeps softmax, norms and the loss in fp32), not '",
                enum_name(pr.dtype), "': set precision.dtype=bf16 or precision.param_dtype=fp32");
  check.require(pr.loss_scale_init > 0, "precision.loss_scale_init", pr.loss_scale_init, " must be > 0");
  check.require(pr.loss_scale_growth_interval >= 1, "precision.loss_scale_growth_interval",
                pr.loss_scale_growth_interval, " must be >= 1");
  check.require(pr.loss_scale_growth >= 1, "precision.loss_scale_growth", pr.loss_scale_growth, " must be >= 1");
  check.require(pr.loss_scale_backoff > 0 && pr.loss_scale_backoff < 1, "precision.loss_scale_backoff",
                pr.loss_scale_backoff, " must be in (0, 1)");
  check.require(c.checkpoint.every >= 0, "checkpoint.every", c.checkpoint.every, " must be >= 0");
  check.require(c.checkpoint.keep >= 1, "checkpoint.keep", c.checkpoint.keep, " must be >= 1");
  check.require(c.runtime.threads >= 0, "runtime.threads", c.runtime.threads, " must be >= 0 (0: all cores)");
  check_resource_bounds(check, c);
  const TokenizerConfig& tk = c.tokenizer;
  for (const auto& [text, id] : tk.special_tokens.ids) {
    check.require(!text.empty(), "tokenizer.special_tokens", "a special token's text is empty");
    check.require(id >= 0 && id <= 0x7fffffff, "tokenizer.special_tokens", "'", text, "': id ", id,
                  " must be in [0, 2^31)");
  }
  check.finish();
}

}  // namespace loom
