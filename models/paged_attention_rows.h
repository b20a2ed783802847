// The rows of paged decode attention (models/paged_decode_attention.h): one new query position a sequence against
// the keys and values it sees, read where a paged KV pool keeps them (through each sequence's slots) instead of
// gathered into one padded tensor. paged_attention_rows_impl.h is compiled twice, into the namespaces DEFAULT and
// AVX512 (core/cpu_kernels.h); paged_decode_attention.cpp picks one at run time. Only these plain declarations
// cross between the two.
#pragma once
#include <cstdint>

namespace loom::paged_attention_rows {

// Tasks are (row b, kv head g) pairs, task = b * kv_heads + g; each computes the query heads of its group
// (h = g * heads / kv_heads + i, grouped-query attention) in fp32.
struct DecodeRows {
  int64_t heads = 0, kv_heads = 0, head_dim = 0;  // H, K, D
  const float* q = nullptr;                        // (B, H, D)
  float* out = nullptr;                            // (B, H, D)
  const void* keys = nullptr;                      // the pool's (N, K, D), float or bf16
  const void* values = nullptr;
  bool bf16 = false;                               // the pool holds bf16 (else float)
  // Row b sees the keys at slots[offsets[b], offsets[b + 1]), oldest first; its query is at the newest one's
  // position, so key j of n is (n - 1 - j) positions before it (ALiBi's distance).
  const int64_t* slots = nullptr;
  const int64_t* offsets = nullptr;  // (B + 1)
  float scale = 1.0f;                // applied to q.k before the bias
  const float* alibi_slopes = nullptr;  // (H): adds -slope_h * distance; null: no bias
};

// Tasks [begin, end).
namespace DEFAULT {
void decode_rows(const DecodeRows& rows, int64_t begin, int64_t end);
}  // namespace DEFAULT
namespace AVX512 {
void decode_rows(const DecodeRows& rows, int64_t begin, int64_t end);
}  // namespace AVX512

}  // namespace loom::paged_attention_rows
