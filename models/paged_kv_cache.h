// A paged KV cache (PagedAttention, Kwon et al. 2023): keys and values live in fixed-size blocks of one pool
// per layer, each sequence owns a block table, and a forward over a batch of sequences at different positions
// reads every row's keys through its table (models/kv_cache.h: seen_rows, key_padding).
//   KVBlockPool      every layer's blocks (block id b names slots [b * block_size, (b + 1) * block_size) of each
//                    layer's pool) and the free list, sized by a block count or a byte budget;
//   BlockTable       one sequence's blocks and how many positions they hold;
//   paged_kv_caches  one KVCache per layer for a forward of some sequences (the rows of a batch).
// Prefix caching (set_prefix_caching): a full block's keys and values depend only on the tokens up to its end, so
// sequences that start alike share blocks. publish() files a sequence's full blocks under a hash of their tokens
// chained with their predecessors' (checked token by token on a hit); share_prefix() gives a new sequence the
// published blocks its tokens start with. Blocks are counted by references; a released block that holds a
// published prefix stays cached (evictable, the least recently released first) until a reservation needs it, so
// used_blocks() counts the referenced blocks only (models/paged_kv_cache_prefix.cpp).
// Sliding window: a forward reads at most the last `window` positions before its new ones, so after each forward
// the blocks wholly before (length - window) go back to the pool (their table entries become kNoBlock): a long
// sequence holds about window / block_size blocks. audit() checks the counts (models/paged_kv_cache_audit.cpp).
// Shapes: K key/value heads, D head size, N = blocks * block_size slots.
#pragma once
#include <torch/torch.h>

#include <list>
#include <string>
#include <unordered_map>
#include <vector>

#include "models/kv_cache.h"

namespace loom {

constexpr int64_t kNoBlock = -1;  // a table's entry for positions a sliding window no longer reads (freed)

struct BlockTable {
  std::vector<int64_t> blocks;  // the pool's block ids (or kNoBlock), in position order
  int64_t length = 0;           // positions stored (in every layer)
};

class KVBlockPool {
 public:
  KVBlockPool(int64_t layers, int64_t blocks, int64_t block_size, int64_t kv_heads, int64_t head_dim,
              const torch::TensorOptions& options);
  // Bytes one block takes: keys and values of every layer.
  static int64_t block_bytes(int64_t layers, int64_t block_size, int64_t kv_heads, int64_t head_dim,
                             torch::ScalarType dtype);

  int64_t layers() const { return static_cast<int64_t>(keys_.size()); }
  int64_t block_size() const { return block_size_; }
  int64_t blocks() const { return blocks_; }
  // Blocks a reservation can take: never used, or cached and referenced by no sequence.
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size() + evictable_.size()); }
  int64_t used_blocks() const { return blocks_ - free_blocks(); }
  // Blocks that hold `length` positions.
  int64_t blocks_for(int64_t length) const { return (length + block_size_ - 1) / block_size_; }
  // Grows `table` to hold `length` positions; false, taking nothing, when too few blocks are free.
  bool reserve(BlockTable& table, int64_t length);
  // Gives every block of `table` back; it then holds nothing.
  void release(BlockTable& table);
  // Gives back the blocks of `table` that hold only positions before `position` (a sliding window's past).
  void release_before(BlockTable& table, int64_t position);
  // Checks the block accounting against the tables of every live sequence: each block referenced exactly as
  // often as the tables hold it, each block in exactly one of {free, cached and evictable, referenced}, every
  // cached block filed under its key. An empty string when consistent, else what is wrong.
  std::string audit(const std::vector<const BlockTable*>& tables) const;

  void set_prefix_caching(bool on) { prefix_caching_ = on; }
  bool prefix_caching() const { return prefix_caching_; }
  // An empty table takes the published blocks that hold the start of `tokens`, at most max_positions positions;
  // the positions it now holds (a multiple of the block size; 0 without prefix caching).
  int64_t share_prefix(BlockTable& table, const std::vector<int64_t>& tokens, int64_t max_positions);
  // Files the table's full blocks (tokens[0, table.length) are their tokens) for share_prefix; a block whose
  // prefix another block already holds stays private.
  void publish(const BlockTable& table, const std::vector<int64_t>& tokens);
  // Published blocks, referenced or not.
  int64_t cached_blocks() const { return static_cast<int64_t>(by_key_.size()); }
  // (N, K, D) of a layer
  torch::Tensor& keys(int64_t layer) { return keys_.at(layer); }
  torch::Tensor& values(int64_t layer) { return values_.at(layer); }

 private:
  int64_t blocks_, block_size_;
  std::vector<torch::Tensor> keys_, values_;
  std::vector<int64_t> free_;  // a stack: the block freed last is reused first

  // Prefix caching.
  struct Published {
    bool filed = false;
    uint64_t key = 0, parent = 0;
    std::vector<int64_t> tokens;
  };
  int64_t take_block();  // a free block, else the least recently released cached one (unfiled)
  bool prefix_caching_ = false;
  std::vector<int64_t> refs_;          // sequences holding each block
  std::vector<Published> published_;   // by block
  std::unordered_map<uint64_t, int64_t> by_key_;
  std::list<int64_t> evictable_;       // cached blocks no sequence holds, least recently released first
  std::vector<std::list<int64_t>::iterator> evictable_at_;
};

// One KVCache per layer of `pool` for forwards of the sequences `rows` (batch row b is *rows[b]), T new positions
// each: every layer's append writes row b's keys and values at positions [length_b, length_b + T) of its table,
// growing it from the pool (throws loom::Error when the pool is dry: the engine reserves first), and returns
// row b's kept positions right-aligned; the last layer's append commits the new lengths. Rows of different
// lengths make a ragged batch (seen_rows, key_padding). window > 0 reads at most the last `window` positions
// kept before the new ones, as the contiguous cache keeps, and the last layer's append then frees each row's
// blocks that the next forward will not read (release_before). select (beam search) is the contiguous cache's.
// On the CPU a forward of up to 16 positions a row (a decode step, a speculative verification, a short prefill
// chunk; models/attention.cpp decides) attends through the tables instead (append_and_attend: models/paged_decode_attention.h reads each row's slots in
// place, no gather, no padding); CUDA pools and autograd gather.
KVCaches paged_kv_caches(KVBlockPool& pool, std::vector<BlockTable*> rows, int64_t window = 0);

}  // namespace loom
