#include "models/paged_kv_cache.h"

#include <algorithm>
#include <memory>

#include "core/error.h"
#include "models/paged_decode_attention.h"

namespace loom {
namespace {

// What the layers' caches of one batch share: the rows and, per forward (its first layer plans it), the slots
// the new positions go to and, made when a layer first asks, the slots each row reads: right-aligned into one
// padded tensor (gathered for SDPA), or each row's own list (read in place by the decode kernel).
struct PagedBatchPlan {
  KVBlockPool* pool = nullptr;
  std::vector<BlockTable*> rows;
  int64_t window = 0;
  int64_t round = -1;  // the forward (count of appends per layer) planned
  std::vector<int64_t> seen;  // each row's positions before that forward
  int64_t new_positions = 0;  // T
  torch::Device device = torch::kCPU;
  torch::Tensor write_slots;              // (B * T) int64
  torch::Tensor read_slots;               // (B * S) int64, once gathered() made it
  torch::Tensor padding;                  // (B, S) bool, or undefined
  int64_t kept = 0;                       // S
  int64_t decode_window = -1;             // the window decode_slots were made for (-1: not made)
  std::vector<int64_t> decode_slots, decode_offsets;

  int64_t slot(const BlockTable& table, int64_t position) const {
    const int64_t size = pool->block_size();
    return table.blocks[static_cast<size_t>(position / size)] * size + position % size;
  }

  void plan(int64_t forward, const std::vector<int64_t>& before, int64_t T, const torch::Device& on) {
    round = forward;
    seen = before;
    new_positions = T;
    device = on;
    read_slots = padding = torch::Tensor();
    decode_window = -1;
    const int64_t B = static_cast<int64_t>(rows.size());
    for (int64_t b = 0; b < B; ++b)
      LOOM_CHECK(pool->reserve(*rows[b], before[b] + T), "the KV block pool is out of blocks (", pool->blocks(),
                 " of ", pool->block_size(), " positions): reserve before the forward");
    std::vector<int64_t> writes;
    writes.reserve(B * T);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) writes.push_back(slot(*rows[b], before[b] + t));
    write_slots = torch::tensor(writes, torch::TensorOptions().dtype(torch::kLong)).to(device);
  }

  // The right-aligned reads of every row: read_slots, padding, kept.
  void gathered() {
    if (read_slots.defined()) return;
    const int64_t B = static_cast<int64_t>(rows.size()), T = new_positions;
    kept = 0;
    for (int64_t b = 0; b < B; ++b)
      kept = std::max(kept, (window > 0 ? std::min(seen[b], window) : seen[b]) + T);
    std::vector<int64_t> reads;
    std::vector<uint8_t> pads;
    reads.reserve(B * kept);
    pads.reserve(B * kept);
    bool any_pad = false;
    for (int64_t b = 0; b < B; ++b) {
      const int64_t end = seen[b] + T;
      for (int64_t j = 0; j < kept; ++j) {
        const int64_t position = end - kept + j;
        // a missing key reads the row's newest (masked, but finite: the pool is not zeroed)
        reads.push_back(slot(*rows[b], position < 0 ? end - 1 : position));
        pads.push_back(position < 0);
        any_pad = any_pad || position < 0;
      }
    }
    const auto longs = torch::TensorOptions().dtype(torch::kLong);
    read_slots = torch::tensor(reads, longs).to(device);
    padding = any_pad ? torch::tensor(std::vector<int64_t>(pads.begin(), pads.end()), longs)
                            .to(torch::kBool)
                            .view({B, kept})
                            .to(device)
                      : torch::Tensor();
  }

