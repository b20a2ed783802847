#include "models/estimates.h"

#include <algorithm>

#include "core/family_rules.h"
#include "parallel/sharding.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/ring_attention.h"

namespace loom {

namespace {

// The parameter counts of a model's parts: a block of models/block.h, a decoder block of a model with an
// encoder (its cross-attention and that one's norm more), and the ends (BERT's: a token-type table and an
// embedding norm on the first stage, its MLM head's dense layer, norm and output bias, or its classifier's
// pooler and classifier, on the last).
// An MoE block (model.moe) is a block whose MLP is the router, the experts and the shared MLP: moe_block, of
// which expert is one routed expert's part.
struct Parts {
  int64_t norm, attention, block, decoder_block, head, position_table, embedding, embedding_extras, head_extras;
  int64_t moe_block = 0, expert = 0;
  int64_t relative_tables;  // T5's relative attention bias tables, on the first stage
};

// MoE blocks among global blocks [first, end) of the GPT.
int64_t moe_blocks_in(const ModelConfig& c, int64_t first, int64_t end) {
  int64_t n = 0;
  for (int64_t i = first; i < end; ++i) n += c.moe.layer_is_moe(i) ? 1 : 0;
  return n;
}
Parts parts_of(const ModelConfig& c, const ModelShape& shape) {
  const int64_t C = c.d_model, F = c.ffn_dim(), Q = c.n_heads * c.head_dim(), KV = c.kv_heads() * c.head_dim();
  auto linear = [&](int64_t in, int64_t out) { return in * out + (c.bias ? out : 0); };
  Parts p;
  p.norm = c.norm == NormKind::kLayerNorm ? 2 * C : C;
  p.attention = linear(C, Q + 2 * KV) + linear(Q, C) + (c.qk_norm ? 2 * c.head_dim() : 0);
  const int64_t mlp = (c.gated_mlp() ? 2 : 1) * linear(C, F) + linear(F, C);
  p.block = 2 * p.norm + p.attention + mlp;
  if (c.moe.enabled()) {
    // models/moe.h: no biases in the router, the experts or the shared MLP.
    const int64_t mats = c.gated_mlp() ? 3 : 2;
    p.expert = mats * C * c.expert_dim();
    const int64_t shared = c.moe.shared_experts > 0 ? mats * C * c.shared_expert_dim() + (c.moe.shared_gate ? C : 0) : 0;
    p.moe_block = 2 * p.norm + p.attention + C * c.moe.num_experts + c.moe.num_experts * p.expert + shared;
  }
  p.decoder_block = shape.cross_attention ? p.block + p.norm + p.attention : p.block;
  p.head = c.tie_embeddings || shape.classifier_labels > 0 ? 0 : c.vocab_size * C;  // the untied head has no bias
  p.position_table = c.position == PositionKind::kLearned ? c.max_seq_len * C : 0;
  p.embedding = c.vocab_size * C;
  p.embedding_extras = shape.token_types * C + (shape.embedding_norm ? p.norm : 0);
  p.relative_tables = c.position == PositionKind::kRelative ? shape.relative_bias_tables * c.relative_buckets * c.n_heads : 0;
  const int64_t N = shape.classifier_labels;
  p.head_extras = shape.mlm_head ? C * C + C + p.norm + c.vocab_size : N > 0 ? C * C + C + C * N + N : 0;
  return p;
}

// Parameters one TP rank of pipeline stage `stage` holds: 1/tp of the stage's, but the MoE blocks' routers and
// experts whole (tensor parallelism does not split them: every rank of the group holds them).
int64_t sharding_params_per_tp_rank(const Config& config, int64_t stage) {
  const ModelConfig& m = config.model;
  const int64_t tp = config.parallel.tp;
  int64_t params = (count_stage_parameters(config, stage) + tp - 1) / tp;
  if (tp > 1 && m.moe.enabled()) {
    const Parts parts = parts_of(m, model_shape(m));
    const BlockRange range = stage_blocks(stage_layers(model_shape(m).pipeline_layers(), config.parallel.pp,
                                                       config.parallel.pp_layers), stage);
    const int64_t replicated = moe_blocks_in(m, range.first, range.end) * (parts.moe_block - 2 * parts.norm - parts.attention);
    params += replicated - replicated / tp;
  }
  return params;
}

// ZeRO-3's units per TP rank of pipeline stage `stage` (models/model_stage.h ends_and_block_units): its
// blocks, and its ends: every other parameter the stage holds.
UnitSizes unit_sizes(const Config& config, int64_t stage) {
  const int64_t tp = config.parallel.tp;
  auto per_rank = [tp](int64_t n) { return (n + tp - 1) / tp; };
  const ModelShape shape = model_shape(config.model);
  const Parts p = parts_of(config.model, shape);
  const int64_t encoder_block = per_rank(p.block);
  const int64_t decoder_block = per_rank(p.decoder_block);
  const StageBlockCounts counts = stage_block_counts(config, stage);
  // An MoE block per TP rank: its attention and norms split, its router and experts whole (replicated).
  const int64_t moe_mlp = p.moe_block - 2 * p.norm - p.attention;
  const int64_t moe_block = per_rank(p.moe_block - moe_mlp) + moe_mlp;
  UnitSizes out;
  out.count = counts.encoder + counts.decoder;
  out.largest = counts.decoder > 0 ? decoder_block : encoder_block;
  if (config.model.moe.enabled()) out.largest = std::max(out.largest, moe_block);
  out.blocks = counts.encoder * encoder_block + counts.decoder * decoder_block;
  if (config.model.moe.enabled()) {
    const BlockRange range =
        stage_blocks(stage_layers(shape.pipeline_layers(), config.parallel.pp, config.parallel.pp_layers), stage);
    out.blocks += moe_blocks_in(config.model, range.first, range.end) * (moe_block - decoder_block);
  }
  out.ends = std::max<int64_t>(0, sharding_params_per_tp_rank(config, stage) - out.blocks);
  if (const int64_t ep = config.parallel.ep; ep > 1 && config.model.moe.enabled()) {
    // parallel.ep: an MoE block's unit holds (and gathers over the expert shard group) E / ep of its experts.
    const int64_t not_held = (config.model.moe.num_experts - config.model.moe.num_experts / ep) * p.expert;
    out.largest = std::max(counts.decoder > 0 ? decoder_block : encoder_block, moe_block - not_held);
    out.blocks -= counts.moe * not_held;
  }
  out.head = stage == config.parallel.pp - 1 ? per_rank(p.head) : 0;
  if (config.parallel.reshard_after_forward && !shape.ends_kept)
    out.ends_uses = (stage == 0 ? 1 : 0) + (stage == config.parallel.pp - 1 ? 1 : 0);
  return out;
}

// Micro-batches whose forward is done and backward is not on pipeline stage `stage`, at most: all of them
// under GPipe, min(m, pp - stage) under 1F1B.
int64_t micro_batches_in_flight(const Config& config, int64_t stage) {
  const int64_t pp = config.parallel.pp, micro = config.accumulation_steps(std::max<int64_t>(1, config.parallel.dp));
  if (pp == 1) return 1;
  return config.parallel.pp_schedule == PipelineSchedule::kGPipe ? micro : std::min(micro, pp - stage);
}

// What the sharding strategy's estimates take for one rank of pipeline stage `stage`: the stage's parameters
// per TP rank, ZeRO's shard group (dp x cp, hybrid sharding: shard_size x cp) and replicas, the buckets.
ShardingSizes sharding_sizes(const Config& config, int64_t stage) {
  const ModelConfig& m = config.model;
  const int64_t tp = config.parallel.tp, pp = config.parallel.pp, cp = config.parallel.cp;
  const int64_t dp = std::max<int64_t>(1, config.parallel.dp);  // -1 (world / (cp * tp * pp)) is unknown here
  ShardingSizes out;
  out.params = sharding_params_per_tp_rank(config, stage);
  out.shards = config.parallel.zero_shard_dp(dp) * cp;
  out.replicas = dp * cp / out.shards;
  out.micro_batches = config.accumulation_steps(dp);
  out.in_flight = micro_batches_in_flight(config, stage);
  out.bf16_params = config.precision.param_dtype == ParamDtype::kBf16;
  out.bf16_autocast = config.precision.dtype == Dtype::kBf16;
  out.bucket_params = static_cast<int64_t>(config.parallel.bucket_mb * 1024 * 1024) / (out.bf16_params ? 2 : 4);
  const bool holds_tied_copy = pp > 1 && m.tie_embeddings && (stage == 0 || stage == pp - 1);
  out.deferred = holds_tied_copy ? (parts_of(m, model_shape(m)).embedding + tp - 1) / tp : 0;
  if (config.parallel.zero == ZeroStage::kParameters) out.units = unit_sizes(config, stage);
  out.reshard_after_forward = config.parallel.reshard_after_forward;
  if (const int64_t ep = config.parallel.ep; ep > 1 && m.moe.enabled()) {
    // parallel.ep: a rank holds E / ep of each MoE block of its stage's experts, whole on every TP rank (TP
    // does not split them), sharded over dp x cp / ep ranks under ZeRO.
    const int64_t not_held = stage_block_counts(config, stage).moe * (m.moe.num_experts - m.moe.num_experts / ep) *
                             parts_of(m, model_shape(m)).expert;
    out.sharded_params = out.params;
    out.params -= not_held;
  }
  return out;
}

}  // namespace

int64_t count_parameters(const ModelConfig& c) {
  const ModelShape s = model_shape(c);
  const Parts p = parts_of(c, s);
  // One token embedding, a position table per embedded sequence, the blocks, a final norm per stack (pre-norm).
  const int64_t stacks = (s.encoder_layers > 0 ? 1 : 0) + (s.decoder_layers > 0 ? 1 : 0);
  return p.embedding + p.embedding_extras + p.relative_tables + s.position_tables * p.position_table +
         s.encoder_layers * p.block + s.decoder_layers * p.decoder_block +
         moe_blocks_in(c, 0, c.n_layers) * (p.moe_block - p.block) + (s.final_norms ? stacks * p.norm : 0) + p.head +
         p.head_extras;
}

int64_t count_active_parameters(const ModelConfig& c) {
  if (!c.moe.enabled()) return count_parameters(c);
  const Parts p = parts_of(c, model_shape(c));
  return count_parameters(c) - moe_blocks_in(c, 0, c.n_layers) * (c.moe.num_experts - c.moe.top_k) * p.expert;
}

StageBlockCounts stage_block_counts(const Config& config, int64_t stage) {
  const ModelShape shape = model_shape(config.model);
  const BlockRange range =
      stage_blocks(stage_layers(shape.pipeline_layers(), config.parallel.pp, config.parallel.pp_layers), stage);
  const int64_t encoder = shape.encoder_layers;
  const int64_t in_encoder = std::max<int64_t>(0, std::min(range.end, encoder) - range.first);
  const int64_t moe = config.model.moe.enabled() ? moe_blocks_in(config.model, range.first, range.end) : 0;
  return {in_encoder, range.end - range.first - in_encoder, in_encoder > 0 && range.end >= encoder, moe};
}

int64_t count_stage_parameters(const Config& config, int64_t stage) {
  const ModelConfig& c = config.model;
  if (config.parallel.pp == 1) return count_parameters(c);
  const ModelShape s = model_shape(c);
  const Parts p = parts_of(c, s);
  const auto blocks = stage_block_counts(config, stage);
  const bool first = stage == 0, last = stage == config.parallel.pp - 1;
  // The last stage: the final norm and head, or its own copy of the tied embedding; the stage ending the
  // encoder, the encoder's final norm.
  const int64_t head = c.tie_embeddings ? p.embedding : p.head;
  int64_t n = blocks.encoder * p.block + blocks.decoder * p.decoder_block;
  if (c.moe.enabled()) {
    const BlockRange range = stage_blocks(stage_layers(s.pipeline_layers(), config.parallel.pp, config.parallel.pp_layers), stage);
    n += moe_blocks_in(c, range.first, range.end) * (p.moe_block - p.block);
  }
  if (first) n += p.embedding + p.embedding_extras + p.relative_tables + s.position_tables * p.position_table;
  if (s.final_norms && blocks.ends_encoder) n += p.norm;
  if (last) n += (s.final_norms ? p.norm : 0) + head + p.head_extras;
  return n;
}

double training_flops_per_token(const ModelConfig& c, int64_t seq_len) {
  const double C = static_cast<double>(c.d_model), F = static_cast<double>(c.ffn_dim());
  const double Q = static_cast<double>(c.n_heads * c.head_dim()), KV = static_cast<double>(c.kv_heads() * c.head_dim());
  const double attention = C * (Q + 2 * KV) + Q * C;
  const double per_layer = attention + (c.gated_mlp() ? 3.0 : 2.0) * C * F;
  const int64_t keys = c.attention_window > 0 ? std::min(seq_len, c.attention_window) : seq_len;
  // With an encoder: per target token together with one source token (source and target both seq_len long),
  // the decoder blocks' cross-attentions an attention more each.
  const ModelShape s = model_shape(c);
  const double layers = static_cast<double>(s.pipeline_layers());
  const double cross = s.cross_attention ? static_cast<double>(s.decoder_layers) : 0.0;
  const double head = s.classifier_labels > 0 ? 0.0 : static_cast<double>(c.vocab_size) * C;  // a classifier: none
  double matmul_weights = layers * per_layer + cross * attention + head;
  if (c.moe.enabled()) {
    // An MoE block's token multiplies the router, its top_k experts and the shared MLP instead of the MLP.
    const double mats = c.gated_mlp() ? 3.0 : 2.0;
    const double moe_mlp = C * static_cast<double>(c.moe.num_experts) +
                           mats * C * static_cast<double>(c.moe.top_k * c.expert_dim()) +
                           (c.moe.shared_experts > 0 ? mats * C * static_cast<double>(c.shared_expert_dim()) : 0.0);
    matmul_weights += static_cast<double>(moe_blocks_in(c, 0, c.n_layers)) * (moe_mlp - (c.gated_mlp() ? 3.0 : 2.0) * C * F);
  }
  return 6.0 * matmul_weights + 12.0 * (layers + cross) * Q * static_cast<double>(keys);
}

// Activations follow Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
// Models"), no recomputation, no sequence parallelism: per layer, in elements of e bytes (2 for bf16, 4
// for fp32) with s = seq_len, b = micro-batch, h = d_model, q = n_heads * head_dim, kv = n_kv_heads *
// head_dim, f = d_ff, a = n_heads, t = tp:
//   kept whole on every TP rank: the inputs of QKV and of the MLP: 2sbh, and the inputs of the two norms:
//     2sbh in fp32 (4 bytes each) whatever e is: the residual stream stays fp32 under bf16 autocast, which
//     also runs the norms in fp32 (the paper counts them in 16 bits)
//   split over TP: q, k, v and the output projection's input: sb(2q + 2kv); RoPE's unrotated and
//     rotated q and k: 2sb(q + kv); MLP: GELU keeps its input and output (2sbf), ReLU its output (sbf),
//     a gated MLP the gate, act(gate), up and their product (4sbf); of the softmax, what the kernel SDPA
//     picks keeps: its flash kernels (CUDA's; the CPU's, which take masks and grouped-query heads but not
//     dropout) and loom's blocked CPU kernel keep each query's fp32 log-sum-exp, 4asb; its math path (the
//     CPU with dropout) the probabilities a s^2 b (measured, llama-tiny fp32 at s = 4096 without dropout:
//     358 MiB of activations against 2.4 GiB when the scores were counted). Masks a kernel keeps (sliding
//     windows, packed documents, ALiBi's bias) are not counted.
//   with dropout, 1-byte masks: 2sbh (residual branches), and on the math path a s^2 b / t masks and the
//     dropped probabilities (e each)
// For GPT-2 (f = 4h, q = kv = h, bf16, dropout) this is the paper's sbh(10 + 24/t + 5as/(ht)) bytes plus
// the fp32 norm inputs' extra 4sbh: sbh(14 + 24/t + 5as/(ht)).
// With sequence parallelism (ParallelConfig::sequence_parallel_active()) what was kept whole is kept for s/t
// positions per rank, the residual dropout masks and the final norm's input too: sbh(34/t + 5as/(ht)).
// Plus the head: the final norm's input (4 sbh, / t under sequence parallelism), the LM head's input
// (e sbh, gathered whole under sequence parallelism) and the logits: on one rank the loss's fp32
// log-probabilities 4sbV, and at the peak, its backward, 8sbV more (see `loss_backward`); under TP the loss
// over vocabulary shards (optim/cross_entropy.cpp) keeps fp32 shifted logits and their exp (8), and its
// backward, the peak of the last stage, adds their fp32 gradient (4) and under bf16 its bf16 copy for the
// head's matmul (2), sbV/t each (measured, TP2xPP2 1F1B, the last stage: bench-gpt 160.3 MiB fp32 and 165.6
// bf16 in tensors against 161.2 and 165.7 estimated); or, where the GPT's head and loss run fused in chunks
// of c tokens (train.loss_chunk_tokens, one process per stage and no TP), instead of the logits: one chunk's fp32
// logits and their gradient in e bytes ((4 + e) cV) and the gradients computed in forward, of the head's
// input (4sbh) and weight (4Vh). (That is ATen's softmax steps; loom's CPU row kernels keep only the e-byte
// logits, overwritten by their gradient, so on an AVX-512 CPU this is high by 4cV: 32 MiB at bench-gpt's chunk.)
// Activation checkpointing splits a layer into its attention half (the ln1 input 4sbh, QKV input, residual
// dropout mask, q k v, scores, output projection input) and its MLP half (the ln2 input 4sbh, MLP input,
// dropout mask, MLP tensors), and an encoder-decoder's decoder block has a cross-attention sub-layer between
// them. `full` keeps each block's fp32 input 4sbh and recomputes one sub-layer at a time in backward:
// max(attention half without its input, cross-attention sub-layer, MLP half) more. `selective` keeps the
// attention half (and the cross-attention) and the MLP half's input, and recomputes one MLP half (without
// that input).
// Context parallelism (parallel.cp): every per-position term counts s/cp positions, the rank's part of a
// sequence; ring attention keeps no scores for backward, only each query's fp32 log-sum-exp (4asb/t), and
// while one layer runs holds its working set (see `ring` below) on top; ZeRO shards over dp x cp (hybrid
// sharding: over parallel.shard_size x cp).
// Weights, gradients and optimizer state are the stage's parameter count / tp (the optimizer state also
// / dp with ZeRO-1), ignoring replicated norms and biases. A pipeline stage holds its own blocks'
// activations for every micro-batch in flight: all m of them under GPipe, min(m, pp - stage) under 1F1B;
// the last stage the head's too. Its sends (pipeline_sends): a micro-batch's
// fp32 output (all but the last stage) and input gradient (all but the first), 4sbh (/ t under sequence
// parallelism) each (bf16 parameters: bf16, 2sbh), live until the neighbour receives them, which it does
// as it reaches that micro-batch: as many of them as micro-batches in flight (measured: PP=2, 64
// micro-batches, sends would be 32 MiB if all were kept; the measured peak matched the in-flight count).
MemoryEstimate estimate_memory(const Config& config, int64_t stage) {
  const ModelConfig& m = config.model;
  const ModelShape shape = model_shape(m);
  const int64_t tp = config.parallel.tp, pp = config.parallel.pp, cp = config.parallel.cp;
  const int64_t dp = std::max<int64_t>(1, config.parallel.dp);  // -1 (world / (cp * tp * pp)) is unknown here
  const bool bf16 = config.precision.dtype == Dtype::kBf16;
  const int64_t in_flight = micro_batches_in_flight(config, stage);
  // Weights, gradients, optimizer state and ZeRO-3's gathered units: as the sharding strategy holds them.
  const ShardingMemory held = sharding_strategy(config.parallel.zero).memory(sharding_sizes(config, stage));
  MemoryEstimate out;
  out.weights = held.weights;
  out.gathered = held.gathered;
  out.gradients = held.gradients;
  out.optimizer = held.optimizer;
  const bool bf16_params = config.precision.param_dtype == ParamDtype::kBf16;

  const double e = bf16 ? 2 : 4;
  const double s = static_cast<double>(config.data.seq_len / cp);  // this rank's positions of a sequence
  const double b = static_cast<double>(config.micro_batch_size(dp));
  const double h = static_cast<double>(m.d_model), f = static_cast<double>(m.ffn_dim());
  const double q = static_cast<double>(m.n_heads * m.head_dim()), kv = static_cast<double>(m.kv_heads() * m.head_dim());
  const double a = static_cast<double>(m.n_heads), t = static_cast<double>(tp);
  const double dropout = m.dropout > 0 ? 1 : 0;
  const double rope = m.position == PositionKind::kRope ? 1 : 0;
  const double mlp_tensors = m.gated_mlp() ? 4 : m.activation == Activation::kRelu ? 1 : 2;
  const double V = static_cast<double>(m.vocab_size);
  const double sequence = config.parallel.sequence_parallel_active() ? t : 1;
  const double half_whole = ((4 + e) + dropout) * s * b * h / sequence;  // norm input, its output, mask
  // What attention keeps of its scores: SDPA's math path (CPU, dropout) a s^2 b with its mask and the dropped
  // probabilities; a flash kernel, loom's blocked kernel and ring attention the log-sum-exp of each query.
  const bool math_path = dropout > 0 && config.runtime.device == DeviceKind::kCpu && cp == 1;
  const double scores = math_path ? a * s * s * b * (e + 1 + e) : 4 * a * s * b;
  const double attention_half = half_whole + (e * s * b * (2 * q + 2 * kv + rope * 2 * (q + kv)) + scores) / t;
  // Ring attention's working set while one layer's backward runs: fp32 queries, their output's gradient and
  // the queries' gradient (3 s b q), the key/value block held and the one arriving and their gradients
  // (4 x 2 s b kv), and one tile's fp32 probabilities and their gradients: a chunk's s/2 queries against
  // ring_key_tile keys; with dropout also the tile's fp32 dropout scales and one dropped
  // product at a time, probabilities or their gradient (parallel/attention_dropout.h; llama-tiny at 4K tokens
  // and cp 2, scripts/bench_context_parallel.sh: peak 18 MiB above the run without dropout, 12 estimated).
  const double key_tile = static_cast<double>(ring_key_tile(0, config.data.seq_len / cp / 2));
  const double tile_bytes = 3 * 4 + dropout * 2 * 4;
  const double ring = cp > 1 ? 4 * s * b * (3 * q + 8 * kv) / t + tile_bytes * (a / t) * b * (s / 2) * key_tile : 0.0;
  double mlp_half = half_whole + e * s * b * mlp_tensors * f / t;
  if (m.moe.enabled()) {
    // An MoE block (models/moe.h) keeps per token its k experts' MLP tensors (k f_e) and the shared MLP's,
    // the gathered input rows and the experts' outputs (2 k h), and the fp32 router logits and probabilities
    // (8 E); under sequence parallelism also the sequence it gathers (replicate_sequence: e s b h, whole);
    // every block is counted as the larger of the two kinds.
    const double routed = static_cast<double>(m.moe.top_k * m.expert_dim() +
                                              (m.moe.shared_experts > 0 ? m.shared_expert_dim() : 0));
    const double gathered = sequence > 1 ? e * s * b * h : 0.0;
    const double moe_half = half_whole + gathered +
                            e * s * b * (mlp_tensors * routed + 2.0 * static_cast<double>(m.moe.top_k) * h) +
                            8.0 * s * b * static_cast<double>(m.moe.num_experts);
    mlp_half = std::max(mlp_half, moe_half);
  }
  const double layer = attention_half + mlp_half;
  const double block_input = 4 * s * b * h / sequence;
  // With an encoder: source and target both seq_len long. A decoder block's cross-attention sub-layer
  // keeps what an attention half keeps (its norm's input and output, dropout mask; q, the memory's k and v,
  // the output projection's input, scores) and the k/v projection's input: a copy of the memory per block
  // (its bf16 cast under autocast, its gathered positions under sequence parallelism); in fp32 without
  // sequence parallelism that is the memory itself, shared by the blocks and counted once (`memory`).
  const bool memory_copied = bf16 || sequence > 1;
  const double cross = shape.cross_attention ? half_whole + (memory_copied ? e * s * b * h / sequence : 0.0) +
                                                  (e * s * b * (2 * q + 2 * kv) + scores) / t
                                            : 0.0;
  // What an encoder and a decoder block keep per micro-batch; with checkpointing, the most one block's
  // recompute holds at once in backward (blocks recompute one at a time; full: one sub-layer at a time).
  double encoder_kept = layer, decoder_kept = layer + cross, recomputed = 0;
  const bool full = config.train.activation_checkpointing == ActivationCheckpointing::kFull;
  if (full) {
    encoder_kept = decoder_kept = block_input;
    recomputed = std::max({attention_half - block_input, mlp_half, cross});
  } else if (config.train.activation_checkpointing == ActivationCheckpointing::kSelective) {
    encoder_kept = attention_half + block_input;
    decoder_kept = encoder_kept + cross;
    recomputed = mlp_half - block_input;
  }
  const bool fused_loss = shape.fused_loss && pp == 1 && tp == 1 && config.train.loss_chunk_tokens > 0;
  // The loss over whole logits on one rank (optim/cross_entropy.h) keeps only the fp32 log-probabilities
  // (4sbV; the logits themselves are not saved), and its backward holds them, their gradient and the logits'
  // fp32 gradient at once: 8sbV more, while every activation is still kept (measured, GPT and
  // encoder-decoder, fp32 and bf16: the peak is 12sbV above the rest). Vocab-parallel (tp > 1): see above.
  const bool whole_logits = !fused_loss && tp == 1;
  const double logits = fused_loss     ? (4 + e) * std::min(static_cast<double>(config.train.loss_chunk_tokens), s * b) * V +
                                             4 * s * b * h + 4 * V * h
                        : whole_logits ? 4 * s * b * V
                                       : s * b * V / t * (8 + 4 + (bf16 ? 2 : 0));
  const double loss_backward = stage == pp - 1 && whole_logits ? 8 * s * b * V : 0.0;
  const double head = 4 * s * b * h / sequence + e * s * b * h + logits;
  const auto blocks = stage_block_counts(config, stage);
  const double stage_head = stage == pp - 1 ? head : 0.0;
  // The memory (the encoder's fp32 output, which every decoder block reads) once, where something keeps it
  // whole: the recomputed decoder blocks, or fp32 k/v projections; and the pre-norm encoder's final norm
  // keeps its input.
  const bool memory_kept = shape.cross_attention && blocks.decoder > 0 && (full || !memory_copied);
  const bool encoder_norm = shape.final_norms && blocks.ends_encoder;
  const double stage_memory = (memory_kept ? block_input : 0.0) + (encoder_norm ? block_input : 0.0);
  out.activations = static_cast<int64_t>(
      static_cast<double>(in_flight) * (static_cast<double>(blocks.encoder) * encoder_kept +
                                        static_cast<double>(blocks.decoder) * decoder_kept + stage_memory + stage_head) +
      // The loss's backward runs before any block recomputes.
      std::max(loss_backward, blocks.encoder + blocks.decoder > 0 ? recomputed : 0.0) + (blocks.decoder > 0 ? ring : 0.0));
  // Sent forward and back, one tensor per micro-batch in flight (the encoder-decoder: two).
  const int64_t directions = pp == 1 ? 0 : (stage < pp - 1) + (stage > 0);
  const double sides = static_cast<double>(shape.stage_outputs);
  // T5's relative biases travel beside the sides: (1, H / tp, s, s) a stack, at most (models/encoder_decoder.h).
  const double biases = m.position == PositionKind::kRelative
                            ? static_cast<double>(shape.relative_bias_tables) * (a / t) * s * s
                            : 0.0;
  out.pipeline_sends = static_cast<int64_t>(static_cast<double>(directions * in_flight) * (bf16_params ? 2 : 4) *
                                            (sides * s * b * h / sequence + biases));
  return out;
}

CommunicationEstimate estimate_communication(const Config& config, int64_t stage) {
  return sharding_strategy(config.parallel.zero).communication(sharding_sizes(config, stage));
}

}  // namespace loom
