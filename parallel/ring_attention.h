// Ring attention (context parallelism): attention of this CP rank's queries against every position's keys
// and values when the sequence is split over the ranks of a CP group (parallel/context_parallel_layout.h:
// each rank holds chunks r and 2 cp - 1 - r). The key/value blocks go round the ring: at each of cp steps a
// rank sends the block it holds to rank r + 1 and receives the next from rank r - 1 (async, overlapped with
// its product against the current block), and merges the block's partial result into its output by the
// log-sum-exp (online softmax, fp32 statistics). Chunk pairs that the mask hides entirely (causal keys after
// every query, keys beyond the sliding window) are skipped. Backward is the flash-attention backward over the
// same ring: the key/value blocks go round again and their gradients travel with them, each rank adding its
// part, until they arrive home. With grouped-query heads only the K kv heads travel.
// Every rank of the group must make the same calls (the exchanges are matched in order). Each step's send
// and receive are ordered by the rank's parity, so a backend that runs a group's operations in order on one
// stream, a send waiting for its receiver (NCCL), pairs them as MPI's separate send and receive threads do.
#pragma once
#include <torch/torch.h>

#include "parallel/communicator.h"

namespace loom {

struct RingAttentionOptions {
  Communicator* group = nullptr;  // the CP group: its size is cp, its rank this rank's chunk pair
  bool causal = true;
  int64_t window = 0;  // > 0: each query sees keys at distance < window (before it when causal)
  double scale = 0.0;  // 0: 1 / sqrt(D), SDPA's
  // Keys per score tile: a chunk's queries meet a block's keys this many at a time, so that the fp32 scores and
  // probabilities held at once are (B, H, L / 2, key_tile), not (B, H, L / 2, L / 2). 0: ring_key_tile's choice.
  int64_t key_tile = 0;
  // ALiBi: (H) the query heads' slopes; the scores of query i and key j get -slope * |i - j| (global
  // positions), as models/attention.cpp adds for SDPA. Undefined: none.
  torch::Tensor alibi_slopes;
  // Adds the seconds this rank waits on the ring's messages (what the products did not hide), forward and
  // backward; null: not counted.
  double* waited_s = nullptr;
  // Attention-probability dropout (training): each query-key probability is kept with 1 - dropout and the kept
  // ones scaled by 1 / (1 - dropout), as SDPA's dropout. The masks are attention_dropout_scale(dropout_seed, ...)
  // of the pairs' global positions (parallel/attention_dropout.h): backward regenerates them, none is kept.
  double dropout = 0.0;
  int64_t dropout_seed = 0;  // in [0, 2^31): draw_attention_dropout_seed()
};

// The keys per score tile for query chunks of `chunk` positions: `key_tile` if > 0, else as many as keep a tile
// within kRingTilePairs query-key pairs per head (512 KiB of fp32 scores) but at least kRingMinKeyTile (smaller
// products run slowly), never more than the chunk.
constexpr int64_t kRingTilePairs = int64_t{1} << 17;
constexpr int64_t kRingMinKeyTile = 64;
int64_t ring_key_tile(int64_t key_tile, int64_t chunk);

// q (B, H, L, D), k and v (B, K, L, D) with K dividing H (query head h reads kv head h / (H / K), as SDPA's
// enable_gqa): this rank's L = T / cp positions of a sequence of T, in the layout's local order. Returns
// (B, H, L, D) in q's dtype, equal to SDPA over the whole sequence (causal or full, with the window) at these
// positions (with dropout: SDPA's math over the whole sequence with attention_dropout_scale's masks). Computed
// in fp32 whatever the inputs' dtype; differentiable in q, k and v.
// key_starts (B, L) int64 (packed documents, models/document_mask.h): the global position of the first key
// each local query may see (its document's first token); undefined: no document mask. Only with causal.
torch::Tensor ring_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const RingAttentionOptions& options, const torch::Tensor& key_starts = {});

}  // namespace loom