  // Each row's slots of the positions its T new queries see (from the first query's window on with attended > 0),
  // oldest first, rows one after another (decode_offsets (B + 1)).
  void decoded(int64_t attended) {
    if (decode_window == attended) return;
    LOOM_CHECK(window == 0 || (attended > 0 && attended <= window), "a paged cache keeping ", window,
               " positions cannot serve attention over ", attended == 0 ? "all" : std::to_string(attended));
    decode_window = attended;
    decode_slots.clear();
    decode_offsets.assign(1, 0);
    for (size_t b = 0; b < rows.size(); ++b) {
      const int64_t end = seen[b] + new_positions;
      for (int64_t p = attended > 0 ? std::max<int64_t>(0, seen[b] - attended + 1) : 0; p < end; ++p)
        decode_slots.push_back(slot(*rows[b], p));
      decode_offsets.push_back(static_cast<int64_t>(decode_slots.size()));
    }
  }
};

class PagedKVCache final : public KVCache {
 public:
  PagedKVCache(std::shared_ptr<PagedBatchPlan> plan, int64_t layer, bool last)
      : plan_(std::move(plan)), layer_(layer), last_(last) {
    for (const auto* row : plan_->rows) seen_.push_back(row->length);
  }

  int64_t seen() const override { return seen_.empty() ? 0 : *std::max_element(seen_.begin(), seen_.end()); }

  torch::Tensor seen_rows() const override {
    const bool ragged = std::any_of(seen_.begin(), seen_.end(), [&](int64_t s) { return s != seen_.front(); });
    return ragged ? torch::tensor(seen_, torch::kLong) : torch::Tensor();
  }

  torch::Tensor key_padding() const override { return appends_ > 0 ? plan_->padding : torch::Tensor(); }

  std::pair<torch::Tensor, torch::Tensor> append(const torch::Tensor& k, const torch::Tensor& v) override {
    write(k, v);
    auto& plan = *plan_;
    plan.gathered();
    const int64_t B = k.size(0), K = k.size(1), D = k.size(3), S = plan.kept;
    auto read = [&](const torch::Tensor& pool) {  // (B, K, S, D)
      return pool.index_select(0, plan.read_slots).view({B, S, K, D}).transpose(1, 2).to(k.scalar_type());
    };
    auto out = std::make_pair(read(plan.pool->keys(layer_)), read(plan.pool->values(layer_)));
    advance();
    return out;
  }

  // The paged kernel (models/paged_decode_attention.h) on the CPU, for any number of new positions a row (a
  // decode step, a prefill chunk, a speculative verification); CUDA pools and autograd take the gather
  // (undefined: nothing appended).
  torch::Tensor append_and_attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                  const DecodeAttention& how) override {
    auto& plan = *plan_;
    if (!paged_decode_attention_applies(q, plan.pool->keys(layer_))) return {};
    write(k, v);
    plan.decoded(how.window);
    auto out = paged_decode_attention(q, plan.pool->keys(layer_), plan.pool->values(layer_), plan.decode_slots,
                                      plan.decode_offsets, how.scale, how.alibi_slopes, how.window);
    advance();
    return out;
  }

  void select(const torch::Tensor&) override {
    throw Error("a paged KV cache does not reorder rows: beam search decodes with the contiguous cache");
  }

 private:
  // Writes this forward's k and v (B, K, T, D) into the pool (the first layer plans the forward).
  void write(const torch::Tensor& k, const torch::Tensor& v) {
    auto& plan = *plan_;
    const int64_t B = k.size(0), K = k.size(1), T = k.size(2), D = k.size(3);
    LOOM_CHECK(B == static_cast<int64_t>(seen_.size()), "a paged cache of ", seen_.size(), " rows got ", B);
    if (plan.round != appends_) plan.plan(appends_, seen_, T, k.device());
    LOOM_CHECK(plan.new_positions == T && plan.seen == seen_, "the layers of a paged batch must append alike");
    auto& keys = plan.pool->keys(layer_);
    auto& values = plan.pool->values(layer_);
    keys.index_copy_(0, plan.write_slots, k.transpose(1, 2).reshape({B * T, K, D}).to(keys.scalar_type()));
    values.index_copy_(0, plan.write_slots, v.transpose(1, 2).reshape({B * T, K, D}).to(values.scalar_type()));
  }

