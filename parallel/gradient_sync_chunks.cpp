// Which parameters share a gradient bucket (parallel/gradient_sync.h): by size, or by ZeRO-3 unit.
#include "parallel/gradient_sync.h"

#include <algorithm>
#include <unordered_map>

namespace loom {
namespace {

bool holds(const std::vector<torch::Tensor>& tensors, const torch::Tensor& p) {
  return std::any_of(tensors.begin(), tensors.end(),
                     [&p](const torch::Tensor& t) { return t.unsafeGetTensorImpl() == p.unsafeGetTensorImpl(); });
}

}  // namespace

std::vector<GradientSync::Chunk> GradientSync::chunks_by_size(const std::vector<std::vector<torch::Tensor>>& groups,
                                                              double bucket_mb,
                                                              const std::vector<torch::Tensor>& deferred) {
  const auto bucket_bytes = static_cast<int64_t>(bucket_mb * 1024 * 1024);
  std::vector<Chunk> chunks;
  for (size_t g = 0; g < groups.size(); ++g) {
    // Backward produces gradients roughly from the last layer to the first: bucket in that order.
    chunks.push_back({g, 0, {}});
    int64_t bytes = 0;
    for (auto it = groups[g].rbegin(); it != groups[g].rend(); ++it) {
      const auto& p = *it;
      if (!p.requires_grad()) continue;
      // A deferred parameter's bucket is kept whole until finish() (zero 2): it holds nothing else.
      if (holds(deferred, p)) {
        chunks.push_back({g, 0, {p}, true});
        continue;
      }
      auto& chunk = chunks.back().parameters;
      const bool dtype_change = !chunk.empty() && chunk.front().dtype() != p.dtype();
      if (!chunk.empty() && (bytes >= bucket_bytes || dtype_change || chunks.back().deferred)) {
        chunks.push_back({g, 0, {}});
        bytes = 0;
      }
      chunks.back().parameters.push_back(p);
      bytes += p.numel() * static_cast<int64_t>(p.element_size());
    }
  }
  return chunks;
}

std::vector<GradientSync::Chunk> GradientSync::chunks_by_unit(const std::vector<std::vector<torch::Tensor>>& groups,
                                                              const std::vector<std::vector<torch::Tensor>>& units,
                                                              const std::vector<torch::Tensor>& deferred) {
  std::unordered_map<const void*, size_t> group_of;
  for (size_t g = 0; g < groups.size(); ++g)
    for (const auto& p : groups[g])
      if (p.requires_grad()) group_of[p.unsafeGetTensorImpl()] = g;
  std::vector<Chunk> chunks;
  size_t placed = 0;
  for (size_t u = 0; u < units.size(); ++u) {
    std::vector<Chunk> by_group(groups.size());
    for (const auto& p : units[u]) {
      const auto found = group_of.find(p.unsafeGetTensorImpl());
      if (found == group_of.end()) continue;  // frozen
      by_group[found->second].parameters.push_back(p);
      by_group[found->second].deferred = by_group[found->second].deferred || holds(deferred, p);
      ++placed;
    }
    for (size_t g = 0; g < groups.size(); ++g) {
      by_group[g].group = g;
      by_group[g].unit = u;
      chunks.push_back(std::move(by_group[g]));
    }
  }
  TORCH_CHECK(placed == group_of.size(), "GradientSync: the units hold ", placed, " of the ", group_of.size(),
              " trainable parameters (each must be in exactly one unit)");
  return chunks;
}

}  // namespace loom
