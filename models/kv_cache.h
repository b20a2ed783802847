// The keys and values self-attention keeps between calls when decoding incrementally, behind one interface,
// so that attention does not know how they are stored:
//   KVCache            one layer's: positions fed so far, append the new ones and get back every key a new
//                      query may see (or let the cache attend where it keeps them: append_and_attend),
//                      reorder rows (beam search);
//   ContiguousKVCache  one growing (B, K, S, D) tensor per layer, the last `window` positions with a
//                      sliding window (loom generate, beam search);
//   KVCaches           one cache per layer of a model, made by a factory (contiguous_kv_caches, or a paged
//                      pool's: models/paged_kv_cache.h);
//   MemoryKeys         cross-attention's keys and values of the memory (the encoder output): computed by the
//                      first decoding step, reused as they are.
// Shapes: B batch rows, K key/value heads, T new positions, S kept positions, D head size.
#pragma once
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <utility>
#include <vector>

namespace loom {

class KVCache {
 public:
  virtual ~KVCache() = default;
  // Positions fed so far: the absolute position of the next one.
  virtual int64_t seen() const = 0;
  // Takes k and v (B, K, T, D) of positions [seen(), seen() + T) and returns the keys and values these T
  // queries attend to (B, K, S, D), the newest last: positions [seen() - S, seen()) once these are counted
  // in (a sliding window's cache may keep fewer for the next call than it returns now).
  virtual std::pair<torch::Tensor, torch::Tensor> append(const torch::Tensor& k, const torch::Tensor& v) = 0;
  // Keeps batch rows `rows` (int64), in that order.
  virtual void select(const torch::Tensor& rows) = 0;
  // A batch whose rows have seen different numbers of positions (continuous batching over a paged cache):
  // each row's positions fed so far (B) int64, seen() then being their maximum; undefined (the default) when
  // every row has seen seen(). append then returns each row's keys right-aligned to the same S (newest
  // last, a row's key j at position row_seen + T - S + j) and key_padding() says which are not there.
  virtual torch::Tensor seen_rows() const { return {}; }
  // (B, S) bool, true at the keys the last append returned that a row does not have (positions before its
  // first); undefined (the default) when every row has all S.
  virtual torch::Tensor key_padding() const { return {}; }
  // New positions attended by the cache itself where it keeps the keys (the paged cache reads through its block
  // tables instead of gathering them): appends k and v (B, K, T, D) as append() does and returns causal
  // self-attention of q (B, H, T, D) to each row's keys (B, H, T, D): query t at the row's position seen + t sees
  // the keys up to it, only the last `window` positions with window > 0; scores q.k * scale, ALiBi's
  // -slope_h * distance with alibi_slopes (H) defined. Undefined (the default, or a case it does not cover),
  // having appended nothing: the caller appends and attends.
  struct DecodeAttention {
    double scale = 1.0;
    int64_t window = 0;
    torch::Tensor alibi_slopes;
  };
  virtual torch::Tensor append_and_attend(const torch::Tensor& /*q*/, const torch::Tensor& /*k*/,
                                          const torch::Tensor& /*v*/, const DecodeAttention& /*how*/) {
    return {};
  }
};

class ContiguousKVCache final : public KVCache {
 public:
  explicit ContiguousKVCache(int64_t window = 0) : window_(window) {}  // window > 0: keep the last `window`
  int64_t seen() const override { return seen_; }
  std::pair<torch::Tensor, torch::Tensor> append(const torch::Tensor& k, const torch::Tensor& v) override;
  void select(const torch::Tensor& rows) override;
  int64_t length() const { return k_.defined() ? k_.size(2) : 0; }  // positions kept
  const torch::Tensor& keys() const { return k_; }
  const torch::Tensor& values() const { return v_; }

 private:
  int64_t window_;
  int64_t seen_ = 0;
  torch::Tensor k_, v_;
};

class KVCaches {
 public:
  using Factory = std::function<std::unique_ptr<KVCache>()>;
  KVCaches() = default;
  KVCaches(int64_t layers, const Factory& make);
  explicit KVCaches(std::vector<std::unique_ptr<KVCache>> layers) : layers_(std::move(layers)) {}
  KVCache& operator[](size_t layer) { return *layers_.at(layer); }
  const KVCache& operator[](size_t layer) const { return *layers_.at(layer); }
  size_t size() const { return layers_.size(); }
  int64_t seen() const { return layers_.empty() ? 0 : layers_.front()->seen(); }
  torch::Tensor seen_rows() const { return layers_.empty() ? torch::Tensor() : layers_.front()->seen_rows(); }
  void select(const torch::Tensor& rows);

 private:
  std::vector<std::unique_ptr<KVCache>> layers_;
};

// `layers` contiguous caches, each keeping the last `window` positions (0: all of them).
KVCaches contiguous_kv_caches(int64_t layers, int64_t window = 0);

struct MemoryKeys {
  torch::Tensor k, v;  // (B, K, S, D) of the memory's S positions
  bool filled() const { return k.defined(); }
  void select(const torch::Tensor& rows);
};

}  // namespace loom