  // After this layer's reads: the rows' positions move on; the last layer commits them to the tables.
  void advance() {
    auto& plan = *plan_;
    for (size_t b = 0; b < seen_.size(); ++b) seen_[b] += plan.new_positions;
    ++appends_;
    if (last_)
      for (size_t b = 0; b < seen_.size(); ++b) {
        plan.rows[b]->length = seen_[b];
        // the next forward reads from length - window on: the blocks wholly before go back to the pool
        if (plan.window > 0) plan.pool->release_before(*plan.rows[b], seen_[b] - plan.window);
      }
  }

  std::shared_ptr<PagedBatchPlan> plan_;
  int64_t layer_;
  bool last_;
  std::vector<int64_t> seen_;
  int64_t appends_ = 0;
};

}  // namespace

KVBlockPool::KVBlockPool(int64_t layers, int64_t blocks, int64_t block_size, int64_t kv_heads, int64_t head_dim,
                         const torch::TensorOptions& options)
    : blocks_(blocks), block_size_(block_size) {
  LOOM_CHECK(layers > 0 && blocks > 0 && block_size > 0, "a KV block pool needs layers, blocks and a block size");
  // Not zeroed: the memory of blocks never used is never touched (a 256 MiB pool costs what its sequences hold).
  for (int64_t i = 0; i < layers; ++i) {
    keys_.push_back(torch::empty({blocks * block_size, kv_heads, head_dim}, options));
    values_.push_back(torch::empty({blocks * block_size, kv_heads, head_dim}, options));
  }
  for (int64_t b = blocks - 1; b >= 0; --b) free_.push_back(b);
  refs_.assign(static_cast<size_t>(blocks), 0);
  published_.resize(static_cast<size_t>(blocks));
  evictable_at_.assign(static_cast<size_t>(blocks), evictable_.end());
}

int64_t KVBlockPool::block_bytes(int64_t layers, int64_t block_size, int64_t kv_heads, int64_t head_dim,
                                 torch::ScalarType dtype) {
  return 2 * layers * block_size * kv_heads * head_dim * static_cast<int64_t>(c10::elementSize(dtype));
}

bool KVBlockPool::reserve(BlockTable& table, int64_t length) {
  const int64_t more = blocks_for(length) - static_cast<int64_t>(table.blocks.size());
  if (more <= 0) return true;
  if (more > free_blocks()) return false;
  for (int64_t i = 0; i < more; ++i) table.blocks.push_back(take_block());
  return true;
}

void KVBlockPool::release(BlockTable& table) {
  // The last block first: under eviction a prefix's deeper blocks go before the blocks they extend.
  for (auto it = table.blocks.rbegin(); it != table.blocks.rend(); ++it) {
    const int64_t b = *it;
    if (b == kNoBlock) continue;  // freed by release_before
    if (--refs_[static_cast<size_t>(b)] > 0) continue;
    if (published_[static_cast<size_t>(b)].filed)
      evictable_at_[static_cast<size_t>(b)] = evictable_.insert(evictable_.end(), b);
    else
      free_.push_back(b);
  }
  table.blocks.clear();
  table.length = 0;
}

KVCaches paged_kv_caches(KVBlockPool& pool, std::vector<BlockTable*> rows, int64_t window) {
  auto plan = std::make_shared<PagedBatchPlan>();
  plan->pool = &pool;
  plan->rows = std::move(rows);
  plan->window = window;
  std::vector<std::unique_ptr<KVCache>> layers;
  for (int64_t i = 0; i < pool.layers(); ++i)
    layers.push_back(std::make_unique<PagedKVCache>(plan, i, i + 1 == pool.layers()));
  return KVCaches(std::move(layers));
}

}  // namespace loom
