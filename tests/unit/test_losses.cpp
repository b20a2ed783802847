// Cross-entropy and AdamW against PyTorch (tests/golden/*.py); gradient clipping against its closed form.
#include <cmath>

#include "optim/cross_entropy.h"
#include "optim/optimizer.h"
#include "test_util.h"

using loom::test::close_to;
using loom::test::json_tensor;
using loom::test::kFloatEps;
using loom::test::tensor_close_to;

TEST_CASE("cross_entropy: loss and gradient equal torch.nn.functional.cross_entropy", "[losses][golden]") {
  const auto golden = loom::test::python_golden("cross_entropy.py");
  REQUIRE(golden["cases"].size() >= 8);
  for (const auto& c : golden["cases"]) {
    INFO("case " << c["name"].get<std::string>());
    auto logits = json_tensor(c["logits"]).requires_grad_(true);
    const auto targets = json_tensor(c["targets"], torch::kLong);
    const auto loss = loom::cross_entropy(logits, targets, c["label_smoothing"].get<double>(),
                                          c["ignore_index"].get<int64_t>());
    CHECK(loss.dim() == 0);
    CHECK(loss.scalar_type() == torch::kFloat);
    // The loss is mean(logsumexp(z) - z_target): its rounding is that of the largest logit (up to 30 randn: ~100),
    // not of the loss. The gradient's entries (softmax - one-hot) / N are at most 1: a few ulps of 1.
    const double logit_scale = std::max(1.0, logits.detach().abs().max().item<double>());
    CHECK_THAT(loss.item<double>(), close_to(c["loss"].get<double>(), 0.0, 8 * kFloatEps * logit_scale));
    loss.backward();
    CHECK_THAT(logits.grad(), tensor_close_to(json_tensor(c["grad"]), 0.0, 8 * kFloatEps));
  }
}

TEST_CASE("cross_entropy: uniform logits cost log(V) whatever the smoothing", "[losses]") {
  const int64_t V = 50;
  const auto logits = torch::zeros({6, V});
  const auto targets = torch::tensor({0, 3, 49, -100, 7, 7}, torch::kLong);
  for (double smoothing : {0.0, 0.1, 0.5})
    CHECK(loom::cross_entropy(logits, targets, smoothing).item<double>() == Approx(std::log(50.0)).epsilon(1e-6));
}

TEST_CASE("cross_entropy: bf16 logits are reduced in fp32", "[losses]") {
  torch::manual_seed(3);
  const auto logits = (torch::randn({64, 300}) * 4).to(torch::kBFloat16);
  const auto targets = torch::randint(0, 300, {64}, torch::kLong);
  const auto loss = loom::cross_entropy(logits, targets, 0.1);
  CHECK(loss.scalar_type() == torch::kFloat);
  // The same values widened first: identical, so nothing was summed in bf16.
  CHECK(loss.item<float>() == loom::cross_entropy(logits.to(torch::kFloat), targets, 0.1).item<float>());
}

namespace {

torch::Tensor grad_tensor(const std::vector<float>& values, std::vector<int64_t> shape) {
  auto p = torch::zeros(shape).requires_grad_(true);
  p.mutable_grad() = torch::tensor(values).reshape(shape);
  return p;
}

}  // namespace

TEST_CASE("gradient_norm and clip_gradients: global L2 norm and scaling", "[losses]") {
  // Gradient norms 5 ([3, 4]) and 12 ([[12]]): global norm sqrt(25 + 144) = 13.
  auto a = grad_tensor({3, 4}, {2});
  auto b = grad_tensor({12}, {1, 1});
  auto no_grad = torch::zeros({3}).requires_grad_(true);  // never got a gradient: skipped
  const std::vector<torch::Tensor> params = {a, b, no_grad};
  const auto norm = loom::gradient_norm(params);
  CHECK(norm.norm == Approx(13.0).epsilon(1e-12));
  CHECK(norm.local_finite);

  loom::clip_gradients(params, 20.0, norm.norm);  // below the threshold: unchanged
  CHECK(a.grad()[1].item<float>() == 4.0f);
  loom::clip_gradients(params, 0.0, norm.norm);  // 0 disables clipping
  CHECK(b.grad()[0][0].item<float>() == 12.0f);

  loom::clip_gradients(params, 6.5, norm.norm);
  // Scaled by 6.5 / 13 = 1/2: [1.5, 2] and [[6]], new norm 6.5.
  CHECK(a.grad()[0].item<float>() == Approx(1.5).epsilon(1e-6));
  CHECK(a.grad()[1].item<float>() == Approx(2.0).epsilon(1e-6));
  CHECK(b.grad()[0][0].item<float>() == Approx(6.0).epsilon(1e-6));
  CHECK(loom::gradient_norm(params).norm == Approx(6.5).epsilon(1e-6));
  CHECK_FALSE(no_grad.grad().defined());

  CHECK(loom::gradient_norm({no_grad}).norm == 0.0);
}

