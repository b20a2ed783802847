// Decode attention through a paged KV pool (PagedAttention's kernel, on the CPU): each sequence's one new query
// against the keys and values it sees, read in place from the pool's slots through the sequence's block table,
// with grouped-query heads, ALiBi's bias and fp32 accumulation over float or bf16 pools. The paged cache
// (models/paged_kv_cache.h) runs it for a ragged batch's decode step instead of gathering every row's history
// into a padded (B, K, S, D) tensor for SDPA with a key padding mask; the sliding window is which slots a row
// passes, RoPE was applied to q and k before the cache. The rows are models/paged_attention_rows.h, built twice
// (core/cpu_kernels.h).
// Shapes: B rows, H query heads, K key/value heads (K divides H), D head size, N pool slots.
#pragma once
#include <torch/torch.h>

#include <vector>

namespace loom {

// Whether the kernel takes these: CPU tensors without autograd, q and the pool float or bf16 (or both double: a
// plain loop for the tests' double-precision models).
bool paged_decode_attention_applies(const torch::Tensor& q, const torch::Tensor& pool);

// q (B, H, 1, D); keys and values the pool's (N, K, D); row b sees slots[offsets[b], offsets[b + 1]) (oldest first,
// its query at the newest one's position); scores q.k * scale, minus slope_h * distance with alibi_slopes (H)
// defined. -> (B, H, 1, D) in q's dtype. force_portable: the DEFAULT build even on an AVX-512 CPU (tests).
torch::Tensor paged_decode_attention(const torch::Tensor& q, const torch::Tensor& keys, const torch::Tensor& values,
                                     const std::vector<int64_t>& slots, const std::vector<int64_t>& offsets,
                                     double scale, const torch::Tensor& alibi_slopes = {},
                                     bool force_portable = false);

}  // namespace loom
