#include "models/kv_cache.h"

#include <algorithm>

#include "core/error.h"

namespace loom {

std::pair<torch::Tensor, torch::Tensor> ContiguousKVCache::append(const torch::Tensor& k, const torch::Tensor& v) {
  auto keys = k_.defined() ? torch::cat({k_, k}, 2) : k;
  auto values = v_.defined() ? torch::cat({v_, v}, 2) : v;
  seen_ += k.size(2);
  // A sliding window never looks further back than window - 1 positions: the next call's queries need at
  // most the last `window` kept (this call's may need more of what was kept: they get all of it).
  const int64_t keep = window_ > 0 ? std::min(keys.size(2), window_) : keys.size(2);
  k_ = keys.narrow(2, keys.size(2) - keep, keep);
  v_ = values.narrow(2, values.size(2) - keep, keep);
  return {keys, values};
}

void ContiguousKVCache::select(const torch::Tensor& rows) {
  if (!k_.defined()) return;
  k_ = k_.index_select(0, rows);
  v_ = v_.index_select(0, rows);
}

KVCaches::KVCaches(int64_t layers, const Factory& make) {
  LOOM_CHECK(layers >= 0, "a negative number of cache layers");
  for (int64_t i = 0; i < layers; ++i) layers_.push_back(make());
}

void KVCaches::select(const torch::Tensor& rows) {
  for (auto& layer : layers_) layer->select(rows);
}

KVCaches contiguous_kv_caches(int64_t layers, int64_t window) {
  return KVCaches(layers, [window] { return std::make_unique<ContiguousKVCache>(window); });
}

void MemoryKeys::select(const torch::Tensor& rows) {
  if (!filled()) return;
  k = k.index_select(0, rows);
  v = v.index_select(0, rows);
}

}  // namespace loom
