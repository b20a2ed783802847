#include "train/optimizer_state.h"

#include <map>
#include <unordered_map>

#include "core/error.h"
#include "train/numbered_archive.h"

namespace loom {
namespace fs = std::filesystem;
namespace {

constexpr const char* kOptimizerArchive = "optimizer_state";

std::unordered_map<const void*, std::string> parameter_names(torch::nn::Module& model) {
  std::unordered_map<const void*, std::string> names;
  for (const auto& p : model.named_parameters()) names[p.value().unsafeGetTensorImpl()] = p.key();
  return names;
}

}  // namespace

StoredShape stored_shape(const std::map<const void*, ExpertPlacement>& placements, const torch::Tensor& parameter) {
  const auto found = placements.find(parameter.unsafeGetTensorImpl());
  if (found == placements.end()) return {parameter.sizes().vec(), 0};
  return {found->second.shape, found->second.offset};
}

std::vector<torch::Tensor> optimizer_tensors(torch::optim::AdamW& optimizer) {
  std::vector<torch::Tensor> tensors;
  for (auto& group : optimizer.param_groups())
    tensors.insert(tensors.end(), group.params().begin(), group.params().end());
  return tensors;
}

OptimizerLayout whole_parameter_layout(torch::optim::AdamW& optimizer) {
  OptimizerLayout layout{&optimizer, {}};
  for (const auto& p : optimizer_tensors(optimizer)) layout.slices.push_back({{p, 0, 0, p.numel()}});
  return layout;
}

void write_optimizer_state(torch::serialize::OutputArchive& archive, const OptimizerLayout& layout,
                           torch::nn::Module& model) {
  const auto names = parameter_names(model);
  const auto placements = expert_placements(model);
  const auto tensors = optimizer_tensors(*layout.optimizer);
  LOOM_CHECK(tensors.size() == layout.slices.size(), "optimizer layout does not match the optimizer");
  auto& states = layout.optimizer->state();
  torch::serialize::OutputArchive out;
  int64_t count = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    auto found = states.find(tensors[i].unsafeGetTensorImpl());
    if (found == states.end()) continue;  // no step taken yet
    const auto& state = static_cast<const torch::optim::AdamWParamState&>(*found->second);
    for (const auto& slice : layout.slices[i]) {
      torch::serialize::OutputArchive piece;
      piece.write("parameter", c10::IValue(names.at(slice.parameter.unsafeGetTensorImpl())));
      piece.write("offset", c10::IValue(stored_shape(placements, slice.parameter).offset + slice.parameter_offset));
      piece.write("step", c10::IValue(state.step()));
      piece.write("exp_avg", state.exp_avg().flatten().narrow(0, slice.offset, slice.length).clone());
      piece.write("exp_avg_sq", state.exp_avg_sq().flatten().narrow(0, slice.offset, slice.length).clone());
      out.write("slice" + std::to_string(count++), piece);
    }
  }
  out.write("slices", c10::IValue(count));
  archive.write(kOptimizerArchive, out);
}

std::map<std::string, ParameterMoments> unread_moments(const std::map<std::string, int64_t>& numels, torch::Dtype dtype) {
  std::map<std::string, ParameterMoments> moments;
  for (const auto& [name, n] : numels)
    moments[name] = {torch::zeros({n}, dtype), torch::zeros({n}, dtype), torch::zeros({n}, torch::kBool), -1};
  return moments;
}

std::map<std::string, ParameterMoments> unread_moments(const OptimizerLayout& layout, torch::nn::Module& model) {
  const auto names = parameter_names(model);
  const auto placements = expert_placements(model);
  // Only the parameters this rank's optimizer tensors hold a piece of are assembled (whole, as stored).
  std::map<std::string, int64_t> numels;
  for (const auto& slices : layout.slices)
    for (const auto& slice : slices)
      numels[names.at(slice.parameter.unsafeGetTensorImpl())] = stored_shape(placements, slice.parameter).numel();
  // The moments' dtype is the optimizer tensors' (fp32), not the parameters' (bf16 weights over an fp32 master).
  const auto tensors = optimizer_tensors(*layout.optimizer);
  return unread_moments(numels, tensors.empty() ? torch::kFloat : tensors.front().scalar_type());
}

