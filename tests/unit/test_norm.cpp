// loom's LayerNorm / RMSNorm row kernels (models/norm.h): both kernel builds against the norms in fp64, fp32 and
// bf16 outputs, every gradient; the Norm module's forward_into_matmul against forward() under bf16 autocast.
// The hidden [.bench] case times them against ATen's at the bench-gpt shape.
#include <ATen/autocast_mode.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "core/cpu_allocator.h"
#include "core/cpu_kernels.h"
#include "models/layers.h"
#include "models/norm.h"
#include "test_util.h"

namespace {

struct Grads {
  torch::Tensor y, dx, dw, db;
};

// Output and gradients of `norm(x, w, b)` against upstream gradient g; b may be undefined.
template <typename Norm>
Grads run_norm(const Norm& norm, const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
          const torch::Tensor& g) {
  const auto r = loom::test::output_and_gradients([&](const auto& in) { return norm(in[0], in[1], in[2]); },
                                                  {x, w, b}, g);
  return {r[0], r[1], r[2], r[3]};
}

// The norms in fp64 through ATen's autograd: the reference.
torch::Tensor reference(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b, bool rms) {
  if (!rms) return torch::layer_norm(x, {x.size(-1)}, w, b, 1e-5);
  return w * (x * torch::rsqrt(x.pow(2).mean(-1, true) + 1e-5));
}

// fused_norm's output and gradients next to the fp64 reference's, at the same inputs; b may be undefined.
std::pair<Grads, Grads> ours_and_exact(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
                                       const torch::Tensor& g, bool rms, c10::ScalarType out_dtype, bool portable) {
  auto ours = run_norm([&](const auto& xx, const auto& ww, const auto& bb) {
    return loom::fused_norm(xx, ww, bb, 1e-5, rms, out_dtype, portable);
  }, x, w, b, g);
  auto as_double = [](const torch::Tensor& t) { return t.defined() ? t.to(torch::kDouble) : t; };
  auto exact = run_norm([&](const auto& xx, const auto& ww, const auto& bb) { return reference(xx, ww, bb, rms); },
                   as_double(x), as_double(w), as_double(b), as_double(g));
  return {ours, exact};
}

std::vector<bool> kernel_builds() { return loom::cpu_has_avx512() ? std::vector<bool>{true, false} : std::vector<bool>{true}; }

}  // namespace

TEST_CASE("fused_norm: LayerNorm and RMSNorm against fp64, fp32 output, both kernel builds", "[norm]") {
  torch::manual_seed(3);
  for (const bool portable : kernel_builds()) {
    for (const bool rms : {false, true}) {
      for (const int64_t C : {1, 7, 16, 37, 512, 1000}) {
        CAPTURE(portable, rms, C);
        // An offset and a scale well away from 0 and 1: a one-pass variance would lose digits here.
        const auto x = 3.0 + 2.5 * torch::randn({3, 5, C}), g = torch::randn({3, 5, C});
        const auto w = 1.0 + 0.5 * torch::randn({C});
        const auto b = rms ? torch::Tensor() : 0.3 * torch::randn({C});
        const auto [ours, exact] = ours_and_exact(x, w, b, g, rms, torch::kFloat, portable);
        REQUIRE(ours.y.scalar_type() == torch::kFloat);
        REQUIRE(ours.y.sizes() == x.sizes());
        CHECK(loom::test::max_abs_diff(ours.y, exact.y) < 1e-5);
        CHECK(loom::test::max_abs_diff(ours.dx, exact.dx) < 1e-5 * std::max<int64_t>(1, C / 64));
        CHECK(loom::test::max_abs_diff(ours.dw, exact.dw) < 1e-4);
        if (!rms) CHECK(loom::test::max_abs_diff(ours.db, exact.db) < 1e-4);
      }
    }
  }
}

TEST_CASE("fused_norm: bf16 output is the fp64 value rounded once, and bf16 gradients are read as they are", "[norm]") {
  torch::manual_seed(4);
  const int64_t C = 512;
  const auto x = 1.0 + torch::randn({64, C}), w = 1.0 + 0.5 * torch::randn({C}), b = 0.3 * torch::randn({C});
  const auto g = torch::randn({64, C}).to(torch::kBFloat16);
  for (const bool portable : kernel_builds()) {
    for (const bool rms : {false, true}) {
      CAPTURE(portable, rms);
      const auto bias = rms ? torch::Tensor() : b;
      const auto [ours, exact] = ours_and_exact(x, w, bias, g, rms, torch::kBFloat16, portable);
      REQUIRE(ours.y.scalar_type() == torch::kBFloat16);
      // Rounding fp32 arithmetic once may land on the other side of a tie from rounding the fp64 value: rare.
      const auto rounded = exact.y.to(torch::kBFloat16);
      const double exact_share = ours.y.eq(rounded).to(torch::kDouble).mean().item<double>();
      CHECK(exact_share > 0.999);
      CHECK(((ours.y.to(torch::kDouble) - exact.y).abs() <= exact.y.abs() * std::ldexp(1.0, -8) + 1e-30)
                .all()
                .item<bool>());
      REQUIRE(ours.dx.scalar_type() == torch::kFloat);
      CHECK(loom::test::max_abs_diff(ours.dx, exact.dx) < 1e-4);
      CHECK(loom::test::max_abs_diff(ours.dw, exact.dw) < 1e-3);
      if (!rms) CHECK(loom::test::max_abs_diff(ours.db, exact.db) < 1e-3);
    }
  }
}

