// models/few_rows_linear.h: the kernel for a few rows of x at inference equals the product in fp64 within the error
// bound of an fp32 dot product, for shapes with every kind of tail (K not a multiple of the vector, N not of the
// tile, M past the tile of x rows), and it is taken exactly where it should be: inside an InferenceScope only.
#include <chrono>
#include <cstdio>

#include "models/few_rows_linear.h"
#include "test_util.h"

using loom::few_rows_kernel_applies;
using loom::linear_forward;

TEST_CASE("few-row linear: equals the fp64 product within the fp32 dot product's bound", "[models][linear]") {
  loom::InferenceScope inference;
  torch::manual_seed(3);
  const double u = std::ldexp(1.0, -24);  // fp32's unit roundoff
  for (int64_t k : {1, 15, 16, 17, 130, 512}) {
    for (int64_t n : {1, 3, 4, 5, 67}) {
      for (int64_t m : {1, 2, 5, 6, 7, 8}) {
        for (bool with_bias : {false, true}) {
          INFO("m " << m << " k " << k << " n " << n << " bias " << with_bias);
          const auto x = torch::randn({m, 1, k});
          const auto w = torch::randn({n, k});
          const auto b = with_bias ? torch::randn({n}) : torch::Tensor();
          REQUIRE(few_rows_kernel_applies(x, w, b));
          const auto y = linear_forward(x, w, b);
          REQUIRE(y.sizes() == torch::IntArrayRef({m, 1, n}));
          auto exact = torch::matmul(x.to(torch::kDouble), w.to(torch::kDouble).t());
          if (with_bias) exact = exact + b.to(torch::kDouble);
          // |error| <= (k + 1) u sum |x_i w_i| (+ |b|): a dot product's bound in fp32, FMA or not
          auto bound = torch::matmul(x.abs().to(torch::kDouble), w.abs().to(torch::kDouble).t());
          if (with_bias) bound = bound + b.abs().to(torch::kDouble);
          bound = bound * ((k + 2) * u);
          CHECK(((y.to(torch::kDouble) - exact).abs() <= bound).all().item<bool>());
          // the bound is not loose enough to pass anything: torch's own product meets it too
          const auto reference = torch::linear(x, w, b).to(torch::kDouble);
          CHECK(((reference - exact).abs() <= bound).all().item<bool>());
        }
      }
    }
  }
}

TEST_CASE("few-row linear: strided input, and where torch::linear runs instead", "[models][linear]") {
  torch::manual_seed(4);
  const auto w = torch::randn({33, 40});
  {
    // Without gradients but outside inference (activation checkpointing's first pass): torch::linear, whose sums
    // the re-run with gradients reproduces.
    torch::NoGradGuard no_grad;
    CHECK_FALSE(few_rows_kernel_applies(torch::randn({2, 40}), w));
  }
  {
    loom::InferenceScope inference;
    {
      loom::InferenceScope nested;
    }
    const auto x = torch::randn({40, 3}).t();  // (3, 40), not contiguous
    REQUIRE(few_rows_kernel_applies(x, w));
    CHECK(torch::allclose(linear_forward(x, w), torch::linear(x, w), 1e-5, 1e-5));
    CHECK_FALSE(few_rows_kernel_applies(torch::randn({loom::kFewRows + 1, 40}), w));       // too many rows
    CHECK_FALSE(few_rows_kernel_applies(torch::randn({2, 40}, torch::kBFloat16), w));        // not fp32
    CHECK_FALSE(few_rows_kernel_applies(torch::randn({2, 40}), w.t().contiguous().t()));     // W strided
    CHECK(few_rows_kernel_applies(torch::randn({2, 40}), w));
    loom::set_few_rows_kernel_enabled(false);
    CHECK_FALSE(few_rows_kernel_applies(torch::randn({2, 40}), w));
    loom::set_few_rows_kernel_enabled(true);
  }
  // With gradients wanted, autograd's torch::linear: the gradient reaches W.
  const auto wg = w.clone().requires_grad_();
  const auto x = torch::randn({2, 40});
  CHECK_FALSE(few_rows_kernel_applies(x, wg));
  linear_forward(x, wg).sum().backward();
  CHECK(torch::allclose(wg.grad(), x.sum(0).expand({33, 40})));
}

// The products of one decode / verification step of a d_model 512, 8-layer GPT (27M parameters, more than the
// caches), fp32, through loom's kernel and through torch::linear, each the best of 5:
//   build/tests/loom_tests "[.linear-bench]"
TEST_CASE("few-row linear: time of a 512 x 8 model's products against torch::linear", "[.linear-bench]") {
  loom::InferenceScope inference;
  const int64_t d = 512, layers = 8;
  std::vector<torch::Tensor> weights;
  for (int64_t l = 0; l < layers; ++l)
    for (auto [out, in] : {std::pair{3 * d, d}, {d, d}, {4 * d, d}, {d, 4 * d}})
      weights.push_back(torch::randn({out, in}));
  weights.push_back(torch::randn({8192, d}));  // the head
  for (int64_t m : {1, 2, 3, 5, 8}) {
    double best[2] = {1e9, 1e9};
    for (int rep = 0; rep < 10; ++rep) {
      for (int kernel = 0; kernel < 2; ++kernel) {
        loom::set_few_rows_kernel_enabled(kernel == 1);
        const auto start = std::chrono::steady_clock::now();
        for (const auto& w : weights) linear_forward(torch::randn({m, w.size(1)}), w);
        const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
        best[kernel] = std::min(best[kernel], took.count());
      }
    }
    loom::set_few_rows_kernel_enabled(true);
    std::printf("rows %2lld: torch::linear %6.2f ms, loom %6.2f ms (%.2fx)\n", static_cast<long long>(m), best[0] * 1e3,
                best[1] * 1e3, best[0] / best[1]);
  }
}