void add_parameter_moments(torch::serialize::InputArchive& shard, const std::string& source,
                           std::map<std::string, ParameterMoments>& moments) {
  torch::serialize::InputArchive archive;
  if (!shard.try_read(kOptimizerArchive, archive)) throw Error(source + " holds no optimizer state");
  for_each_numbered(archive, "slices", "slice", [&](torch::serialize::InputArchive& piece) {
    c10::IValue name, offset, step;
    piece.read("parameter", name);
    auto found = moments.find(name.toStringRef());
    if (found == moments.end()) return;
    auto& m = found->second;
    torch::Tensor exp_avg, exp_avg_sq;
    piece.read("offset", offset);
    piece.read("step", step);
    piece.read("exp_avg", exp_avg);
    piece.read("exp_avg_sq", exp_avg_sq);
    const auto first = offset.toInt(), length = exp_avg.numel();
    if (first < 0 || first + length > m.exp_avg.numel())
      throw Error(source + ": optimizer state of " + found->first + " does not fit this model");
    m.exp_avg.narrow(0, first, length).copy_(exp_avg);
    m.exp_avg_sq.narrow(0, first, length).copy_(exp_avg_sq);
    m.covered.narrow(0, first, length).fill_(true);
    m.step = step.toInt();
  });
}

std::map<std::string, ParameterMoments> read_parameter_moments(const std::vector<fs::path>& shards,
                                                               const std::map<std::string, int64_t>& numels,
                                                               torch::Dtype dtype) {
  auto moments = unread_moments(numels, dtype);
  for (const auto& path : shards) {
    torch::serialize::InputArchive shard;
    shard.load_from(path.string(), torch::kCPU);
    add_parameter_moments(shard, path.string(), moments);
  }
  return moments;
}

void install_optimizer_state(const std::map<std::string, ParameterMoments>& moments, const OptimizerLayout& layout,
                             torch::nn::Module& model) {
  const auto names = parameter_names(model);
  const auto placements = expert_placements(model);
  const auto tensors = optimizer_tensors(*layout.optimizer);
  LOOM_CHECK(tensors.size() == layout.slices.size(), "optimizer layout does not match the optimizer");
  auto& states = layout.optimizer->state();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    auto exp_avg = torch::zeros_like(t), exp_avg_sq = torch::zeros_like(t);  // padding stays zero
    int64_t step = -1;
    for (const auto& slice : layout.slices[i]) {
      const auto& name = names.at(slice.parameter.unsafeGetTensorImpl());
      const auto& m = moments.at(name);
      if (m.step < 0) {
        step = -1;  // no state saved (a checkpoint before the first step): leave this tensor fresh
        break;
      }
      const int64_t first = stored_shape(placements, slice.parameter).offset + slice.parameter_offset;
      if (!m.covered.narrow(0, first, slice.length).all().item<bool>())
        throw Error("the checkpoint's optimizer state lacks part of " + name + " (a shard file is missing)");
      exp_avg.view(-1).narrow(0, slice.offset, slice.length).copy_(m.exp_avg.narrow(0, first, slice.length));
      exp_avg_sq.view(-1).narrow(0, slice.offset, slice.length).copy_(m.exp_avg_sq.narrow(0, first, slice.length));
      step = m.step;
    }
    if (step < 0) continue;
    auto state = std::make_unique<torch::optim::AdamWParamState>();
    state->step(step).exp_avg(exp_avg).exp_avg_sq(exp_avg_sq);
    states[t.unsafeGetTensorImpl()] = std::move(state);
  }
}

}  // namespace loom
