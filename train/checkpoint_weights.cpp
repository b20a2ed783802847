#include "train/checkpoint_weights.h"

#include <optional>
#include <unordered_map>

#include "core/error.h"
#include "train/numbered_archive.h"

namespace loom {
namespace fs = std::filesystem;
namespace {

constexpr const char* kWeightsArchive = "weights";
constexpr const char* kFormat2Archive = "model";  // format 2: the whole model, as Module::save writes it

// A tensor of a format-2 model archive by its full name ("blocks.3.attention.qkv.weight"): the archive nests
// like Module::save writes it, one sub-archive per child module. Nothing if the archive does not hold it.
std::optional<torch::Tensor> read_by_name(torch::serialize::InputArchive& archive, const std::string& name,
                                          bool is_buffer) {
  const auto dot = name.find('.');
  if (dot == std::string::npos) {
    torch::Tensor stored;
    if (!archive.try_read(name, stored, is_buffer)) return std::nullopt;
    return stored;
  }
  torch::serialize::InputArchive child;
  if (!archive.try_read(name.substr(0, dot), child)) return std::nullopt;
  return read_by_name(child, name.substr(dot + 1), is_buffer);
}

// Visits every piece of the tensors `names` (name -> whether a buffer) that a shard file holds. Returns
// whether the file is of format 2, which held the whole model in every file (so the first is enough); its
// tensors are visited whole.
template <typename Visit>
bool for_each_piece(torch::serialize::InputArchive& shard, const std::string& source,
                    const std::map<std::string, bool>& names, Visit&& visit) {
  torch::serialize::InputArchive archive;
  if (shard.try_read(kWeightsArchive, archive)) {
    for_each_numbered(archive, "pieces", "piece", [&](torch::serialize::InputArchive& stored) {
      c10::IValue name, offset, shape;
      stored.read("name", name);
      if (names.count(name.toStringRef()) == 0) return;
      WeightReader::Piece piece{name.toStringRef(), 0, {}, {}};
      stored.read("offset", offset);
      stored.read("shape", shape);
      stored.read("value", piece.value);
      piece.offset = offset.toInt();
      piece.shape = shape.toIntVector();
      visit(piece);
    });
    return false;
  }
  if (!shard.try_read(kFormat2Archive, archive)) throw Error(source + " holds no weights");
  for (const auto& [name, is_buffer] : names)
    if (auto value = read_by_name(archive, name, is_buffer))
      visit(WeightReader::Piece{name, 0, value->sizes().vec(), value->reshape(-1)});
  return true;
}

NamedSlice whole(const std::string& name, const torch::Tensor& t, bool is_buffer) {
  return {name, t.sizes().vec(), is_buffer, 0, 0, t.numel()};
}

}  // namespace

WeightReader::WeightReader(const WeightLayout& layout) : layout_(layout) {
  for (size_t t = 0; t < layout.tensors.size(); ++t) {
    covered_.push_back(torch::zeros({layout.tensors[t].numel()}, torch::kBool));
    for (size_t s = 0; s < layout.slices[t].size(); ++s) {
      const auto& slice = layout.slices[t][s];
      by_name_[slice.name].emplace_back(t, s);
      names_[slice.name] = slice.is_buffer;
    }
  }
}

void WeightReader::add(torch::serialize::InputArchive& shard, const std::string& source) {
  if (saw_whole_model_) return;
  saw_whole_model_ = for_each_piece(shard, source, names_, [&](const Piece& piece) { add(piece, source); });
}

void WeightReader::add(const Piece& piece, const std::string& source) {
    auto found = by_name_.find(piece.name);
    if (found == by_name_.end()) return;
    const int64_t first = piece.offset, last = first + piece.value.numel();
    for (const auto& [t, s] : found->second) {
      const auto& slice = layout_.slices[t][s];
      if (piece.shape != slice.shape)
        throw Error(source + " does not fit this model: " + piece.name + " is " +
                    c10::str(c10::IntArrayRef(piece.shape)) + " in the checkpoint and " +
                    c10::str(c10::IntArrayRef(slice.shape)) + " in the model (was the model config changed?)");
      const int64_t numel = c10::multiply_integers(slice.shape);
      if (first < 0 || last > numel) throw Error(source + ": the stored range of " + piece.name + " does not fit it");
      // The overlap [lo, hi) of the piece and the slice, in the parameter's flat elements.
      const int64_t lo = std::max(first, slice.parameter_offset);
      const int64_t hi = std::min(last, slice.parameter_offset + slice.length);
      if (lo >= hi) continue;
      const int64_t at = slice.offset + lo - slice.parameter_offset;
      copies_.emplace_back(layout_.tensors[t].view(-1).narrow(0, at, hi - lo),
                           piece.value.narrow(0, lo - first, hi - lo));
      covered_[t].narrow(0, at, hi - lo).fill_(true);
    }
  }

void WeightReader::finish(const std::string& source) {
  for (size_t t = 0; t < layout_.tensors.size(); ++t)
    for (const auto& slice : layout_.slices[t])
      if (const auto found = covered_[t].narrow(0, slice.offset, slice.length); !found.all().item<bool>())
        throw Error(source + " does not fit this model: it lacks " + (found.any().item<bool>() ? "part of " : "") +
                    slice.name + " (was the model config changed, or is a shard file missing?)");
  torch::NoGradGuard no_grad;
  for (auto& [target, value] : copies_) target.copy_(value);
}

WeightLayout weight_layout(torch::nn::Module& model, const OptimizerLayout* optimizer) {
  WeightLayout layout;
  if (optimizer != nullptr) {
    // The optimizer steps every parameter of the model, some of them (ZeRO) on other ranks.
    std::unordered_map<const void*, std::pair<std::string, torch::Tensor>> parameters;
    for (const auto& p : model.named_parameters()) parameters[p.value().unsafeGetTensorImpl()] = {p.key(), p.value()};
    const auto placements = expert_placements(model);
    layout.tensors = optimizer_tensors(*optimizer->optimizer);
    LOOM_CHECK(layout.tensors.size() == optimizer->slices.size(), "optimizer layout does not match the optimizer");
    for (const auto& slices : optimizer->slices) {
      auto& named = layout.slices.emplace_back();
      for (const auto& slice : slices) {
        const auto& [name, parameter] = parameters.at(slice.parameter.unsafeGetTensorImpl());
        const auto stored = stored_shape(placements, parameter);  // an ep rank's experts: rows of the whole
        named.push_back({name, stored.shape, false, stored.offset + slice.parameter_offset, slice.offset, slice.length});
      }
    }
  } else {
    const auto placements = expert_placements(model);
    for (const auto& p : model.named_parameters()) {
      layout.tensors.push_back(p.value());
      const auto stored = stored_shape(placements, p.value());
      layout.slices.push_back({{p.key(), stored.shape, false, stored.offset, 0, p.value().numel()}});
    }
  }
  for (const auto& b : model.named_buffers()) {
    layout.tensors.push_back(b.value());
    layout.slices.push_back({whole(b.key(), b.value(), true)});
  }
  return layout;
}

void write_weights(torch::serialize::OutputArchive& shard, const WeightLayout& layout) {
  torch::serialize::OutputArchive out;
  int64_t count = 0;
  for (size_t t = 0; t < layout.tensors.size(); ++t) {
    const auto flat = layout.tensors[t].detach().reshape(-1);
    for (const auto& slice : layout.slices[t]) {
      torch::serialize::OutputArchive piece;
      piece.write("name", c10::IValue(slice.name));
      piece.write("offset", c10::IValue(slice.parameter_offset));
      piece.write("shape", c10::IValue(slice.shape));
      piece.write("value", flat.narrow(0, slice.offset, slice.length).clone());
      out.write("piece" + std::to_string(count++), piece);
    }
  }
  out.write("pieces", c10::IValue(count));
  shard.write(kWeightsArchive, out);
}

std::map<std::string, torch::Tensor> read_whole_weights(const std::vector<fs::path>& files,
                                                        const std::map<std::string, bool>& names) {
  LOOM_CHECK(!files.empty(), "read_whole_weights: no files");
  std::map<std::string, std::pair<torch::Tensor, torch::Tensor>> found;  // name -> (value, covered)
  for (const auto& file : files) {
    torch::serialize::InputArchive shard;
    shard.load_from(file.string(), torch::kCPU);
    const bool whole_model = for_each_piece(shard, file.string(), names, [&](const WeightReader::Piece& piece) {
      auto& [value, covered] = found[piece.name];
      if (!value.defined()) {
        value = torch::zeros(piece.shape, piece.value.options());
        covered = torch::zeros({value.numel()}, torch::kBool);
      }
      const int64_t length = piece.value.numel();
      if (piece.shape != value.sizes().vec() || piece.offset < 0 || piece.offset + length > value.numel())
        throw Error(file.string() + ": the stored pieces of " + piece.name + " do not fit together");
      value.view(-1).narrow(0, piece.offset, length).copy_(piece.value);
      covered.narrow(0, piece.offset, length).fill_(true);
    });
    if (whole_model) break;
  }
  std::map<std::string, torch::Tensor> whole;
  for (auto& [name, entry] : found) {
    if (!entry.second.all().item<bool>())
      throw Error(files[0].parent_path().string() + " lacks part of " + name + " (is a shard file missing?)");
    whole[name] = entry.first;
  }
  return whole;
}

void install_whole_weights(const std::map<std::string, torch::Tensor>& values, const WeightLayout& layout,
                           const std::string& source) {
  WeightReader reader(layout);
  for (const auto& [name, value] : values) reader.add({name, 0, value.sizes().vec(), value.reshape(-1)}, source);
  reader.finish(source);
}

}  // namespace loom
