// Attention-probability dropout whose masks are a function of where a probability is, not of the order it is
// drawn in: ring attention (parallel/ring_attention.h) computes a query chunk's probabilities one key tile at a
// time, in forward and again in backward, on whichever rank holds the queries, so a mask drawn from a generator
// would have to be kept for backward (quadratic in the sequence) and would differ with the tiling. Here each
// (query, key) pair's keep bit is a counter-based hash of (seed, batch row, head, global query position, global
// key position): backward regenerates exactly forward's masks, and a sequence gets the same masks whatever the
// cp size and key tile. The seed is drawn once per attention call from the device's generator (the TP stream
// when heads are split, parallel/tensor_parallel_rng.h), so checkpoints and recompute reproduce it.
#pragma once
#include <torch/torch.h>

namespace loom {

// (B, H, Lq, Lk) fp32 on the positions' device: what dropout multiplies the probability of query_positions[i]
// and key_positions[j] (int64 global positions) by: 1 / (1 - p) where the pair is kept, each independently
// with probability 1 - p, else 0. seed: any value in [0, 2^32). On the CPU one fused pass over the output.
torch::Tensor attention_dropout_scale(int64_t seed, double p, int64_t B, int64_t H, const torch::Tensor& query_positions,
                                      const torch::Tensor& key_positions);

// A fresh dropout seed in [0, 2^31) drawn from `device`'s default generator (whatever stream is forked in).
int64_t draw_attention_dropout_seed(const torch::Device& device);

namespace detail {
// The same values from elementwise tensor ops, for devices without the CPU pass (CUDA); the unit test checks
// the two agree bit for bit.
torch::Tensor attention_dropout_scale_by_tensor_ops(int64_t seed, double p, int64_t B, int64_t H,
                                                    const torch::Tensor& query_positions,
                                                    const torch::Tensor& key_positions);
}  // namespace detail

}  // namespace loom
