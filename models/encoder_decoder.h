// The encoder-decoder Transformer (Vaswani et al. 2017, model.arch: transformer): an encoder of
// bidirectional self-attention blocks over the source, a decoder of causal self-attention +
// cross-attention blocks over the target, one token embedding shared by source and target (the
// vocabulary is joint) and, with model.tie_embeddings, by the output projection. Built from the GPT's
// layers (models/block.h, models/attention.h): post-norm as in the paper or pre-norm, sinusoidal or
// learned positions, or RoPE / ALiBi in both stacks' self-attention (the encoder's bidirectional: ALiBi by
// |i - j|; the cross-attention has no positions), an optional sliding window in the self-attention (the
// encoder's sees |i - j| < window), ReLU or GELU, embeddings scaled by sqrt(d_model) with
// model.scale_embeddings.
// T5 (Raffel et al. 2020) is this model with its options (configs/t5-*.yaml): model.position relative (a
// bucketed bias per head, models/relative_position_bias.h: one table per stack, both on the first stage,
// computed once per forward and shared by the stack's blocks), model.scale_attention false, RMSNorm,
// no biases, ReLU or gated GELU, model.head_dim (d_kv), and a tied head after the decoder's output is scaled
// by d_model^-0.5 (model.scale_head) or an untied one. Its Hugging Face names: models/t5_weights.h.
// Exposed as embed -> encoder blocks / decoder blocks -> head, like the GPT.
// Pipeline parallelism: the encoder blocks then the decoder blocks split into the stages (ModelStage over
// ModelConfig::pipeline_layers(), models/model_stage.h). The first stage embeds both the source and the target
// (so the shared token embedding, like the GPT's, lives on the first stage, and with a tied head also on
// the last, their gradients summed); every stage passes on [source side (B, S, C), target side (B, T, C)]:
// the encoder's hidden states and the embedded target through the encoder stages, then the memory
// (the encoder's output) and the decoder's hidden states through the decoder stages, so that every
// decoder stage attends to the memory and sends its gradient back. The stage holding the last encoder
// block applies the encoder's final norm. With relative positions the first stage computes both stacks'
// biases and they travel on after the two sides: the encoder's (1, H, S, S) to the stages holding
// encoder blocks, the decoder's (1, H, T, T) to every stage (H: this TP rank's heads); their gradients come
// back the same way to the tables. Blocks keep their global names ("decoder.1" on any stage), so a
// checkpoint's names are the same under every layout.
// Tensor parallelism as the GPT's: built with a TP group, the self- and cross-attention split their heads
// (cross-attention's q rows and k/v rows of one column-parallel weight), the MLPs their FFN columns, the
// shared embedding (and the untied head) the vocabulary, and forward/head return this rank's vocabulary
// columns of the logits, for the vocab-parallel cross-entropy.
// Sequence parallelism (Korthikanti et al., training and evaluation): embed cuts source and target to this
// rank's positions, so norms, dropout and residuals of both stacks work on (B, S / tp, C) and (B, T / tp, C);
// the memory stays cut, and every cross-attention gathers it (all-gather forward, reduce-scatter backward)
// before its k/v rows, as it gathers the decoder's positions before its q rows. Attention masks are over the
// whole (gathered) sequences; S and T must be multiples of tp (the translation task pads its batches so).
// Pipeline stages then pass on [(B, S / tp, C), (B, T / tp, C)]. Incremental decoding loads the model whole.
// ZeRO-3 (parallel.zero 3) and activation checkpointing are applied from outside (StagedModel::parallelize):
// the stage's encoder blocks then decoder blocks run through its BlockRunner (models/block_runner.h), the
// units being the ends (embedding, positions, final norms, head, kept gathered: keep_ends) and the blocks,
// each gathered around its forward (forward(), forward_stage(): training and evaluation) and its backward.
//
// Padding: source keys are masked in the encoder's self-attention and the decoder's cross-attention
// (from source_lengths). The decoder needs only its causal mask: target padding trails, so a real
// target position never sees a padded one, and padded positions are ignored by the loss.
// Shapes: B batch, S source positions, T target positions, C d_model, V vocabulary.
#pragma once
#include <torch/torch.h>

#include <vector>

#include "core/config.h"
#include "models/attention.h"
#include "models/block.h"
#include "models/gpt.h"
#include "models/layers.h"
#include "models/parallel_linear.h"
#include "models/relative_position_bias.h"
#include "models/vocab_parallel_embedding.h"

namespace loom {

// (B) lengths -> (B, S) bool, true at positions >= the row's length.
torch::Tensor padding_mask(const torch::Tensor& lengths, int64_t S);

// What incremental decoding keeps between steps: the encoder output and, per decoder block, the cached
// self-attention keys/values of the target so far and the cross-attention keys/values of the memory.
struct DecoderState {
  torch::Tensor memory;          // (B, S, C)
  torch::Tensor source_padding;  // (B, S) bool
  KVCaches self;                 // one per decoder block (models/kv_cache.h)
  std::vector<MemoryKeys> cross;
  int64_t seen() const { return self.seen(); }
  void select(const torch::Tensor& rows);  // keeps batch rows `rows` (int64), in that order (beam reordering)
};

class EncoderDecoderImpl : public StagedModel {
 public:
  // Every rank draws the whole model's initial weights from the RNG in the same order and keeps its stage
  // (and TP shard) of them, so any layout starts from the single-process model.
  explicit EncoderDecoderImpl(const ModelConfig& config, const TensorParallelism& tp = {}, const ModelStage& stage = {});

