// Context parallelism's sequence layout: which positions of a sequence each CP rank holds, and which
// blocks of keys a block of queries can see at all. Causal attention's work grows with the query
// position, so a plain cut into cp contiguous parts would leave the last rank cp times the first's work;
// instead the sequence is cut into 2 * cp chunks of equal length and rank r holds chunks r and
// 2 * cp - 1 - r (one early, one late: every rank then has the same number of visible query-key pairs).
// A rank's local sequence is its two chunks back to back, in that order. ContextParallelism is how a model
// is split so: made once from the mesh's cp group, read by the embeddings (global positions) and attention
// (ring attention over the group).
#pragma once
#include <torch/torch.h>

#include <array>
#include <memory>
#include <vector>

#include "parallel/communicator.h"

namespace loom {

// How a model's sequences are split over its context-parallel group; the default: whole sequences.
class ContextParallelism {
 public:
  ContextParallelism() = default;
  explicit ContextParallelism(Communicator* group) : group_(group) {}

  int64_t size() const { return group_ != nullptr ? group_->size() : 1; }
  int64_t rank() const { return group_ != nullptr ? group_->rank() : 0; }
  // The group when sequences are split (more than one rank), else null: the layers work on whole sequences.
  Communicator* split_group() const { return size() > 1 ? group_ : nullptr; }
  // The global positions (cp_positions_of) of this rank's `local_len` tokens, of sequences of
  // local_len * size(): (local_len) int64 on `device`.
  torch::Tensor positions(int64_t local_len, const torch::Device& device) const;
  // Seconds the model's ring attention has waited on its messages so far, every layer's forward and backward
  // (copies share the count): `loom bench`'s exposed cp communication. ring_waited_s() is what adds to it.
  double exchange_wait_s() const { return *waited_s_; }
  double* ring_waited_s() const { return waited_s_.get(); }

 private:
  Communicator* group_ = nullptr;
  std::shared_ptr<double> waited_s_ = std::make_shared<double>(0.0);
};

// The global chunk indices rank `rank` of `cp` holds, in its local order: {rank, 2 cp - 1 - rank}.
std::array<int64_t, 2> cp_chunks_of(int64_t cp, int64_t rank);

// The global positions (0 .. seq_len - 1) of rank `rank`'s local tokens, (seq_len / cp) int64, in local order.
// Throws unless 2 * cp divides seq_len.
torch::Tensor cp_positions_of(int64_t seq_len, int64_t cp, int64_t rank);

// Rank `rank`'s local part of x along dim `dim` (the whole sequence): its two chunks, concatenated.
torch::Tensor cp_split(const torch::Tensor& x, int64_t dim, int64_t cp, int64_t rank);

// The inverse: the whole sequence along dim `dim` from every rank's local part (parts[r] is rank r's).
torch::Tensor cp_unsplit(const std::vector<torch::Tensor>& parts, int64_t dim);

// Which query-key pairs of a block of `q_len` queries at global positions [q_first, q_first + q_len) against
// `k_len` keys at [k_first, k_first + k_len) are visible under a causal mask (key <= query) and/or a sliding
// window (|query - key| < window; window 0: none): none (the block is skipped), all (no mask needed), or
// some (the block needs its mask). The second form: a square block of len queries and len keys.
enum class BlockVisibility { kNone, kAll, kSome };
BlockVisibility block_visibility(int64_t q_first, int64_t q_len, int64_t k_first, int64_t k_len, bool causal,
                                 int64_t window);
BlockVisibility block_visibility(int64_t q_first, int64_t k_first, int64_t len, bool causal, int64_t window);

}  // namespace loom