TEST_CASE("Norm: forward_into_matmul under bf16 autocast gives forward()'s values in bf16 and its gradients",
          "[norm]") {
  torch::manual_seed(5);
  for (const auto kind : {loom::NormKind::kLayerNorm, loom::NormKind::kRmsNorm}) {
    CAPTURE(static_cast<int>(kind));
    loom::NormOptions options;
    options.dim = 256;
    options.kind = kind;
    loom::Norm norm(options);
    {
      torch::NoGradGuard no_grad;
      for (auto& p : norm->parameters()) p.normal_(1.0, 0.3);
    }
    const auto x = torch::randn({4, 9, 256}), proj = torch::randn({256, 64});
    // The loss through a matrix product under autocast: the path forward_into_matmul is for.
    auto step = [&](bool fused, std::vector<torch::Tensor>* grads) {
      auto xx = x.clone().requires_grad_();
      at::autocast::set_autocast_enabled(at::kCPU, true);
      at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
      const auto h = fused ? norm->forward_into_matmul(xx) : norm->forward(xx);
      const auto y = torch::matmul(h, proj);
      at::autocast::set_autocast_enabled(at::kCPU, false);
      norm->zero_grad();
      y.to(torch::kFloat).pow(2).sum().backward();
      grads->push_back(xx.grad());
      for (auto& p : norm->parameters()) grads->push_back(p.grad().clone());
      return h;
    };
    std::vector<torch::Tensor> ours, aten;
    const auto h_ours = step(true, &ours), h_aten = step(false, &aten);
    REQUIRE(h_ours.scalar_type() == torch::kBFloat16);
    REQUIRE(h_aten.scalar_type() == torch::kFloat);
    const auto rounded = h_aten.to(torch::kBFloat16);
    CHECK(h_ours.eq(rounded).to(torch::kDouble).mean().item<double>() > 0.999);
    CHECK(loom::test::max_abs_diff(h_ours, rounded) <= rounded.abs().max().item<double>() * std::ldexp(1.0, -8));
    for (size_t i = 0; i < ours.size(); ++i) {
      CAPTURE(i);
      CHECK(loom::test::max_abs_diff(ours[i], aten[i]) <= 1e-4 * std::max(1.0, aten[i].abs().max().item<double>()));
    }
    // Without autocast it is forward() itself.
    CHECK(torch::equal(norm->forward_into_matmul(x), norm->forward(x)));
  }
}

TEST_CASE("fused_norm: rejects what it does not take", "[norm]") {
  const auto w = torch::ones({8});
  CHECK_THROWS_WITH(loom::fused_norm(torch::ones({2, 8}, torch::kDouble), w, w, 1e-5, false, torch::kFloat),
                    Catch::Contains("fp32 CPU"));
  CHECK_THROWS_WITH(loom::fused_norm(torch::ones({2, 8}), w, w, 1e-5, true, torch::kFloat), Catch::Contains("no bias"));
  CHECK_THROWS_WITH(loom::fused_norm(torch::ones({2, 8}), w, w, 1e-5, false, torch::kHalf), Catch::Contains("float or bf16"));
}

TEST_CASE("fused_norm: fwd+bwd time against ATen's at bench-gpt's shape", "[.bench]") {
  loom::use_cpu_allocator(loom::CpuAllocatorKind::kCaching);
  const auto x = torch::randn({2048, 512}), w = torch::ones({512}), b = torch::zeros({512});
  const auto g = torch::randn({2048, 512}).to(torch::kBFloat16);
  std::vector<double> ours, theirs;
  auto time = [&](auto norm) {
    const auto start = std::chrono::steady_clock::now();
    run_norm(norm, x, w, b, g);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  };
  for (int round = 0; round < 21; ++round) {
    theirs.push_back(time([](const auto& xx, const auto& ww, const auto& bb) {
      return torch::layer_norm(xx, {512}, ww, bb, 1e-5).to(torch::kBFloat16);
    }));
    ours.push_back(time([](const auto& xx, const auto& ww, const auto& bb) {
      return loom::fused_norm(xx, ww, bb, 1e-5, false, torch::kBFloat16);
    }));
  }
  std::vector<double> fwd_ours, fwd_theirs;
  for (int round = 0; round < 21; ++round) {
    torch::NoGradGuard no_grad;
    auto t0 = std::chrono::steady_clock::now();
    auto a = torch::layer_norm(x, {512}, w, b, 1e-5).to(torch::kBFloat16);
    auto t1 = std::chrono::steady_clock::now();
    auto c = loom::fused_norm(x, w, b, 1e-5, false, torch::kBFloat16);
    auto t2 = std::chrono::steady_clock::now();
    fwd_theirs.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    fwd_ours.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
  }
  std::sort(fwd_ours.begin(), fwd_ours.end());
  std::sort(fwd_theirs.begin(), fwd_theirs.end());
  std::printf("LayerNorm to bf16, forward: loom %.3f ms, ATen + cast %.3f ms (median of 21)\n", fwd_ours[10],
              fwd_theirs[10]);
  std::sort(ours.begin(), ours.end());
  std::sort(theirs.begin(), theirs.end());
  std::printf("LayerNorm to bf16, fwd+bwd: loom %.3f ms, ATen + cast %.3f ms (median of 21)\n", ours[10], theirs[10]);
  loom::use_cpu_allocator(loom::CpuAllocatorKind::kSystem);
}
