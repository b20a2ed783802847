// Dynamic loss scaling (precision.dtype: fp16): unscaling divides the gradients by the scale and notices
// inf/nan; an overflow halves the scale (backoff) and restarts the count, growth_interval finite steps in
// a row double it; the state round-trips; other dtypes keep the scale at 1 and only report inf/nan.
#include "optim/loss_scaler.h"
#include "test_util.h"

namespace {

loom::PrecisionConfig fp16(double init = 1024.0, int64_t interval = 3) {
  loom::PrecisionConfig p;
  p.dtype = loom::Dtype::kFp16;
  p.loss_scale_init = init;
  p.loss_scale_growth_interval = interval;
  return p;
}

std::vector<torch::Tensor> with_grads(const std::vector<torch::Tensor>& grads) {
  std::vector<torch::Tensor> parameters;
  for (const auto& g : grads) {
    auto p = torch::zeros_like(g, torch::requires_grad());
    p.mutable_grad() = g.clone();
    parameters.push_back(p);
  }
  return parameters;
}

}  // namespace

TEST_CASE("loss scaler: unscale, overflow backoff and growth", "[loss_scaler]") {
  loom::LossScaler scaler(fp16());
  REQUIRE(scaler.enabled());
  CHECK(scaler.scale() == 1024.0);
  CHECK(scaler.scale_loss(torch::tensor(0.5)).item<double>() == 512.0);

  auto params = with_grads({torch::tensor({1024.0f, -2048.0f}), torch::tensor({512.0f})});
  CHECK(scaler.unscale(params));
  CHECK(torch::equal(params[0].grad(), torch::tensor({1.0f, -2.0f})));
  CHECK(torch::equal(params[1].grad(), torch::tensor({0.5f})));
  scaler.update(true);
  scaler.update(true);
  CHECK(scaler.scale() == 1024.0);
  CHECK(scaler.growth_tracker() == 2);

  // Injected overflow: an inf (or a nan) anywhere skips the step and halves the scale.
  for (const float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    auto overflowed = with_grads({torch::tensor({1.0f, 2.0f}), torch::tensor({bad})});
    const double before = scaler.scale();
    CHECK_FALSE(scaler.unscale(overflowed));
    scaler.update(false);
    CHECK(scaler.scale() == before / 2);
    CHECK(scaler.growth_tracker() == 0);
  }
  CHECK(scaler.scale() == 256.0);
  for (int i = 0; i < 3; ++i) scaler.update(true);  // growth_interval finite steps in a row
  CHECK(scaler.scale() == 512.0);
  CHECK(scaler.growth_tracker() == 0);

  scaler.update(true);
  loom::LossScaler restored(fp16());
  restored.load_state(scaler.state());
  CHECK(restored.scale() == 512.0);
  CHECK(restored.growth_tracker() == 1);
}

TEST_CASE("loss scaler: fp16 gradients of a scaled loss unscale to the fp32 ones", "[loss_scaler]") {
  // d loss / d out = 2 * out * 1e-8 ~ 6e-8 is at the bottom of fp16's subnormals: unscaled, the fp16
  // gradients are mostly lost; scaled by 65536 they are accurate to fp16 precision.
  torch::manual_seed(1);
  const auto x = torch::randn({16, 8});
  auto w = torch::randn({8, 4}, torch::requires_grad());
  const auto loss_of = [&](const torch::Tensor& weight, torch::ScalarType dtype) {
    return (x.to(dtype).mm(weight.to(dtype)).to(torch::kFloat) * 1e-4).pow(2).sum();
  };
  const auto reference = torch::autograd::grad({loss_of(w, torch::kFloat)}, {w})[0];
  const double size = reference.abs().max().item<double>();
  const auto unscaled = torch::autograd::grad({loss_of(w, torch::kHalf)}, {w})[0];
  CHECK(loom::test::max_abs_diff(unscaled, reference) > 0.1 * size);
  loom::LossScaler scaler(fp16(65536.0, 2000));
  scaler.scale_loss(loss_of(w, torch::kHalf)).backward();
  REQUIRE(scaler.unscale({w}));
  CHECK(loom::test::max_abs_diff(w.grad(), reference) < 0.01 * size);
}

TEST_CASE("loss scaler: disabled for fp32 and bf16", "[loss_scaler]") {
  loom::PrecisionConfig bf16;
  bf16.dtype = loom::Dtype::kBf16;
  loom::LossScaler scaler(bf16);
  CHECK_FALSE(scaler.enabled());
  // Nothing to divide: unscaling is refused (the trainer's finite check is then gradient_norm's, test_losses).
  CHECK_THROWS_WITH(scaler.unscale(with_grads({torch::tensor({3.0f})})), Catch::Contains("loss scaling is off"));
  scaler.update(false);
  CHECK(scaler.scale() == 1.0);
  CHECK(scaler.scale_loss(torch::tensor(3.0)).item<double>() == 3.0);
}
