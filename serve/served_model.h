// What the inference engine (serve/engine.h) asks of a model, so that one engine serves both kinds:
//   a decoder-only Gpt: a request's prompt is the start of the sequence it continues;
//   an encoder-decoder (model.arch transformer, T5): a request's prompt is the SOURCE sentence. At admission the
//     engine has it encoded once (encode(): the encoder's output and every decoder layer's cross-attention keys
//     and values of it, an EncodedSource the sequence keeps until it finishes or is cancelled; a preempted
//     sequence keeps it too, so its recompute re-runs the decoder only), and the sequence the engine decodes is
//     the TARGET side, from the decoder's start token (start_tokens()).
// Either way forward() runs a ragged batch (each row at its own position) through the decoder's self-attention
// over the paged KV cache (models/paged_kv_cache.h), as the GPT path always did; the encoder-decoder's rows
// attend to their own sources: the rows' cross-attention keys and values padded to the longest source of the
// batch, the padding masked (a key padding mask: models/attention.cpp adds it to SDPA's mask); the padded stack is
// kept while the next forward has the same rows in the same order (a decode step's usual case).
// The pool the engine allocates holds the self-attention keys and values only (kv_layers() layers); the encoded
// sources live outside it (encoded_bytes_per_token() a source token).
#pragma once
#include <torch/torch.h>

#include <memory>
#include <vector>

#include "core/config.h"
#include "models/encoder_decoder.h"
#include "models/gpt.h"
#include "models/kv_cache.h"

namespace loom {

class Communicator;

// One sequence's encoded source: the encoder output (1, S, C) and each decoder layer's cross-attention keys and
// values (1, K, S, D).
struct EncodedSource {
  torch::Tensor memory;
  std::vector<MemoryKeys> cross;
  uint64_t serial = 0;  // unique per encoded source: a batch of the same rows reuses its padded stack
  int64_t length() const { return memory.size(1); }
};

class ServedModel {
 public:
  virtual ~ServedModel() = default;
  virtual const ModelConfig& config() const = 0;
  // The paged pool's shape: self-attention layers, this rank's key/value heads, head size; device and dtype.
  virtual int64_t kv_layers() const = 0;
  virtual int64_t kv_heads() const = 0;
  virtual torch::TensorOptions options() const = 0;
  virtual Communicator* tp_group() const { return nullptr; }
  // The speculative decoding target (serve/speculative.h); null for a model that cannot be one.
  virtual Gpt* gpt() { return nullptr; }

  // Encoder-decoder: true; the sequence a request's prompt (its source) starts decoding from, and the source
  // encoded. A decoder-only model continues the prompt itself and encodes nothing.
  virtual bool encodes() const { return false; }
  virtual std::vector<int64_t> start_tokens(const std::vector<int64_t>& prompt) const { return prompt; }
  // Sources of different lengths are encoded in one padded forward; each gets its own rows, unpadded.
  virtual std::vector<std::shared_ptr<const EncodedSource>> encode(const std::vector<std::vector<int64_t>>& sources) {
    return std::vector<std::shared_ptr<const EncodedSource>>(sources.size());
  }
  // Bytes an encoded source keeps per source token (the decoder layers' cross-attention keys and values).
  virtual int64_t encoded_bytes_per_token() const { return 0; }

  // tokens (B, T), row b continuing the positions caches' row b has seen (sources[b]: its encoded source, or
  // null) -> logits (B, T, V), or this rank's vocabulary columns under TP.
  virtual torch::Tensor forward(const torch::Tensor& tokens, KVCaches& caches,
                                const std::vector<const EncodedSource*>& sources) = 0;
};

std::shared_ptr<ServedModel> served_gpt(Gpt model);
// start_token: the decoder's first input (the bos the model was trained with, kBosId).
std::shared_ptr<ServedModel> served_encoder_decoder(EncoderDecoder model, int64_t start_token);

// Rows (1, ..., S_b, ...) with their positions along `dim` stacked into (B, ..., S, ...), S the longest, zeros
// after each row's own; padding (B, S) bool, on the rows' device, is true there (the cross-attention of a ragged
// batch: tests/unit/test_served_model.cpp).
torch::Tensor stack_padded(const std::vector<torch::Tensor>& rows, int64_t dim, torch::Tensor* padding = nullptr);

}  // namespace loom
