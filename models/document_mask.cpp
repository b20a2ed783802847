#include "models/document_mask.h"

#include "core/error.h"

namespace loom {

torch::Tensor document_starts(const torch::Tensor& positions) {
  const auto index = torch::arange(positions.size(1), positions.options()).unsqueeze(0);  // (1, T)
  return index - positions;
}

torch::Tensor document_causal_mask(const torch::Tensor& positions) {
  const int64_t T = positions.size(1);
  const auto keys = torch::arange(T, positions.options()).view({1, 1, T});         // (1, 1, S)
  const auto queries = keys.view({1, T, 1});                                       // (1, T, 1)
  const auto starts = document_starts(positions).unsqueeze(2);                     // (B, T, 1)
  return ((keys <= queries) & (keys >= starts)).unsqueeze(1);                      // (B, 1, T, S)
}

void check_document_positions(const torch::Tensor& positions, int64_t B, int64_t T) {
  LOOM_CHECK(positions.dim() == 2 && positions.size(0) == B && positions.size(1) == T &&
                 positions.scalar_type() == torch::kLong,
             "document positions must be (B, T) = (", B, ", ", T, ") int64, not ", positions.sizes());
}

}  // namespace loom
