// What the model a config describes costs, without building it: its exact parameter count, training
// FLOPs per token, and a memory estimate per rank. Closed forms of the layers in models/ over the shape its
// family gives the model (core/family_rules.h ModelShape), checked against built models by
// tests/unit/test_model_variants.cpp; `loom info` prints them.
#pragma once
#include <cstdint>

#include "core/config.h"
#include "parallel/sharding.h"

namespace loom {

// Exact parameter count of the model a config builds.
int64_t count_parameters(const ModelConfig& config);
// The parameters one token passes through: all of them less, per MoE block (model.moe), the
// num_experts - top_k routed experts it skips (the dense model: count_parameters).
int64_t count_active_parameters(const ModelConfig& config);

// Training FLOPs per token (forward + backward) at sequence length seq_len: 6 x (every weight a token
// multiplies through, the LM head included) + 12 x n_layers x n_heads x head_dim x (keys each query sees:
// seq_len, or the attention window if smaller) for attention scores and weighted values (no discount for
// the causal mask); an MoE block counts the router, top_k experts and the shared MLP (active FLOPs). For the encoder-decoder: per target token with one source token, both sequences
// seq_len long (encoder, decoder and cross-attention weights; encoder, decoder and cross attention).
double training_flops_per_token(const ModelConfig& config, int64_t seq_len);

// The blocks pipeline stage `stage` of parallel.pp holds (all of them with pp = 1), by the stacks of its
// family's ModelShape (core/family_rules.h): encoder blocks (first in the split) and decoder blocks (a GPT's).
struct StageBlockCounts {
  int64_t encoder = 0;
  int64_t decoder = 0;
  bool ends_encoder = false;  // holds the encoder's last block
  int64_t moe = 0;            // of its decoder blocks, the MoE ones (model.moe)
};
StageBlockCounts stage_block_counts(const Config& config, int64_t stage);

// Parameters of pipeline stage `stage` of parallel.pp (the whole model's with pp = 1): its blocks, the
// embeddings on the first stage, the final norm and head (or the tied embedding's copy) on the last, the
// pre-norm encoder-decoder's encoder norm on the stage ending the encoder.
int64_t count_stage_parameters(const Config& config, int64_t stage);

// Bytes one rank of pipeline stage `stage` holds while training, for the config's precision and parallel
// layout.
struct MemoryEstimate {
  int64_t weights = 0;      // fp32 parameters (+ the bf16 copies autocast keeps during a step), or bf16
                            // parameters + their fp32 master (precision.param_dtype bf16); ZeRO-3: the shard
  int64_t gradients = 0;    // fp32, one per parameter (ZeRO-1: + its shard; ZeRO-2, 3: the shard + buckets in flight)
  int64_t optimizer = 0;    // AdamW's two fp32 moments (1/dp of them per rank with ZeRO-1)
  // ZeRO-3: the units of the stage gathered at once: the ends unit and two blocks (the one computing, the one
  // prefetched), three where a pipeline stage runs forwards back to back (GPipe, 1F1B's warm-up: the last
  // block stays for its backward), every block with parallel.reshard_after_forward false.
  int64_t gathered = 0;
  int64_t activations = 0;  // what the micro-batches in flight keep for their backward
  // Pipeline stages: fp32 outputs sent forward and input gradients sent back, each freed once its
  // neighbour has received it: about as many micro-batches' worth as are in flight.
  int64_t pipeline_sends = 0;
  // Bytes in tensors at the step's peak: what CUDA's allocator and runtime.cpu_allocator=caching count
  // (`loom bench` prints each rank's measured peak next to this; tests/e2e/test_pipeline_3d.sh checks it).
  // A process holds more: its libraries (on CPU, `loom bench` prints that resident base, ~350 MB with
  // MPI and libtorch) and the allocator's cache of freed blocks.
  int64_t total() const { return weights + gradients + optimizer + gathered + activations + pipeline_sends; }
};
MemoryEstimate estimate_memory(const Config& config, int64_t stage = 0);

// Bytes of the buffers one rank of pipeline stage `stage` hands to the data-parallel collectives per optimizer
// step: what its sharding strategy moves (parallel/sharding.h CommunicationEstimate).
CommunicationEstimate estimate_communication(const Config& config, int64_t stage = 0);

}  // namespace loom
