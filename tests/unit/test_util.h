// Helpers shared by the unit tests: a scratch directory per test, golden values from PyTorch, and comparisons
// within tolerances derived from the magnitude and dtype compared.
#pragma once
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include "core/config.h"
#include "core/error.h"
#include "models/gpt.h"
#include "parallel/process_group.h"
#include "parallel/sharding.h"

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

// The message of the ConfigError that parse_config throws for a YAML text (as x.yaml) and --set overrides, or ""
// when it does not throw.
inline std::string config_error(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    loom::parse_config(yaml, "x.yaml", overrides);
  } catch (const loom::ConfigError& e) {
    return e.what();
  }
  return "";
}

// The MPI process set-up, shared by every test file: MPI_Init once per process, MPI_Finalize at exit.
// Without mpirun it is the process alone and the tests' groups are groups of one.
inline loom::ProcessGroup& processes() {
  static loom::ProcessGroup group;
  return group;
}

// The world as the tensor-parallel group of the TP unit tests (a group of one without mpirun).
inline std::unique_ptr<loom::Communicator> tp_group() { return processes().world(/*timeout_s=*/60); }

// Moves every parameter by N(0, 0.2^2): weights away from their initialisation, so that a wrong mapping shows.
inline void perturb(torch::nn::Module& model) {
  torch::NoGradGuard no_grad;
  for (auto& p : model.parameters()) p.add_(torch::randn_like(p) * 0.2);
}

// The inference tests' model: a GPT of `config` from seed `seed`, perturbed, in double precision (batched and
// one-at-a-time products then agree far below any argmax gap), in eval mode.
inline loom::Gpt double_precision_gpt(const loom::ModelConfig& config, uint64_t seed) {
  torch::manual_seed(seed);
  loom::Gpt gpt(config);
  perturb(*gpt);
  gpt->to(torch::kDouble);
  gpt->eval();
  return gpt;
}

inline int64_t numel_sum(torch::nn::Module& model) {
  int64_t n = 0;
  for (const auto& p : model.parameters()) n += p.numel();
  return n;
}

// A gradient sync's one entry: every parameter (per optimizer group) averaged and sharded over shard_group,
// replicated over replicas (hybrid sharding; null: none).
inline std::vector<loom::ShardedParameters> one_entry(const std::vector<std::vector<torch::Tensor>>& groups,
                                                      loom::Communicator& shard_group,
                                                      loom::Communicator* replicas = nullptr) {
  return {{groups, &shard_group, replicas}};
}

