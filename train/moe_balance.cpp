#include "train/moe_balance.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"
#include "models/moe_router.h"

namespace loom {

MoeBalance::MoeBalance(const ModelConfig& config, torch::nn::Module& model) : config_(config) {
  if (!config.moe.enabled()) return;
  for (int64_t i = 0; i < config.n_layers; ++i)
    if (config.moe.layer_is_moe(i)) moe_blocks_.push_back(i);
  for (const auto& item : model.named_modules()) {
    auto* moe = dynamic_cast<MoeImpl*>(item.value().get());
    if (moe == nullptr) continue;
    // "blocks.N.mlp"
    const std::string& name = item.key();
    const auto first = name.find("blocks.");
    LOOM_CHECK(first != std::string::npos, "internal: an MoE layer outside the blocks: ", name);
    const int64_t block = std::stoll(name.substr(first + 7));
    const auto at = std::find(moe_blocks_.begin(), moe_blocks_.end(), block);
    LOOM_CHECK(at != moe_blocks_.end(), "internal: block ", block, " is not an MoE block of model.moe");
    local_.emplace_back(at - moe_blocks_.begin(), moe);
  }
}

void MoeBalance::set_loss_weight(double weight) {
  for (auto& [_, moe] : local_) moe->set_aux_loss_weight(weight);
}

std::vector<int64_t> MoeBalance::whole_sequence_tokens(const std::vector<int64_t>& tokens, const Mesh& mesh) const {
  if (!active() || mesh.cp() == 1) return tokens;
  auto sums = torch::tensor(std::vector<double>(tokens.begin(), tokens.end()), torch::kDouble);
  mesh.host_group(kCpAxes).all_reduce(sums);
  std::vector<int64_t> out;
  for (int64_t m = 0; m < sums.size(0); ++m) out.push_back(static_cast<int64_t>(sums[m].item<double>()));
  return out;
}

void MoeBalance::finish_step(const Mesh& mesh) {
  if (!active()) return;
  const int64_t E = config_.moe.num_experts, L = static_cast<int64_t>(moe_blocks_.size());
  // Per layer: E loads, the aux and z loss sums, dropped slots, micro-batches. TP ranks hold copies of the
  // same layer (the same tokens): only tp rank 0 counts; DP ranks add their tokens; each stage its layers.
  // CP ranks add their parts of the same micro-batches' loads and losses, which cp rank 0 counts.
  const int64_t width = E + 4;
  auto sums = torch::zeros({L * width}, torch::kDouble);
  const bool counts = mesh.coord(MeshAxis::kTp) == 0;
  const bool counts_micro_batches = mesh.coord(kCpAxes) == 0;
  for (auto& [index, moe] : local_) {
    MoeStepStats stats = moe->take_stats();
    if (!counts) continue;
    auto row = sums.narrow(0, index * width, width);
    row.narrow(0, 0, E).copy_(stats.load);
    row[E] = stats.aux_loss;
    row[E + 1] = stats.z_loss;
    row[E + 2] = static_cast<double>(stats.dropped);
    row[E + 3] = counts_micro_batches ? static_cast<double>(stats.micro_batches) : 0.0;
  }
  mesh.world().all_reduce(sums);
  metrics_ = nlohmann::json::object();
  max_over_mean_ = 0;
  aux_ = 0;
  dropped_ = 0;
  for (int64_t l = 0; l < L; ++l) {
    const auto row = sums.narrow(0, l * width, width);
    const auto load = row.narrow(0, 0, E);
    const double micro = std::max(1.0, row[E + 3].item<double>());
    const double mean = load.mean().item<double>(), max = load.max().item<double>();
    nlohmann::json m = {{"max_load", max},
                        {"mean_load", mean},
                        {"aux_loss", row[E].item<double>() / micro},
                        {"z_loss", row[E + 1].item<double>() / micro},
                        {"dropped", static_cast<int64_t>(row[E + 2].item<double>())}};
    metrics_["blocks." + std::to_string(moe_blocks_[static_cast<size_t>(l)])] = m;
    max_over_mean_ = std::max(max_over_mean_, mean > 0 ? max / mean : 0.0);
    aux_ += m["aux_loss"].get<double>() / static_cast<double>(L);
    dropped_ += m["dropped"].get<int64_t>();
  }
  if (config_.moe.bias_update_rate > 0) {
    torch::NoGradGuard no_grad;
    for (auto& [index, moe] : local_) {
      auto bias = moe->expert_bias();
      bias.copy_(updated_expert_bias(bias, sums.narrow(0, index * width, E), config_.moe.bias_update_rate));
    }
  }
}

std::string MoeBalance::summary() const {
  if (!active()) return "";
  return fmt::format(" | moe max/mean load {:.2f} | aux {:.3f}{}", max_over_mean_, aux_,
                     config_.moe.capacity_factor > 0 ? fmt::format(" | dropped {}", dropped_) : "");
}

}  // namespace loom
