#include "serve/served_model.h"

#include <algorithm>

#include "core/error.h"
#include "models/few_rows_linear.h"

namespace loom {

torch::Tensor stack_padded(const std::vector<torch::Tensor>& rows, int64_t dim, torch::Tensor* padding) {
  LOOM_CHECK(!rows.empty(), "stack_padded needs at least one row");
  int64_t longest = 0;
  for (const auto& r : rows) longest = std::max(longest, r.size(dim));
  const auto B = static_cast<int64_t>(rows.size());
  if (padding != nullptr) {
    auto mask = torch::zeros({B, longest}, torch::kBool);
    for (int64_t b = 0; b < B; ++b) mask[b].narrow(0, rows[b].size(dim), longest - rows[b].size(dim)).fill_(true);
    *padding = mask.to(rows.front().device());
  }
  if (B == 1) return rows.front();
  std::vector<torch::Tensor> padded;
  padded.reserve(rows.size());
  for (const auto& r : rows) {
    const int64_t missing = longest - r.size(dim);
    if (missing == 0) {
      padded.push_back(r);
      continue;
    }
    auto shape = r.sizes().vec();
    shape[dim] = missing;
    padded.push_back(torch::cat({r, torch::zeros(shape, r.options())}, dim));
  }
  return torch::cat(padded, 0);
}

namespace {

class ServedGpt final : public ServedModel {
 public:
  explicit ServedGpt(Gpt model) : model_(std::move(model)) { model_->eval(); }
  const ModelConfig& config() const override { return model_->config(); }
  int64_t kv_layers() const override { return model_->n_blocks(); }
  int64_t kv_heads() const override {
    // A TP-split model (serve/step_broadcast.h) keeps this rank's share of the key/value heads.
    const int64_t tp = model_->tp_group() != nullptr ? model_->tp_group()->size() : 1;
    return model_->config().kv_heads() / tp;
  }
  torch::TensorOptions options() const override { return model_->parameters().front().options(); }
  Communicator* tp_group() const override { return model_->tp_group(); }
  Gpt* gpt() override { return &model_; }
  torch::Tensor forward(const torch::Tensor& tokens, KVCaches& caches,
                        const std::vector<const EncodedSource*>& /*sources*/) override {
    return model_->forward(tokens, &caches);
  }

 private:
  Gpt model_;
};

class ServedEncoderDecoder final : public ServedModel {
 public:
  ServedEncoderDecoder(EncoderDecoder model, int64_t start_token) : model_(std::move(model)), start_(start_token) {
    model_->eval();
    LOOM_CHECK(model_->tp_group() == nullptr || model_->tp_group()->size() <= 1,
               "an encoder-decoder model is served whole: no --set parallel.tp");
  }
  const ModelConfig& config() const override { return model_->config(); }
  int64_t kv_layers() const override { return model_->n_decoder_blocks(); }
  int64_t kv_heads() const override { return model_->config().kv_heads(); }
  torch::TensorOptions options() const override { return model_->parameters().front().options(); }
  bool encodes() const override { return true; }
  std::vector<int64_t> start_tokens(const std::vector<int64_t>& /*source*/) const override { return {start_}; }

  int64_t encoded_bytes_per_token() const override {
    const auto& c = model_->config();
    const int64_t element = static_cast<int64_t>(c10::elementSize(options().dtype().toScalarType()));
    return (kv_layers() * 2 * c.kv_heads() * c.head_dim() + c.d_model) * element;
  }

