#include "models/safetensors.h"

#include <algorithm>
#include <cstring>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_io.h"

namespace loom {
namespace {

const std::vector<std::pair<std::string, torch::Dtype>>& dtype_names() {
  static const std::vector<std::pair<std::string, torch::Dtype>> names = {
      {"F64", torch::kDouble}, {"F32", torch::kFloat}, {"F16", torch::kHalf},  {"BF16", torch::kBFloat16},
      {"I64", torch::kLong},   {"I32", torch::kInt},   {"I16", torch::kShort}, {"I8", torch::kChar},
      {"U8", torch::kByte},    {"BOOL", torch::kBool}};
  return names;
}

std::string dtype_name(torch::Dtype dtype) {
  for (const auto& [name, d] : dtype_names())
    if (d == dtype) return name;
  throw Error(std::string("safetensors: cannot store tensors of dtype ") + c10::toString(dtype));
}

}  // namespace

torch::Tensor SafetensorsFile::find(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return t;
  return {};
}

std::string safetensors_bytes(const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<torch::Tensor> data;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    LOOM_CHECK(name != "__metadata__" && !header.contains(name), "safetensors: duplicate or reserved tensor name '",
               name, "'");
    auto t = tensor.detach().to(torch::kCPU).contiguous();
    const uint64_t size = t.numel() * t.element_size();
    header[name] = {{"dtype", dtype_name(t.scalar_type())}, {"shape", t.sizes().vec()}, {"data_offsets", {offset, offset + size}}};
    offset += size;
    data.push_back(t);
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');  // the data starts 8-byte aligned, as Hugging Face's writer does
  std::string bytes(8, '\0');
  const uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  bytes += json;
  bytes.reserve(bytes.size() + offset);
  for (const auto& t : data) bytes.append(static_cast<const char*>(t.data_ptr()), t.numel() * t.element_size());
  return bytes;
}

void write_safetensors(const std::filesystem::path& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  write_file_atomic(path, safetensors_bytes(tensors, metadata));
}

SafetensorsFile read_safetensors(const std::filesystem::path& path) {
  LOOM_CHECK(std::filesystem::is_regular_file(path), path.string(), ": no such safetensors file");
  const std::string bytes = read_file(path);
  const auto corrupt = [&](const auto&... what) {
    return Error(path.string() + ": not a valid safetensors file: " + detail::concat(what...));
  };
  if (bytes.size() < 8) throw corrupt("only ", bytes.size(), " bytes, shorter than the 8-byte header length");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  if (n > bytes.size() - 8) throw corrupt("the header claims ", n, " bytes but the file has ", bytes.size() - 8, " after the length (truncated?)");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  } catch (const nlohmann::json::exception& e) {
    throw corrupt("header is not JSON (", e.what(), ")");
  }
  if (!header.is_object()) throw corrupt("header is not a JSON object");
  const uint64_t data_size = bytes.size() - 8 - n;
  const char* data = bytes.data() + 8 + n;

  SafetensorsFile file;
  std::vector<std::pair<uint64_t, std::pair<std::string, torch::Tensor>>> ordered;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) throw corrupt("__metadata__ is not an object");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) throw corrupt("__metadata__.", key, " is not a string");
        file.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    try {
      const std::string dtype = entry.at("dtype").get<std::string>();
      const auto shape = entry.at("shape").get<std::vector<int64_t>>();
      const auto offsets = entry.at("data_offsets").get<std::vector<uint64_t>>();
      auto known = std::find_if(dtype_names().begin(), dtype_names().end(), [&](const auto& d) { return d.first == dtype; });
      if (known == dtype_names().end()) throw corrupt("tensor ", name, ": unsupported dtype ", dtype);
      if (offsets.size() != 2 || offsets[0] > offsets[1]) throw corrupt("tensor ", name, ": bad data_offsets");
      if (offsets[1] > data_size)
        throw corrupt("tensor ", name, " ends at byte ", offsets[1], " of the data but the file holds ", data_size, " (truncated?)");
      uint64_t numel = 1;
      for (int64_t d : shape) {
        if (d < 0) throw corrupt("tensor ", name, ": negative dimension");
        numel *= static_cast<uint64_t>(d);
      }
      auto tensor = torch::empty(shape, torch::TensorOptions().dtype(known->second));
      if (numel * tensor.element_size() != offsets[1] - offsets[0])
        throw corrupt("tensor ", name, ": ", offsets[1] - offsets[0], " bytes for shape ", tensor.sizes(), " of ", dtype);
      if (numel > 0) std::memcpy(tensor.data_ptr(), data + offsets[0], offsets[1] - offsets[0]);
      ordered.push_back({offsets[0], {name, tensor}});
    } catch (const nlohmann::json::exception& e) {
      throw corrupt("tensor ", name, ": ", e.what());
    }
  }
  std::stable_sort(ordered.begin(), ordered.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [offset, entry] : ordered) file.tensors.push_back(std::move(entry));
  return file;
}

}  // namespace loom
