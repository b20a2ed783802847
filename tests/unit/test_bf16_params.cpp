// precision.param_dtype bf16 (parallel/gradient_sync.h): bf16 working weights over an fp32 master. The
// gradients of bf16 micro-batches accumulate in fp32, the optimizer steps the fp32 master exactly as fp32
// AdamW would on those gradients, and the weights are the master rounded to bf16 afterwards; values read
// into the master (a checkpoint's) become the weights' rounding.
#include "optim/optimizer.h"
#include "parallel/gradient_sync.h"
#include "test_util.h"

using namespace loom;
using loom::test::max_abs_diff;

namespace {

struct TwoLayer : torch::nn::Module {
  torch::nn::Linear a{nullptr}, b{nullptr};
  TwoLayer() {
    a = register_module("a", torch::nn::Linear(16, 32));
    b = register_module("b", torch::nn::Linear(32, 8));
  }
  torch::Tensor forward(const torch::Tensor& x) { return b(torch::gelu(a(x))); }
};

// The micro-batch loss: weight * mean square of the output.
torch::Tensor micro_loss(TwoLayer& model, const torch::Tensor& x, double weight) {
  return model.forward(x).to(torch::kFloat).pow(2).mean() * weight;
}

std::vector<torch::Tensor> clones(const std::vector<torch::Tensor>& tensors, torch::Dtype dtype) {
  std::vector<torch::Tensor> out;
  for (const auto& t : tensors) out.push_back(t.detach().to(dtype).clone());
  return out;
}

// Calls visit(k, part, offset, length) for each part of parameter k that the optimizer's tensors hold (a
// master per parameter, or a shard per bucket): `part` those elements of the optimizer tensor, which are
// [offset, offset + length) of the flattened parameter.
template <typename Visit>
void for_each_master_part(const GradientSync& sync, const std::vector<torch::Tensor>& params, Visit&& visit) {
  const auto tensors = sync.optimizer_parameters();
  const auto slices = sync.optimizer_slices();
  for (size_t i = 0; i < tensors.size(); ++i)
    for (const auto& slice : slices[i])
      for (size_t k = 0; k < params.size(); ++k)
        if (slice.parameter.unsafeGetTensorImpl() == params[k].unsafeGetTensorImpl())
          visit(k, tensors[i].detach().view(-1).narrow(0, slice.offset, slice.length), slice.parameter_offset,
                slice.length);
}

// Per model parameter, its fp32 master.
std::vector<torch::Tensor> master_values(const GradientSync& sync, const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> values;
  for (const auto& p : params) values.push_back(torch::zeros(p.sizes(), torch::kFloat));
  for_each_master_part(sync, params, [&](size_t k, const torch::Tensor& part, int64_t offset, int64_t length) {
    values[k].view(-1).narrow(0, offset, length).copy_(part);
  });
  return values;
}

// Writes `values` (per model parameter) into the optimizer's tensors, as a checkpoint's load does.
void set_master_values(const GradientSync& sync, const std::vector<torch::Tensor>& params,
                       const std::vector<torch::Tensor>& values) {
  torch::NoGradGuard no_grad;
  for_each_master_part(sync, params, [&](size_t k, const torch::Tensor& part, int64_t offset, int64_t length) {
    part.copy_(values[k].reshape(-1).narrow(0, offset, length));
  });
}

OptimConfig optim_config() {
  OptimConfig c;
  c.lr = 1e-2;
  c.weight_decay = 0.1;
  return c;
}

}  // namespace