// The sharding options of ZeRO stage `zero` (0 to 3) with buckets of bucket_mb; the rest as given.
inline loom::ShardingOptions zero_stage(int64_t zero, double bucket_mb, torch::ScalarType param_dtype = torch::kFloat,
                                        std::vector<torch::Tensor> deferred = {},
                                        std::vector<std::vector<torch::Tensor>> units = {},
                                        bool reshard_after_forward = true) {
  loom::ShardingOptions options;
  options.zero = static_cast<loom::ZeroStage>(zero);
  options.bucket_mb = bucket_mb;
  options.param_dtype = param_dtype;
  options.deferred = std::move(deferred);
  options.units = std::move(units);
  options.reshard_after_forward = reshard_after_forward;
  return options;
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

// What f throws as a loom::Error, or "(no error)": for CHECK_THAT(message_of(...), Contains(...)).
inline std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const loom::Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Largest absolute difference of two tensors, in float64.
inline double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  REQUIRE(a.sizes() == b.sizes());
  if (a.numel() == 0) return 0.0;
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

// Tolerances (docs/testing.md). One unit in the last place of x is about eps * |x|: fp32 eps is 2^-23, bf16's
// 2^-7. Two computations of one value that sum in another order (another batch shape, a split over ranks, another
// kernel build, another ISA's GEMM blocking: scripts/test_isa.sh) agree to a few eps of the largest magnitude summed,
// so a bound is eps * magnitude * a small count of the reorderable steps; a bare absolute bound below the
// magnitude's ulp demands bitwise equality and holds on one CPU only.
constexpr double kFloatEps = 0x1p-23;
constexpr double kBf16Eps = 0x1p-7;

// CHECK_THAT(actual, close_to(expected, rel, abs)): |actual - expected| <= rel * |expected| + abs; a failure shows
// both values, the difference and the bound.
class CloseTo : public Catch::MatcherBase<double> {
 public:
  CloseTo(double expected, double rel, double abs) : expected_(expected), rel_(rel), abs_(abs) {}
  double bound() const { return rel_ * std::abs(expected_) + abs_; }
  bool match(const double& actual) const override {
    diff_ = std::abs(actual - expected_);
    return diff_ <= bound();  // false for NaN
  }
  std::string describe() const override {
    std::ostringstream out;
    out.precision(12);
    out << "is within " << bound() << " (rel " << rel_ << " x |expected| + abs " << abs_ << ") of " << expected_
        << "; |difference| " << diff_;
    return out.str();
  }

 private:
  double expected_, rel_, abs_;
  mutable double diff_ = 0;
};
inline CloseTo close_to(double expected, double rel, double abs = 0.0) { return {expected, rel, abs}; }

// CHECK_THAT(actual, tensor_close_to(expected, rel, abs)): max |actual - expected| <= rel * max |expected| + abs,
// normwise: a reduction's error scales with the magnitudes it sums, which the largest element stands for, not with
// each element (which may be near 0). A failure shows the bound and the worst element of both.
class TensorCloseTo : public Catch::MatcherBase<torch::Tensor> {
 public:
  TensorCloseTo(torch::Tensor expected, double rel, double abs)
      : expected_(expected.detach().to(torch::kDouble)), rel_(rel), abs_(abs) {
    scale_ = expected_.numel() == 0 ? 0.0 : expected_.abs().max().item<double>();
  }
  bool match(const torch::Tensor& actual) const override {
    if (actual.sizes() != expected_.sizes()) {
      what_ = "shape " + shape(actual) + " instead of " + shape(expected_);
      return false;
    }
    if (actual.numel() == 0) return true;
    const auto diff = (actual.detach().to(torch::kDouble) - expected_).abs().flatten();
    const auto worst = diff.nan_to_num(std::numeric_limits<double>::infinity()).argmax().item<int64_t>();
    const double d = diff[worst].item<double>(), bound = rel_ * scale_ + abs_;
    std::ostringstream out;
    out.precision(12);
    out << "max |difference| " << d << " at flat index " << worst << " (got "
        << actual.detach().flatten()[worst].item<double>() << ", expected " << expected_.flatten()[worst].item<double>()
        << ")";
    what_ = out.str();
    return d <= bound;  // false for NaN
  }
  std::string describe() const override {
    std::ostringstream out;
    out.precision(12);
    out << "is within " << rel_ * scale_ + abs_ << " (rel " << rel_ << " x max |expected| " << scale_ << " + abs "
        << abs_ << ") of the expected tensor; " << what_;
    return out.str();
  }

 private:
  static std::string shape(const torch::Tensor& t) {
    std::ostringstream out;
    out << t.sizes();
    return out.str();
  }
  torch::Tensor expected_;
  double rel_, abs_, scale_;
  mutable std::string what_;
};
inline TensorCloseTo tensor_close_to(const torch::Tensor& expected, double rel, double abs = 0.0) {
  return {expected, rel, abs};
}

// Logits of one small test model's fp32 forward (a few layers, width <= 64) computed in another shape: batched or
// alone, padded, from a KV cache, in pipeline stages. Each matrix product and softmax then blocks or reduces in
// another order, which moves a value by a few ulps of the magnitudes it sums, layer after layer: the largest logit
// stands for them, and 1 for the normalized hidden states. 16 eps x (max |logit| + 1); measured at most 8.4 under
// every setting of scripts/test_isa.sh.
inline TensorCloseTo same_forward_as(const torch::Tensor& expected) {
  return tensor_close_to(expected, 16 * kFloatEps, 16 * kFloatEps);
}

// Logits of loom's fp32 forward against another implementation of the same model: an independent float64 PyTorch
// forward, Hugging Face transformers in fp32. The operations themselves differ (fused or split projections, other
// formulas for GELU, RoPE and attention), each a few ulps off, through every layer: 84 eps (1e-5) x (max |logit| +
// 1); measured at most 20 under every setting of scripts/test_isa.sh.
inline TensorCloseTo reference_logits(const torch::Tensor& expected) {
  return tensor_close_to(expected, 1e-5, 1e-5);
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

// A tensor in a Catch message: its dtype and shape, not every element.
namespace Catch {
template <>
struct StringMaker<torch::Tensor> {
  static std::string convert(const torch::Tensor& t) {
    if (!t.defined()) return "undefined tensor";
    std::ostringstream out;
    out << t.scalar_type() << " tensor " << t.sizes();
    return out.str();
  }
};
}  // namespace Catch
