#include "parallel/context_parallel_layout.h"

#include <limits>

#include "core/error.h"

namespace loom {

std::array<int64_t, 2> cp_chunks_of(int64_t cp, int64_t rank) {
  LOOM_CHECK(cp >= 1 && rank >= 0 && rank < cp, "context parallelism: rank ", rank, " of ", cp);
  return {rank, 2 * cp - 1 - rank};
}

namespace {

int64_t chunk_length(int64_t seq_len, int64_t cp) {
  LOOM_CHECK(cp >= 1 && seq_len % (2 * cp) == 0, "context parallelism: the sequence length ", seq_len,
             " is not a multiple of 2 x cp = ", 2 * cp, " (the load-balanced layout cuts it into 2 x cp chunks)");
  return seq_len / (2 * cp);
}

}  // namespace

torch::Tensor cp_positions_of(int64_t seq_len, int64_t cp, int64_t rank) {
  const int64_t c = chunk_length(seq_len, cp);
  std::vector<torch::Tensor> parts;
  for (int64_t chunk : cp_chunks_of(cp, rank)) parts.push_back(torch::arange(chunk * c, (chunk + 1) * c, torch::kLong));
  return torch::cat(parts);
}

torch::Tensor ContextParallelism::positions(int64_t local_len, const torch::Device& device) const {
  return cp_positions_of(local_len * size(), size(), rank()).to(device);
}

torch::Tensor cp_split(const torch::Tensor& x, int64_t dim, int64_t cp, int64_t rank) {
  const int64_t c = chunk_length(x.size(dim), cp);
  const auto [early, late] = cp_chunks_of(cp, rank);
  return torch::cat({x.narrow(dim, early * c, c), x.narrow(dim, late * c, c)}, dim);
}

torch::Tensor cp_unsplit(const std::vector<torch::Tensor>& parts, int64_t dim) {
  const int64_t cp = static_cast<int64_t>(parts.size());
  LOOM_CHECK(cp >= 1, "cp_unsplit: no parts");
  const int64_t local = parts[0].size(dim);
  LOOM_CHECK(local % 2 == 0, "cp_unsplit: a local part of odd length ", local);
  const int64_t c = local / 2;
  std::vector<torch::Tensor> chunks(2 * cp);
  for (int64_t r = 0; r < cp; ++r) {
    LOOM_CHECK(parts[r].size(dim) == local, "cp_unsplit: rank ", r, "'s part has ", parts[r].size(dim),
               " positions, rank 0's ", local);
    const auto [early, late] = cp_chunks_of(cp, r);
    chunks[early] = parts[r].narrow(dim, 0, c);
    chunks[late] = parts[r].narrow(dim, c, c);
  }
  return torch::cat(chunks, dim);
}

BlockVisibility block_visibility(int64_t q_first, int64_t k_first, int64_t len, bool causal, int64_t window) {
  return block_visibility(q_first, len, k_first, len, causal, window);
}

BlockVisibility block_visibility(int64_t q_first, int64_t q_len, int64_t k_first, int64_t k_len, bool causal,
                                 int64_t window) {
  // Over the block, query - key takes every value in [lowest, highest].
  const int64_t lowest = q_first - (k_first + k_len - 1), highest = q_first + q_len - 1 - k_first;
  // A pair is visible when (not causal or d >= 0) and (no window or |d| < window): an interval of d.
  int64_t from = causal ? 0 : std::numeric_limits<int64_t>::min();
  int64_t to = std::numeric_limits<int64_t>::max();
  if (window > 0) {
    from = std::max(from, -(window - 1));
    to = window - 1;
  }
  if (highest < from || lowest > to) return BlockVisibility::kNone;
  if (lowest >= from && highest <= to) return BlockVisibility::kAll;
  return BlockVisibility::kSome;
}

}  // namespace loom
