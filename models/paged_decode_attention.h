// Attention through a paged KV pool (PagedAttention's kernel, on the CPU): each sequence's new queries (one when
// decoding; a prefill chunk's or a speculative verification's several, causal) against the keys and values they
// see, read in place from the pool's slots through the sequence's block table, with grouped-query heads, a sliding
// window, ALiBi's bias and fp32 accumulation over float or bf16 pools. The paged cache (models/paged_kv_cache.h)
// runs it for every forward of a ragged batch on the CPU instead of gathering every row's history into a padded
// (B, K, S, D) tensor for SDPA with a key padding mask; RoPE was applied to q and k before the cache. Decoding is
// the case T = 1. The rows are models/paged_attention_rows.h, built twice (core/cpu_kernels.h).
// Shapes: B rows, H query heads, T new positions a row, K key/value heads (K divides H), D head size, N pool slots.
#pragma once
#include <torch/torch.h>

#include <vector>

namespace loom {

// Whether the kernel takes these: CPU tensors without autograd, q and the pool float or bf16 (or both double: a
// plain loop for the tests' double-precision models).
bool paged_decode_attention_applies(const torch::Tensor& q, const torch::Tensor& pool);

// q (B, H, T, D); keys and values the pool's (N, K, D); row b's keys are at slots[offsets[b], offsets[b + 1])
// (consecutive positions, oldest first, at least T), its T queries at the last T of those positions: query t sees
// the keys up to its own position (causal), only the last `window` with window > 0; scores q.k * scale, minus
// slope_h * distance with alibi_slopes (H) defined. -> (B, H, T, D) in q's dtype. force_portable: the DEFAULT
// build even on an AVX-512 CPU (tests).
torch::Tensor paged_decode_attention(const torch::Tensor& q, const torch::Tensor& keys, const torch::Tensor& values,
                                     const std::vector<int64_t>& slots, const std::vector<int64_t>& offsets,
                                     double scale, const torch::Tensor& alibi_slopes = {}, int64_t window = 0,
                                     bool force_portable = false);

}  // namespace loom