  std::vector<std::shared_ptr<const EncodedSource>> encode(const std::vector<std::vector<int64_t>>& sources) override {
    // The encoder once over the sources padded to the longest; then one decoder step on the start token with a
    // throwaway cache, which is what fills every decoder layer's cross-attention keys and values (models/attention.cpp
    // cross_qkv); its logits go unused. Each source keeps its own positions (copies: the batch's tensors go).
    InferenceScope inference;  // no gradients; the few-row kernel (models/few_rows_linear.h)
    const auto device = options().device();
    const auto B = static_cast<int64_t>(sources.size());
    int64_t longest = 0;
    for (const auto& s : sources) longest = std::max<int64_t>(longest, static_cast<int64_t>(s.size()));
    auto tokens = torch::zeros({B, longest}, torch::kLong);
    std::vector<int64_t> lengths;
    for (int64_t b = 0; b < B; ++b) {
      const auto& s = sources[static_cast<size_t>(b)];
      lengths.push_back(static_cast<int64_t>(s.size()));
      LOOM_CHECK(!s.empty(), "an encoder-decoder request needs a source of at least one token");
      tokens[b].narrow(0, 0, lengths.back()).copy_(torch::tensor(s, torch::kLong));
    }
    auto state = model_->start_decoding(tokens.to(device), torch::tensor(lengths, torch::kLong).to(device));
    model_->decode_step(torch::full({B, 1}, start_, torch::kLong).to(device), state);
    std::vector<std::shared_ptr<const EncodedSource>> out;
    for (int64_t b = 0; b < B; ++b) {
      const int64_t S = lengths[static_cast<size_t>(b)];
      auto encoded = std::make_shared<EncodedSource>();
      encoded->serial = ++serials_;
      encoded->memory = state.memory.narrow(0, b, 1).narrow(1, 0, S).clone();
      for (const auto& keys : state.cross) {
        MemoryKeys own;
        own.k = keys.k.narrow(0, b, 1).narrow(2, 0, S).clone();
        own.v = keys.v.narrow(0, b, 1).narrow(2, 0, S).clone();
        encoded->cross.push_back(std::move(own));
      }
      out.push_back(std::move(encoded));
    }
    return out;
  }

  torch::Tensor forward(const torch::Tensor& tokens, KVCaches& caches,
                        const std::vector<const EncodedSource*>& sources) override {
    const auto B = static_cast<size_t>(tokens.size(0));
    LOOM_CHECK(sources.size() == B, "one encoded source a row: ", sources.size(), " for ", B, " rows");
    std::vector<uint64_t> serials;
    for (size_t b = 0; b < B; ++b) {
      LOOM_CHECK(sources[b] != nullptr, "row ", b, " of an encoder-decoder batch has no encoded source");
      serials.push_back(sources[b]->serial);
    }
    if (serials != stacked_serials_) {  // another batch than the last forward's: stack its rows' sources again
      DecoderState stacked;
      std::vector<torch::Tensor> rows(B);
      for (size_t b = 0; b < B; ++b) rows[b] = sources[b]->memory;
      stacked.memory = stack_padded(rows, 1, &stacked.source_padding);
      stacked.cross.resize(static_cast<size_t>(kv_layers()));
      for (size_t l = 0; l < stacked.cross.size(); ++l) {
        for (size_t b = 0; b < B; ++b) rows[b] = sources[b]->cross[l].k;
        stacked.cross[l].k = stack_padded(rows, 2);
        for (size_t b = 0; b < B; ++b) rows[b] = sources[b]->cross[l].v;
        stacked.cross[l].v = stack_padded(rows, 2);
      }
      stacked_ = std::move(stacked);
      stacked_serials_ = std::move(serials);
    }
    stacked_.self = std::move(caches);
    auto logits = model_->decode_step(tokens, stacked_);
    caches = std::move(stacked_.self);
    return logits;
  }

 private:
  EncoderDecoder model_;
  int64_t start_;
  uint64_t serials_ = 0;
  // The last forward's rows (by serial) and their padded stack (memory, padding, cross-attention keys).
  std::vector<uint64_t> stacked_serials_;
  DecoderState stacked_;
};

}  // namespace

std::shared_ptr<ServedModel> served_gpt(Gpt model) { return std::make_shared<ServedGpt>(std::move(model)); }

std::shared_ptr<ServedModel> served_encoder_decoder(EncoderDecoder model, int64_t start_token) {
  return std::make_shared<ServedEncoderDecoder>(std::move(model), start_token);
}

}  // namespace loom