TEST_CASE("gradient_norm: says whether this rank's gradients are finite", "[losses]") {
  for (const float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN()}) {
    CAPTURE(bad);
    const auto norm = loom::gradient_norm({grad_tensor({1.0f}, {1}), grad_tensor({2.0f, bad}, {2})});
    CHECK_FALSE(norm.local_finite);
    CHECK_FALSE(std::isfinite(norm.norm));
  }
  // Finite elements whose norm is beyond the float range (sqrt(2) * 3e38 > 3.4e38): not finite either, as
  // documented. Squares beyond it are summed in double and count (sqrt(5) * 1e38 is a float).
  CHECK_FALSE(loom::gradient_norm({grad_tensor({3e38f, 3e38f}, {2})}).local_finite);
  const auto large = loom::gradient_norm({grad_tensor({2e38f, 1e38f}, {2})});
  CHECK(large.local_finite);
  CHECK(large.norm == Approx(std::sqrt(5.0) * 1e38).epsilon(1e-7));
}

TEST_CASE("gradient_norm: a gradient cut into pieces has the whole's norm to double precision", "[losses]") {
  // ZeRO shards and pipeline stages sum their parts of the squares in their own order. Summed in double, the
  // norm agrees with the whole's (and with float64 PyTorch) to ~1e-13 relative here (a float's precision is
  // 6e-8), so every layout scales its gradients by the same float clip coefficient. Summed in float, the
  // parts' norms differ by ~1e-7.
  torch::manual_seed(3);
  const int64_t n = 1 << 20;
  const auto values = torch::randn({n}) * torch::exp(torch::randn({n}) * 4);  // a wide range of magnitudes
  auto whole = torch::zeros({n}).requires_grad_(true);
  whole.mutable_grad() = values.clone();
  std::vector<torch::Tensor> pieces;
  const std::vector<std::pair<int64_t, int64_t>> cuts = {{0, 333333}, {333333, 1}, {333334, n - 333334}};
  for (const auto& [first, length] : cuts) {
    auto piece = torch::zeros({length}).requires_grad_(true);
    piece.mutable_grad() = values.narrow(0, first, length).clone();
    pieces.push_back(piece);
  }
  const double reference = values.to(torch::kDouble).pow(2).sum().sqrt().item<double>();
  const double of_whole = loom::gradient_norm({whole}).norm;
  const double of_pieces = loom::gradient_norm(pieces).norm;
  CHECK(std::abs(of_whole - reference) <= 1e-12 * reference);
  CHECK(std::abs(of_pieces - reference) <= 1e-12 * reference);
  CHECK(static_cast<float>(1.0 / (of_whole + 1e-6)) == static_cast<float>(1.0 / (of_pieces + 1e-6)));
}

namespace {

struct TwoParams : torch::nn::Module {
  TwoParams(const torch::Tensor& w0, const torch::Tensor& b0) {
    w = register_parameter("w", w0.clone());
    b = register_parameter("b", b0.clone());
  }
  torch::Tensor w, b;
};

}  // namespace

TEST_CASE("make_adamw: decay on matrices only, steps equal torch.optim.AdamW", "[losses][golden]") {
  const auto golden = loom::test::python_golden("adamw.py");
  TwoParams model(json_tensor(golden["w"]), json_tensor(golden["b"]));
  loom::OptimConfig config;
  config.lr = golden["lr"].get<double>();
  config.betas = golden["betas"].get<std::vector<double>>();
  config.eps = golden["eps"].get<double>();
  config.weight_decay = golden["weight_decay"].get<double>();
  auto optimizer = loom::make_adamw(model, config);

  auto& groups = optimizer->param_groups();
  REQUIRE(groups.size() == 2);
  REQUIRE(groups[0].params().size() == 1);
  CHECK(groups[0].params()[0].is_same(model.w));
  REQUIRE(groups[1].params().size() == 1);
  CHECK(groups[1].params()[0].is_same(model.b));
  CHECK(static_cast<torch::optim::AdamWOptions&>(groups[0].options()).weight_decay() == config.weight_decay);
  CHECK(static_cast<torch::optim::AdamWOptions&>(groups[1].options()).weight_decay() == 0.0);

  const auto lrs = golden["lrs"].get<std::vector<double>>();
  for (size_t i = 0; i < lrs.size(); ++i) {
    INFO("step " << i);
    loom::set_learning_rate(*optimizer, lrs[i]);
    model.w.mutable_grad() = json_tensor(golden["grads_w"][i]);
    model.b.mutable_grad() = json_tensor(golden["grads_b"][i]);
    optimizer->step();
    // torch.optim.AdamW's fp32 step, computed in another order (loom's fused update, libtorch's): a few ulps of
    // the parameters (randn, so up to ~3) and of the step itself (at most lr).
    CHECK_THAT(model.w, tensor_close_to(json_tensor(golden["w_after"][i]), 8 * kFloatEps, 8 * kFloatEps));
    CHECK_THAT(model.b, tensor_close_to(json_tensor(golden["b_after"][i]), 8 * kFloatEps, 8 * kFloatEps));
  }
}