TEST_CASE("bf16 parameters: fp32 accumulation, fp32 AdamW master, weights = master rounded", "[bf16_params]") {
  for (const int64_t zero : {0, 1}) {  // the ZeRO stage (ZeRO-2 drops .grad: test_gradient_sync.cpp)
    INFO("zero " << zero);
    torch::manual_seed(3);
    TwoLayer model;
    const auto fp32_start = clones(model.parameters(), torch::kFloat);
    const auto x1 = torch::randn({4, 16}).to(torch::kBFloat16), x2 = torch::randn({4, 16}).to(torch::kBFloat16);

    // Reference gradients: the same bf16 model with plain autograd, one micro-batch at a time (bf16 grads).
    TwoLayer reference;
    {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < fp32_start.size(); ++i)
        reference.parameters()[i].set_data(fp32_start[i].to(torch::kBFloat16));
    }
    std::vector<torch::Tensor> g1, g2, g_both;
    micro_loss(reference, x1, 0.5).backward();
    for (auto& p : reference.parameters()) g1.push_back(p.grad().clone()), p.mutable_grad() = torch::Tensor();
    micro_loss(reference, x2, 0.5).backward();
    for (auto& p : reference.parameters()) g2.push_back(p.grad().clone()), p.mutable_grad() = torch::Tensor();
    micro_loss(reference, torch::cat({x1, x2}), 1.0).backward();
    for (auto& p : reference.parameters()) g_both.push_back(p.grad().to(torch::kFloat));

    auto self = make_self_communicator();
    // A small bucket size: several buckets, each its own master.
    GradientSync sync(loom::test::one_entry(weight_decay_groups(model), *self),
                      loom::test::zero_stage(zero, 0.001, torch::kBFloat16));
    REQUIRE(sync.has_master());
    const auto params = model.parameters();  // handles: they see the dtype and storage changes below
    for (size_t i = 0; i < fp32_start.size(); ++i) {
      REQUIRE(params[i].scalar_type() == torch::kBFloat16);
      REQUIRE(torch::equal(params[i], fp32_start[i].to(torch::kBFloat16)));
      REQUIRE(params[i].grad().scalar_type() == torch::kFloat);
    }

    sync.zero_grad();
    micro_loss(model, x1, 0.5).backward();
    sync.prepare_last_backward();
    micro_loss(model, x2, 0.5).backward();
    sync.finish();
    bool bf16_sum_differs = false;
    for (size_t i = 0; i < g1.size(); ++i) {
      // Accumulated in fp32: exactly the fp32 sum of the two bf16 gradients...
      const auto fp32_sum = g1[i].to(torch::kFloat) + g2[i].to(torch::kFloat);
      CHECK(torch::equal(params[i].grad(), fp32_sum));
      // ...which a bf16 accumulation would not give (so this test tells the two apart).
      bf16_sum_differs = bf16_sum_differs || !torch::equal((g1[i] + g2[i]).to(torch::kFloat), fp32_sum);
      // Two half-batches against the whole batch: both are bf16 computations of the same gradient, each a few
      // bf16 roundings (unit roundoff 2^-8 = 0.4%) away from the exact value; 2% of the largest entry
      // bounds that with room, while a missing or doubled micro-batch is off by 50% or more.
      const double scale = g_both[i].abs().max().item<double>();
      CHECK(max_abs_diff(params[i].grad(), g_both[i]) <= 0.02 * scale);
    }
    CHECK(bf16_sum_differs);

    // The optimizer steps fp32 tensors holding the fp32 start, with the fp32 accumulated gradients.
    for (const auto& t : sync.optimizer_parameters()) {
      REQUIRE(t.scalar_type() == torch::kFloat);
      REQUIRE(t.grad().scalar_type() == torch::kFloat);
    }
    auto optimizer = make_adamw(sync.optimizer_groups(), optim_config());
    optimizer->step();
    sync.gather_parameters();

    // Reference: LibTorch's own AdamW (not the fused kernel) on fp32 copies of the start.
    auto master = clones(fp32_start, torch::kFloat);
    std::vector<std::vector<torch::Tensor>> groups(2);
    for (size_t i = 0; i < master.size(); ++i) {
      master[i].mutable_grad() = g1[i].to(torch::kFloat) + g2[i].to(torch::kFloat);
      groups[master[i].dim() >= 2 ? 0 : 1].push_back(master[i]);
    }
    const auto c = optim_config();
    auto options = torch::optim::AdamWOptions(c.lr).betas({c.betas[0], c.betas[1]}).eps(c.eps);
    torch::optim::AdamW plain({torch::optim::OptimizerParamGroup(groups[0], std::make_unique<torch::optim::AdamWOptions>(
                                                                                options.weight_decay(c.weight_decay))),
                               torch::optim::OptimizerParamGroup(groups[1], std::make_unique<torch::optim::AdamWOptions>(
                                                                                options.weight_decay(0.0)))},
                              options);
    plain.step();

    const auto stepped = master_values(sync, params);
    for (size_t i = 0; i < master.size(); ++i) {
      // The update moved every weight by about lr; fused and plain AdamW agree to fp32 rounding.
      CHECK(max_abs_diff(stepped[i], fp32_start[i]) > 5e-3);
      CHECK(max_abs_diff(stepped[i], master[i]) <= 1e-6);
      const auto& p = params[i];
      REQUIRE(p.scalar_type() == torch::kBFloat16);
      CHECK(torch::equal(p, stepped[i].to(torch::kBFloat16)));  // bit for bit the master rounded to bf16
      CHECK(max_abs_diff(p.to(torch::kFloat), stepped[i]) > 0);  // and not the master itself
    }

    // Values read into the optimizer's tensors (a checkpoint's) become the master, and the weights their
    // rounding once gathered.
    std::vector<torch::Tensor> loaded;
    for (const auto& t : fp32_start) loaded.push_back(t * 3.0);
    set_master_values(sync, params, loaded);
    sync.gather_parameters();
    const auto now = master_values(sync, params);
    for (size_t i = 0; i < master.size(); ++i) {
      CHECK(torch::equal(params[i], loaded[i].to(torch::kBFloat16)));
      CHECK(torch::equal(now[i], loaded[i]));
    }
  }
}

TEST_CASE("bf16 parameters: fp32 parameters are untouched by the default", "[bf16_params]") {
  torch::manual_seed(3);
  TwoLayer model;
  const auto start = clones(model.parameters(), torch::kFloat);
  auto self = make_self_communicator();
  GradientSync sync(loom::test::one_entry(weight_decay_groups(model), *self), loom::test::zero_stage(0, 0.001));
  CHECK_FALSE(sync.has_master());
  const auto params = model.parameters();
  for (size_t i = 0; i < start.size(); ++i) {
    CHECK(params[i].scalar_type() == torch::kFloat);
    CHECK(torch::equal(params[i], start[i]));
  }
  // zero 0 in fp32: the optimizer steps the parameters themselves, no copy.
  for (const auto& t : sync.optimizer_parameters()) {
    bool is_parameter = false;
    for (const auto& p : model.parameters()) is_parameter = is_parameter || p.unsafeGetTensorImpl() == t.unsafeGetTensorImpl();
    CHECK(is_parameter);
  }
}
