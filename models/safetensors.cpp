#include "models/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>

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

namespace {

// The safetensors library's own bound on the JSON header: a larger claim is a damaged or hostile file.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

// One header entry, every field checked against the file before anything is allocated.
struct Entry {
  std::string name;
  torch::Dtype dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
};

// A non-negative JSON integer that fits int64 (shape dimensions, offsets), or nothing.
std::optional<uint64_t> count_of(const nlohmann::json& value) {
  if (value.is_number_unsigned()) {
    const auto n = value.get<uint64_t>();
    if (n <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return n;
  } else if (value.is_number_integer() && value.get<int64_t>() >= 0) {
    return static_cast<uint64_t>(value.get<int64_t>());
  }
  return std::nullopt;
}

template <class Corrupt>
Entry parse_entry(const std::string& name, const nlohmann::json& entry, uint64_t data_size, const Corrupt& corrupt) {
  if (!entry.is_object()) throw corrupt("tensor ", name, ": not an object");
  const auto dtype = entry.find("dtype");
  const auto shape = entry.find("shape");
  const auto offsets = entry.find("data_offsets");
  if (dtype == entry.end() || shape == entry.end() || offsets == entry.end())
    throw corrupt("tensor ", name, ": needs dtype, shape and data_offsets");
  if (!dtype->is_string()) throw corrupt("tensor ", name, ": dtype is not a string");
  const auto known = std::find_if(dtype_names().begin(), dtype_names().end(),
                                  [&](const auto& d) { return d.first == dtype->get<std::string>(); });
  if (known == dtype_names().end()) throw corrupt("tensor ", name, ": unsupported dtype ", dtype->get<std::string>());
  if (!offsets->is_array() || offsets->size() != 2) throw corrupt("tensor ", name, ": data_offsets is not [begin, end]");
  const auto begin = count_of((*offsets)[0]), end = count_of((*offsets)[1]);
  if (!begin || !end || *begin > *end) throw corrupt("tensor ", name, ": bad data_offsets ", offsets->dump());
  if (*end > data_size)
    throw corrupt("tensor ", name, " ends at byte ", *end, " of the data but the file holds ", data_size, " (truncated?)");
  if (!shape->is_array()) throw corrupt("tensor ", name, ": shape is not an array");
  Entry out{name, known->second, {}, *begin, *end};
  // The byte count in overflow-safe arithmetic: a shape may claim any size, the file holds end - begin bytes.
  uint64_t bytes = c10::elementSize(known->second);
  for (const auto& d : *shape) {
    const auto size = count_of(d);
    if (!size) throw corrupt("tensor ", name, ": shape ", shape->dump(), " holds a negative or non-integer size");
    if (__builtin_mul_overflow(bytes, *size, &bytes)) bytes = std::numeric_limits<uint64_t>::max();
    out.shape.push_back(static_cast<int64_t>(*size));
  }
  if (bytes != *end - *begin)
    throw corrupt("tensor ", name, ": shape ", shape->dump(), " of ", known->first, " needs ",
                  bytes == std::numeric_limits<uint64_t>::max() ? std::string("more than 2^64") : std::to_string(bytes),
                  " bytes but data_offsets give it ", *end - *begin);
  return out;
}

}  // namespace

SafetensorsFile read_safetensors(const std::filesystem::path& path) {
  LOOM_CHECK(std::filesystem::is_regular_file(path), path.string(), ": no such safetensors file");
  const MappedFile bytes(path);
  const auto corrupt = [&](const auto&... what) {
    return Error(path.string() + ": not a valid safetensors file: " + detail::concat(what...));
  };
  if (bytes.size() < 8) throw corrupt("only ", bytes.size(), " bytes, shorter than the 8-byte header length");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(bytes.data()[i])) << (8 * i);
  if (n > kMaxHeaderBytes) throw corrupt("the header claims ", n, " bytes, more than the format's limit of ", kMaxHeaderBytes);
  if (n > bytes.size() - 8) throw corrupt("the header claims ", n, " bytes but the file has ", bytes.size() - 8, " after the length (truncated?)");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes.data() + 8, bytes.data() + 8 + n);
  } catch (const nlohmann::json::exception& e) {
    throw corrupt("header is not JSON (", e.what(), ")");
  }
  if (!header.is_object()) throw corrupt("header is not a JSON object");
  const uint64_t data_size = bytes.size() - 8 - n;
  const char* data = bytes.data() + 8 + n;

  // Every entry is checked, and the entries must tile the data exactly (as the safetensors library
  // requires), before any tensor is allocated: what is allocated is then at most the file's size.
  SafetensorsFile file;
  std::vector<Entry> entries;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) throw corrupt("__metadata__ is not an object");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) throw corrupt("__metadata__.", key, " is not a string");
        file.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(name, entry, data_size, corrupt));
  }
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  uint64_t covered = 0;
  for (const Entry& e : entries) {
    if (e.begin != covered)
      throw corrupt("tensor ", e.name, " starts at byte ", e.begin, " of the data, expected ", covered,
                    " (tensors overlap or leave a gap)");
    covered = e.end;
  }
  if (covered != data_size) throw corrupt("the tensors cover ", covered, " bytes of data but the file holds ", data_size);

  for (const Entry& e : entries) {
    auto tensor = torch::empty(e.shape, torch::TensorOptions().dtype(e.dtype));
    if (e.end > e.begin) std::memcpy(tensor.data_ptr(), data + e.begin, e.end - e.begin);
    file.tensors.emplace_back(e.name, std::move(tensor));
  }
  return file;
}

}  // namespace loom
