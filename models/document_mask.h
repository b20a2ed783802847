// Packed documents (data.document_mask): a training window holds several documents back to back, and
// each token attends only to the earlier tokens of its own document, with positions that restart at each
// document. The data gives the model one tensor for it, each token's position inside its document
// (B, T) int64 (data/corpus/lm_sampler.h); everything else follows from it: token i's document starts at
// i - position[i], so query i sees keys [i - position[i], i], a block-diagonal causal mask.
// An undefined positions tensor means one document per row (positions 0 .. T - 1): no mask is built.
#pragma once
#include <torch/torch.h>

namespace loom {

// (B, T) int64 positions -> (B, T) int64: the first key each query may see (i - position[i]).
torch::Tensor document_starts(const torch::Tensor& positions);

// (B, T) int64 positions -> (B, 1, T, T) bool: true where query i may see key j (same document, j <= i).
torch::Tensor document_causal_mask(const torch::Tensor& positions);

// Throws unless positions is (B, T) int64 (its values are the sampler's: runs of 0, 1, 2, ...).
void check_document_positions(const torch::Tensor& positions, int64_t B, int64_t T);

}  // namespace loom
