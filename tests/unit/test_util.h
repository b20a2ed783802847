// Helpers shared by the unit tests: a scratch directory per test and golden values from PyTorch.
#pragma once
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include "core/config.h"
#include "parallel/mpi_communicator.h"

namespace loom::test {

// A small GPT for unit tests: the given sizes, dropout off, every other key at its default.
inline loom::ModelConfig small_gpt_config(int64_t vocab_size, int64_t d_model, int64_t n_layers, int64_t n_heads,
                                          int64_t max_seq_len) {
  loom::ModelConfig c;
  c.vocab_size = vocab_size;
  c.d_model = d_model;
  c.n_layers = n_layers;
  c.n_heads = n_heads;
  c.max_seq_len = max_seq_len;
  c.dropout = 0.0;
  return c;
}

// The MPI process set-up, shared by every test file: MPI_Init once per process, MPI_Finalize at exit.
// Without mpirun it is the process alone and the tests' groups are groups of one.
inline loom::ProcessGroup& processes() {
  static loom::ProcessGroup group;
  return group;
}

inline std::filesystem::path source_dir() {
  const char* dir = std::getenv("LOOM_SOURCE_DIR");
  return dir != nullptr ? dir : ".";
}

// Scratch directories are deleted when the test binary exits, unless LOOM_KEEP_TEST_DIRS is set.
struct ScratchDirs {
  std::vector<std::filesystem::path> dirs;
  ~ScratchDirs() {
    if (std::getenv("LOOM_KEEP_TEST_DIRS") != nullptr) return;
    std::error_code ignored;
    for (const auto& dir : dirs) std::filesystem::remove_all(dir, ignored);
  }
};

// A fresh, empty directory under the system temp dir, named after the test.
inline std::filesystem::path scratch_dir(const std::string& name) {
  static ScratchDirs created;
  auto dir = std::filesystem::temp_directory_path() / ("loom-test-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  created.dirs.push_back(dir);
  return dir;
}

// Runs `python3 tests/golden/<script> <args>` and parses the JSON it prints on stdout.
inline nlohmann::json python_golden(const std::string& script, const std::string& args = "") {
  const std::string command = "python3 " + (source_dir() / "tests" / "golden" / script).string() + " " + args;
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string out;
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) out.append(buffer, n);
  REQUIRE(::pclose(pipe) == 0);
  return nlohmann::json::parse(out);
}

// A (nested) JSON list of numbers as a tensor of that shape; float64 values converted to `dtype`.
inline torch::Tensor json_tensor(const nlohmann::json& j, torch::Dtype dtype = torch::kFloat) {
  std::vector<int64_t> shape;
  for (const nlohmann::json* level = &j; level->is_array(); level = &level->front()) {
    shape.push_back(static_cast<int64_t>(level->size()));
    if (level->empty()) break;
  }
  std::vector<double> flat;
  std::function<void(const nlohmann::json&)> walk = [&](const nlohmann::json& node) {
    if (node.is_array()) {
      for (const auto& item : node) walk(item);
    } else {
      flat.push_back(node.get<double>());
    }
  };
  walk(j);
  return torch::tensor(flat, torch::kDouble).reshape(shape).to(dtype);
}

// A tensor as a nested JSON list (any dtype; values written as double).
inline nlohmann::json tensor_json(const torch::Tensor& t) {
  const auto values = t.detach().to(torch::kDouble).contiguous().cpu();
  const double* data = values.data_ptr<double>();
  std::function<nlohmann::json(int64_t, int64_t)> build = [&](int64_t dim, int64_t offset) -> nlohmann::json {
    if (dim == values.dim()) return data[offset];
    nlohmann::json out = nlohmann::json::array();
    for (int64_t i = 0; i < values.size(dim); ++i) out.push_back(build(dim + 1, offset + i * values.stride(dim)));
    return out;
  };
  return build(0, 0);
}

// Largest absolute difference of two tensors, in float64.
inline double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  REQUIRE(a.sizes() == b.sizes());
  if (a.numel() == 0) return 0.0;
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

// fn(inputs) and the gradient of each input against upstream gradient g (cast to the output's dtype), in
// that order. fn gets fresh leaf copies of the inputs; an undefined input stays undefined and so does its gradient.
template <typename Fn>
std::vector<torch::Tensor> output_and_gradients(const Fn& fn, const std::vector<torch::Tensor>& inputs,
                                                const torch::Tensor& g) {
  std::vector<torch::Tensor> leaves;
  for (const auto& t : inputs) leaves.push_back(t.defined() ? t.detach().clone().requires_grad_() : t);
  auto y = fn(leaves);
  y.backward(g.to(y.scalar_type()));
  std::vector<torch::Tensor> out = {y.detach()};
  for (const auto& t : leaves) out.push_back(t.defined() ? t.grad() : torch::Tensor());
  return out;
}

}  // namespace loom::test
