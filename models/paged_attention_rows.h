// The rows of paged attention (models/paged_decode_attention.h): each sequence's new query positions (one when
// decoding; a prefill chunk's or a speculative verification's several) against the keys and values they see,
// read where a paged KV pool keeps them (through each sequence's slots) instead of gathered into one padded
// tensor. paged_attention_rows_impl.h is compiled twice, into the namespaces DEFAULT and AVX512
// (core/cpu_kernels.h); paged_decode_attention.cpp picks one at run time. Only these plain declarations cross
// between the two.
#pragma once
#include <cstdint>

namespace loom::paged_attention_rows {

// Tasks are (row b, kv head g, tile of up to kQueryTile query positions) triples, task = (b * kv_heads + g) *
// tiles + tile with tiles = ceil(queries / kQueryTile); each computes the query heads of its group
// (h = g * heads / kv_heads + i, grouped-query attention) at its tile's positions, in fp32.
constexpr int64_t kQueryTile = 16;
// With at least kKeyBlockRows query rows a task (tile queries x group heads), scores go by blocks of kKeyBlock key
// rows transposed (no lane sums; the transpose shared by the rows); fewer (decoding) take a dot product each.
constexpr int64_t kKeyBlock = 16, kKeyBlockRows = 4;

struct DecodeRows {
  int64_t heads = 0, kv_heads = 0, head_dim = 0;  // H, K, D
  int64_t queries = 1;                            // T: new positions a row
  const float* q = nullptr;                       // (B, H, T, D)
  float* out = nullptr;                           // (B, H, T, D)
  const void* keys = nullptr;                     // the pool's (N, K, D), float or bf16
  const void* values = nullptr;
  bool bf16 = false;                              // the pool holds bf16 (else float)
  // Row b's keys are at slots[offsets[b], offsets[b + 1]) (n of them, n >= T), consecutive positions oldest
  // first; its T queries are the last T of those positions, so query t sees keys j <= n - T + t (causal), of
  // which only the last `window` with window > 0, key j being (n - T + t - j) positions before it (ALiBi).
  const int64_t* slots = nullptr;
  const int64_t* offsets = nullptr;  // (B + 1)
  int64_t window = 0;
  float scale = 1.0f;                   // applied to q.k before the bias
  const float* alibi_slopes = nullptr;  // (H): adds -slope_h * distance; null: no bias
  int64_t tiles() const { return (queries + kQueryTile - 1) / kQueryTile; }
};

// Tasks [begin, end).
namespace DEFAULT {
void decode_rows(const DecodeRows& rows, int64_t begin, int64_t end);
}  // namespace DEFAULT
namespace AVX512 {
void decode_rows(const DecodeRows& rows, int64_t begin, int64_t end);
}  // namespace AVX512

}  // namespace loom::paged_attention_rows
