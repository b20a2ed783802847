// The safetensors file format (Hugging Face's weight files): an 8-byte little-endian header length N,
// N bytes of JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}},
// then the raw little-endian tensor bytes, offsets relative to the end of the header. Reads and writes
// F64, F32, F16, BF16, I64, I32, I16, I8, U8 and BOOL; any problem with a file is a loom::Error naming it.
// Files come from the internet: every header field is checked against the file (overflow-safe) before
// anything is allocated, so a crafted header can make loom allocate no more than the file holds.
// It knows nothing of model names: models/hf_weights.h maps those. Assumes a little-endian host.
#pragma once
#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace loom {

struct SafetensorsFile {
  std::vector<std::pair<std::string, torch::Tensor>> tensors;  // in file order (by data offset)
  std::map<std::string, std::string> metadata;

  // The tensor of that name, or an undefined tensor.
  torch::Tensor find(const std::string& name) const;
};

// Every tensor of the file, as CPU tensors of its dtypes.
SafetensorsFile read_safetensors(const std::filesystem::path& path);

// Writes the tensors (any device, any layout; stored contiguous) in the given order, atomically.
void write_safetensors(const std::filesystem::path& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// The file's bytes, for tests and for writers that add the file to something else.
std::string safetensors_bytes(const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

}  // namespace loom