  // source (B, S), source_lengths (B), target_inputs (B, T) (bos + target) -> logits (B, T, V)
  torch::Tensor forward(const torch::Tensor& source, const torch::Tensor& source_lengths,
                        const torch::Tensor& target_inputs);

  // source (B, S), source_padding (B, S) -> memory (B, S, C)
  torch::Tensor encode(const torch::Tensor& source, const torch::Tensor& source_padding);
  // target (B, T) from position 0, memory (B, S, C) -> logits (B, T, V)
  torch::Tensor decode(const torch::Tensor& target, const torch::Tensor& memory, const torch::Tensor& source_padding);

  // Incremental decoding: encode once, then feed the target a step at a time (tokens (B, t) continue
  // the positions the state has seen) -> logits (B, t, V) of the new positions. With a paged cache whose rows
  // sit at different positions (state.self.seen_rows(): the engine's ragged batches, serve/served_model.h) each
  // row continues its own.
  // The self-attention caches are make_cache's (one per decoder block; contiguous by default).
  DecoderState start_decoding(const torch::Tensor& source, const torch::Tensor& source_lengths,
                              const KVCaches::Factory& make_cache = {});
  torch::Tensor decode_step(const torch::Tensor& tokens, DecoderState& state);

  // A pipeline stage's forward (source_padding (B, S) bool on every stage): the first stage embeds source
  // (B, S) and target_inputs (B, T), the others take the previous stage's [source side, target side]. The
  // last returns the logits as forward() does, the others [source side (B, S, C), target side (B, T, C)].
  std::vector<torch::Tensor> forward_stage(const torch::Tensor& source, const torch::Tensor& source_padding,
                                           const torch::Tensor& target_inputs, const std::vector<torch::Tensor>& inputs);
  const ModelStage& stage() const override { return stage_; }
  // What a stage passes on for B pairs of S source and T target positions: [(B, S, C), (B, T, C)], or
  // this rank's positions [(B, S / tp, C), (B, T / tp, C)] under sequence parallelism.
  std::vector<std::vector<int64_t>> stage_output_shapes(int64_t B, int64_t S, int64_t T) const;
  // S and T must be multiples of this: tp under sequence parallelism, else 1.
  int64_t sequence_multiple() const { return tp_.sequence_parallel() ? tp_.size() : 1; }
  // The shared token embedding, as StagedModel says.
  torch::Tensor stage_tied_embedding() const override { return ends_.stage_tied_embedding(); }

  enum class Side { kSource, kTarget };
  // (B, T) -> (B, T, C); row_first (B) defined: row b's first position (a ragged batch over a paged cache)
  torch::Tensor embed(const torch::Tensor& tokens, int64_t first_position, Side side,
                      const torch::Tensor& row_first = {});
  torch::Tensor head(const torch::Tensor& hidden);  // (B, T, C) -> (B, T, V), or (B, T, V_r) under TP
  // This stage's blocks (all of them for the whole model).
  Block& encoder_block(int64_t i) { return encoder_[i]; }
  Block& decoder_block(int64_t i) { return decoder_[i]; }
  int64_t n_encoder_blocks() const { return static_cast<int64_t>(encoder_.size()); }
  int64_t n_decoder_blocks() const { return static_cast<int64_t>(decoder_.size()); }
  const ModelConfig& config() const { return config_; }
  Communicator* tp_group() const override { return tp_.group(); }

 private:
  torch::Tensor run_decoder(const torch::Tensor& x, const torch::Tensor& memory, const torch::Tensor& source_padding,
                            DecoderState* state, const torch::Tensor& position_bias);
  // Relative positions: the encoder's bias for S source positions, the decoder's for T queries from `first`
  // against every position up to them; undefined without relative positions.
  torch::Tensor encoder_bias(int64_t S);
  torch::Tensor decoder_bias(int64_t first, int64_t T);
  // Relative positions under pipeline parallelism: whether this stage receives the encoder's bias (it holds
  // encoder blocks after the first stage) and sends it on (the next stage holds encoder blocks too).
  bool takes_encoder_bias() const;
  bool passes_encoder_bias() const;
  // x through this stage's encoder blocks, y through its decoder blocks (attending to inputs.memory), run by
  // the runner (its blocks 0.. n_encoder_blocks() - 1, then the decoder's); state: incremental decoding's
  // caches, or null.
  torch::Tensor run_encoder_blocks(torch::Tensor x, const BlockInputs& inputs);
  torch::Tensor run_decoder_blocks(torch::Tensor y, BlockInputs inputs, DecoderState* state);

  bool whole() const { return stage_.whole(); }

  ModelConfig config_;
  TensorParallelism tp_;
  ModelStage stage_;
  bool ends_encoder_ = true;  // holds the last encoder block (and the pre-norm encoder's final norm)
  PositionKind position_;
  double embedding_scale_;
  double head_scale_;  // the decoder's output * this before the head (T5's tied head: d_model^-0.5)
  VocabularyEnds ends_;  // the shared token embedding and the head
  torch::nn::Embedding encoder_positions_{nullptr}, decoder_positions_{nullptr};  // learned positions only
  RelativePositionBias encoder_bias_{nullptr}, decoder_bias_{nullptr};  // relative positions, first stage only
  torch::nn::Dropout dropout_{nullptr};
  std::vector<Block> encoder_, decoder_;                // this stage's
  Norm encoder_norm_{nullptr}, decoder_norm_{nullptr};  // pre-norm only: the stacks' outputs are not normed
};
TORCH_MODULE(EncoderDecoder);

}  // namespace loom
