#include "models/encoder_decoder.h"

#include <cmath>

#include "core/error.h"
#include "models/gpt.h"

namespace loom {

torch::Tensor padding_mask(const torch::Tensor& lengths, int64_t S) {
  return torch::arange(S, lengths.options().dtype(torch::kLong)).unsqueeze(0) >= lengths.unsqueeze(1);
}

void DecoderState::select(const torch::Tensor& rows) {
  memory = memory.index_select(0, rows);
  source_padding = source_padding.index_select(0, rows);
  self.select(rows);
  for (auto& keys : cross) keys.select(rows);
}

EncoderDecoderImpl::EncoderDecoderImpl(const ModelConfig& config, const TensorParallelism& tp, const ModelStage& stage)
    : config_(config),
      tp_(tp),
      stage_(stage),
      position_(config.position),
      embedding_scale_(config.scale_embeddings ? std::sqrt(static_cast<double>(config.d_model)) : 1.0),
      head_scale_(config.scale_head ? 1.0 / std::sqrt(static_cast<double>(config.d_model)) : 1.0) {
  LOOM_CHECK(config.vocab_size > 0, "model.vocab_size must be known before the model is built");
  const int64_t encoder_layers = config.encoder_layers();
  StageBuilder build(*this, stage_, config.pipeline_layers(), "model.n_encoder_layers + model.n_layers");
  ends_encoder_ = build.holds_block(encoder_layers - 1);
  const int64_t C = config.d_model;
  BlockOptions encoder_block = block_options(config, tp_);
  encoder_block.post_norm = config.norm_position == NormPosition::kPost;
  encoder_block.attention.causal = false;
  BlockOptions decoder_block = encoder_block;
  decoder_block.attention.causal = true;
  decoder_block.cross_attention = true;

  // The whole model's parts in order, each drawing its initial weights (the same draws as
  // torch::nn::Embedding's and Linear's: a TP layout starts from the single model); this stage keeps its own.
  ends_.build_embedding(build, config, tp_);
  torch::nn::Embedding encoder_positions{nullptr}, decoder_positions{nullptr};
  if (position_ == PositionKind::kLearned) {
    encoder_positions = torch::nn::Embedding(config.max_seq_len, C);
    decoder_positions = torch::nn::Embedding(config.max_seq_len, C);
    encoder_positions_ = build.keep("encoder_positions", encoder_positions, stage_.first);
    decoder_positions_ = build.keep("decoder_positions", decoder_positions, stage_.first);
  }
  if (position_ == PositionKind::kRelative) {
    RelativePositionBiasOptions relative;
    relative.buckets = config.relative_buckets;
    relative.max_distance = config.relative_max_distance;
    relative.n_heads = config.n_heads;
    relative.init_std = config.init_std;
    relative.tp = tp_;
    relative.bidirectional = true;
    RelativePositionBias encoder_bias(relative);
    relative.bidirectional = false;
    RelativePositionBias decoder_bias(relative);
    encoder_bias_ = build.keep("encoder_relative_bias", encoder_bias, stage_.first);
    decoder_bias_ = build.keep("decoder_relative_bias", decoder_bias, stage_.first);
  }
  dropout_ = register_module("dropout", torch::nn::Dropout(config.dropout));
  encoder_ = build.blocks<Block>("encoder", 0, encoder_layers, encoder_block);
  decoder_ = build.blocks<Block>("decoder", encoder_layers, config.n_layers, decoder_block);
  std::vector<Block> blocks = encoder_;  // in forward order
  blocks.insert(blocks.end(), decoder_.begin(), decoder_.end());
  runner().set_blocks(std::move(blocks));
  if (!encoder_block.post_norm) {
    if (ends_encoder_) encoder_norm_ = register_module("encoder_norm", Norm(encoder_block.norm));
    if (stage_.last) decoder_norm_ = register_module("decoder_norm", Norm(encoder_block.norm));
  }
  ends_.build_head(build, config, tp_);

  torch::NoGradGuard no_grad;
  // Scaled embeddings start at unit variance after the scaling (as fairseq), so that they and the
  // positions are of one size; the tied head then gives logits of unit variance too. A scaled head (T5's
  // d_model^-0.5) starts from unit-variance embeddings, as T5 initializes them, for logits of unit variance.
  ends_.init_embedding(config.scale_embeddings ? 1.0 / embedding_scale_ : config.scale_head ? 1.0 : config.init_std);
  for (auto& table : {encoder_positions, decoder_positions})
    if (table) torch::nn::init::normal_(table->weight, 0.0, config.init_std);
}

std::vector<torch::Tensor> EncoderDecoderImpl::forward_stage(const torch::Tensor& source,
                                                             const torch::Tensor& source_padding,
                                                             const torch::Tensor& target_inputs,
                                                             const std::vector<torch::Tensor>& inputs) {
  const bool relative = position_ == PositionKind::kRelative;
  const size_t takes = stage_.first ? 0 : 2 + (relative ? 1 + (takes_encoder_bias() ? 1 : 0) : 0);
  TORCH_CHECK(inputs.size() == takes, "pipeline stage of blocks from ", stage_.first_block, " takes ", takes,
              " tensors (source side, target side and relative biases), not ", inputs.size());
  runner().keep_ends();  // ZeRO-3's ends: embedding, positions, final norms, head
  // x: (B, S, C): the encoder's hidden states, from the stage ending the encoder on the memory;
  // y: (B, T, C): the embedded target, then the decoder's hidden states.
  auto x = stage_.first ? embed(source, 0, Side::kSource) : inputs[0];
  auto y = stage_.first ? embed(target_inputs, 0, Side::kTarget) : inputs[1];
  // Relative positions: both stacks' biases, computed on the first stage, then passed on.
  torch::Tensor encoder_position_bias, decoder_position_bias;
  if (relative && stage_.first) {
    encoder_position_bias = encoder_bias(source.size(1));
    decoder_position_bias = decoder_bias(0, target_inputs.size(1));
  } else if (relative) {
    size_t k = 2;
    if (takes_encoder_bias()) encoder_position_bias = inputs[k++];
    decoder_position_bias = inputs[k];
  }
  BlockInputs encoder_inputs;
  encoder_inputs.padding = source_padding;
  encoder_inputs.position_bias = encoder_position_bias;
  x = run_encoder_blocks(x, encoder_inputs);
  if (ends_encoder_ && encoder_norm_) x = encoder_norm_->forward(x);
  BlockInputs decoder_inputs;
  decoder_inputs.memory = x;
  decoder_inputs.memory_padding = source_padding;
  decoder_inputs.position_bias = decoder_position_bias;
  y = run_decoder_blocks(y, decoder_inputs, nullptr);
  if (stage_.last) return {head(y)};
  std::vector<torch::Tensor> out = {x, y};
  if (relative && passes_encoder_bias()) out.push_back(encoder_position_bias);
  if (relative) out.push_back(decoder_position_bias);
  return out;
}

bool EncoderDecoderImpl::takes_encoder_bias() const { return !stage_.first && !encoder_.empty(); }
bool EncoderDecoderImpl::passes_encoder_bias() const { return !encoder_.empty() && !ends_encoder_; }

torch::Tensor EncoderDecoderImpl::encoder_bias(int64_t S) {
  return encoder_bias_ ? encoder_bias_->forward(0, S, 0, S) : torch::Tensor();
}

torch::Tensor EncoderDecoderImpl::decoder_bias(int64_t first, int64_t T) {
  return decoder_bias_ ? decoder_bias_->forward(first, T, 0, first + T) : torch::Tensor();
}

std::vector<std::vector<int64_t>> EncoderDecoderImpl::stage_output_shapes(int64_t B, int64_t S, int64_t T) const {
  const int64_t shards = sequence_multiple(), C = config_.d_model;
  TORCH_CHECK(S % shards == 0 && T % shards == 0, "sequence parallelism over ", shards,
              " ranks needs source and target lengths that are multiples of it, not ", S, " and ", T);
  std::vector<std::vector<int64_t>> shapes = {{B, S / shards, C}, {B, T / shards, C}};
  if (position_ == PositionKind::kRelative) {  // the biases of this rank's heads this stage receives
    const int64_t heads = config_.n_heads / tp_.size();
    if (takes_encoder_bias()) shapes.push_back({1, heads, S, S});
    shapes.push_back({1, heads, T, T});
  }
  return shapes;
}

torch::Tensor EncoderDecoderImpl::embed(const torch::Tensor& tokens, int64_t first_position, Side side,
                                        const torch::Tensor& row_first) {
  const int64_t T = tokens.size(1);
  TORCH_CHECK(first_position + T <= config_.max_seq_len, "sequence of ", first_position + T,
              " positions exceeds model.max_seq_len=", config_.max_seq_len);
  // A ragged batch: each row's positions from its own first (B, T); else one range for every row.
  const torch::Tensor at = row_first.defined()
                               ? (row_first.unsqueeze(1) + torch::arange(T, row_first.options())).to(tokens.device())
                               : torch::Tensor();
  auto x = ends_.embed(tokens);  // (B, T, C)
  if (embedding_scale_ != 1.0) x = x * embedding_scale_;
  if (position_ == PositionKind::kLearned) {
    auto& table = side == Side::kSource ? encoder_positions_ : decoder_positions_;
    x = x + table->forward(at.defined() ? at
                                        : torch::arange(first_position, first_position + T,
                                                        tokens.options().dtype(torch::kLong)));
  } else if (position_ == PositionKind::kSinusoidal) {
    x = x + (at.defined() ? sinusoidal_positions_at(at, config_.d_model, x.options())
                          : sinusoidal_positions(first_position, T, config_.d_model, x.options()));
  }  // RoPE and ALiBi act in the self-attention (models/attention.h)
  return embedding_dropout(x, dropout_, tp_);  // (B, T, C), or (B, T / tp, C) under sequence parallelism
}

torch::Tensor EncoderDecoderImpl::head(const torch::Tensor& hidden) {
  auto h = decoder_norm_ ? decoder_norm_->forward(hidden) : hidden;
  return ends_.logits(head_scale_ != 1.0 ? h * head_scale_ : h);
}

torch::Tensor EncoderDecoderImpl::encode(const torch::Tensor& source, const torch::Tensor& source_padding) {
  TORCH_CHECK(whole(), "encode() runs the whole model; a pipeline stage runs forward_stage()");
  runner().keep_ends();  // ZeRO-3's ends, kept for the decoder's embedding and head
  auto x = embed(source, 0, Side::kSource);
  BlockInputs inputs;
  inputs.padding = source_padding;
  inputs.position_bias = encoder_bias(source.size(1));
  x = run_encoder_blocks(x, inputs);
  return encoder_norm_ ? encoder_norm_->forward(x) : x;
}

torch::Tensor EncoderDecoderImpl::run_encoder_blocks(torch::Tensor x, const BlockInputs& inputs) {
  for (size_t i = 0; i < encoder_.size(); ++i) x = runner().block(i, x, nullptr, inputs);
  return x;
}

torch::Tensor EncoderDecoderImpl::run_decoder_blocks(torch::Tensor y, BlockInputs inputs, DecoderState* state) {
  for (size_t i = 0; i < decoder_.size(); ++i) {
    inputs.memory_keys = state != nullptr ? &state->cross[i] : nullptr;
    y = runner().block(encoder_.size() + i, y, state != nullptr ? &state->self[i] : nullptr, inputs);
  }
  return y;
}

torch::Tensor EncoderDecoderImpl::run_decoder(const torch::Tensor& x, const torch::Tensor& memory,
                                              const torch::Tensor& source_padding, DecoderState* state,
                                              const torch::Tensor& position_bias) {
  TORCH_CHECK(whole(), "decoding runs the whole model; a pipeline stage runs forward_stage()");
  TORCH_CHECK(state == nullptr || !tp_.sequence_parallel(),
              "a sequence-parallel model does not decode incrementally: load it whole");
  BlockInputs inputs;
  inputs.memory = memory;
  inputs.memory_padding = source_padding;
  inputs.position_bias = position_bias;
  return head(run_decoder_blocks(x, inputs, state));
}

torch::Tensor EncoderDecoderImpl::decode(const torch::Tensor& target, const torch::Tensor& memory,
                                         const torch::Tensor& source_padding) {
  return run_decoder(embed(target, 0, Side::kTarget), memory, source_padding, nullptr, decoder_bias(0, target.size(1)));
}

torch::Tensor EncoderDecoderImpl::forward(const torch::Tensor& source, const torch::Tensor& source_lengths,
                                          const torch::Tensor& target_inputs) {
  const auto padding = padding_mask(source_lengths, source.size(1));
  return decode(target_inputs, encode(source, padding), padding);
}

DecoderState EncoderDecoderImpl::start_decoding(const torch::Tensor& source, const torch::Tensor& source_lengths,
                                                const KVCaches::Factory& make_cache) {
  TORCH_CHECK(!runner().gathers(), "a ZeRO-3 model does not decode incrementally: load it whole");
  DecoderState state;
  state.source_padding = padding_mask(source_lengths, source.size(1));
  state.memory = encode(source, state.source_padding);
  state.self = make_cache ? KVCaches(n_decoder_blocks(), make_cache) : contiguous_kv_caches(n_decoder_blocks());
  state.cross.resize(decoder_.size());
  return state;
}

torch::Tensor EncoderDecoderImpl::decode_step(const torch::Tensor& tokens, DecoderState& state) {
  // Relative positions: the new queries' bias against every cached key and themselves (no window).
  // A ragged batch's relative bias is the same for every row: the cache right-aligns each row's keys.
  const auto x = embed(tokens, state.seen(), Side::kTarget, state.self.seen_rows());
  return run_decoder(x, state.memory, state.source_padding, &state, decoder_bias(state.seen(), tokens.size(1)));
}

}  // namespace loom
