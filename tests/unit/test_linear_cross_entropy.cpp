// The fused, chunked LM head + cross-entropy (train.loss_chunk_tokens) against the plain path
// cross_entropy(hidden @ weight^T): loss and the gradients of hidden and weight, in fp32 (to fp32 rounding)
// and under bf16 autocast (to bf16 rounding), for chunk sizes that do and do not divide the tokens, with
// label smoothing and ignored targets, with each implementation of the softmax steps (loom's row kernels, both
// builds, and ATen's operators); then through the GPT (tied and untied heads, checkpointing on).
// The vocab-parallel case is in test_tensor_parallel.cpp.
#include "core/cpu_allocator.h"
#include "core/error.h"
#include "models/gpt.h"
#include "optim/cross_entropy.h"
#include "optim/linear_cross_entropy.h"
#include "train/runtime.h"
#include "test_util.h"

using loom::test::max_abs_diff;

namespace {

struct LossResult {
  double loss = 0;
  torch::Tensor grad_hidden, grad_weight;
};

// chunk 0: the plain path.
LossResult run_loss(const torch::Tensor& hidden0, const torch::Tensor& weight0, const torch::Tensor& targets, int64_t chunk,
           double smoothing, bool bf16, loom::SoftmaxSteps steps = loom::SoftmaxSteps::kAuto) {
  auto hidden = hidden0.clone().requires_grad_(true);
  auto weight = weight0.clone().requires_grad_(true);
  loom::PrecisionConfig precision;
  precision.dtype = bf16 ? loom::Dtype::kBf16 : loom::Dtype::kFp32;
  loom::AutocastGuard autocast(precision, torch::kCPU);
  auto loss = chunk == 0 ? loom::cross_entropy(torch::nn::functional::linear(hidden, weight), targets, smoothing)
                         : loom::linear_cross_entropy(hidden, weight, targets, chunk, smoothing, loom::kIgnoreIndex,
                                                      nullptr, steps);
  CHECK(loss.dim() == 0);
  CHECK(loss.scalar_type() == torch::kFloat);
  loss.backward();
  return {loss.item<double>(), hidden.grad(), weight.grad()};
}

// |a - b| relative to b's largest magnitude.
double relative_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return max_abs_diff(a, b) / std::max(1e-12, b.abs().max().item<double>());
}

}  // namespace

TEST_CASE("linear_cross_entropy: same loss and gradients as cross_entropy of the full logits", "[losses]") {
  torch::manual_seed(5);
  const int64_t N = 23, C = 16, V = 37;
  const auto hidden = torch::randn({N, C});
  const auto weight = torch::randn({V, C}) * 0.5;
  auto targets = torch::randint(0, V, {N}, torch::kLong);
  targets[3] = loom::kIgnoreIndex;
  targets[17] = loom::kIgnoreIndex;
  for (const bool bf16 : {false, true})
    for (const double smoothing : {0.0, 0.1}) {
      const LossResult plain = run_loss(hidden, weight, targets, 0, smoothing, bf16);
      for (const int64_t chunk : {1, 5, 23, 64})
        for (const auto steps : {loom::SoftmaxSteps::kAuto, loom::SoftmaxSteps::kAten,
                                 loom::SoftmaxSteps::kPortableKernels}) {
        INFO("bf16 " << bf16 << " smoothing " << smoothing << " chunk " << chunk << " steps " << int(steps));
        const LossResult fused = run_loss(hidden, weight, targets, chunk, smoothing, bf16, steps);
        // fp32: summation order only. bf16: the products round to bf16 (the plain path's logit gradient is
        // divided by the token count before its rounding, the fused one after).
        const double tolerance = bf16 ? 1e-2 : 1e-5;
        CHECK(std::abs(fused.loss - plain.loss) <= tolerance * std::max(1.0, plain.loss));
        CHECK(relative_diff(fused.grad_hidden, plain.grad_hidden) <= tolerance);
        CHECK(relative_diff(fused.grad_weight, plain.grad_weight) <= tolerance);
      }
    }
}

TEST_CASE("linear_cross_entropy: no gradient kept without grad mode, every target ignored costs 0", "[losses]") {
  torch::manual_seed(6);
  const auto hidden = torch::randn({8, 4}).requires_grad_(true);
  const auto weight = torch::randn({11, 4}).requires_grad_(true);
  const auto targets = torch::randint(0, 11, {8}, torch::kLong);
  {
    torch::NoGradGuard no_grad;
    const auto loss = loom::linear_cross_entropy(hidden, weight, targets, 3);
    CHECK_FALSE(loss.requires_grad());
    CHECK(loss.item<double>() ==
          Approx(loom::cross_entropy(torch::nn::functional::linear(hidden, weight), targets).item<double>()).epsilon(1e-6));
  }
  const auto ignored = torch::full({8}, loom::kIgnoreIndex, torch::kLong);
  auto loss = loom::linear_cross_entropy(hidden, weight, ignored, 3);
  CHECK(loss.item<double>() == 0.0);
  loss.backward();
  CHECK(hidden.grad().abs().max().item<double>() == 0.0);
  CHECK(weight.grad().abs().max().item<double>() == 0.0);
  CHECK_THROWS_AS(loom::linear_cross_entropy(hidden, weight, targets, 0), loom::Error);
}

TEST_CASE("linear_cross_entropy: backward hands over its stored gradients and keeps no copy", "[losses]") {
  // The graph (held by `loss`) outlives backward: the (N, C) and (V, C) gradients the forward computed
  // must become hidden.grad and weight.grad, not stay stored beside them for the rest of backward.
  torch::manual_seed(8);
  const auto hidden = torch::randn({512, 256}).requires_grad_(true);
  const auto weight = torch::randn({1024, 256}).requires_grad_(true);
  const auto targets = torch::randint(0, 1024, {512}, torch::kLong);
  loom::use_cpu_allocator(loom::CpuAllocatorKind::kCaching);
  auto* allocator = loom::caching_cpu_allocator();
  auto loss = loom::linear_cross_entropy(hidden, weight, targets, 128);
  const auto before = allocator->stats().allocated;
  loss.backward();
  const auto after = allocator->stats().allocated;
  loom::use_cpu_allocator(loom::CpuAllocatorKind::kSystem);
  REQUIRE(hidden.grad().defined());
  REQUIRE(weight.grad().defined());
  CHECK(after - before < 64 * 1024);  // the two gradients are 1.5 MiB together
}

TEST_CASE("linear_cross_entropy: the GPT's final_hidden and head_weight give forward()'s loss and gradients",
          "[losses]") {
  for (const bool tied : {true, false}) {
    auto c = loom::test::small_gpt_config(/*vocab_size=*/53, /*d_model=*/32, /*n_layers=*/2, /*n_heads=*/4,
                                          /*max_seq_len=*/16);
    c.dropout = 0.1;  // on: both passes below draw the same masks
    c.tie_embeddings = tied;
    torch::manual_seed(7);
    loom::Gpt model(c);
    model->parallelize({loom::ActivationCheckpointing::kFull});
    const auto tokens = torch::randint(0, 53, {3, 16}, torch::kLong);
    const auto inputs = tokens.narrow(1, 0, 15), targets = tokens.narrow(1, 1, 15).flatten();
    auto grads = [&](bool fused) {
      model->zero_grad();
      torch::manual_seed(8);  // the same dropout masks for both
      auto loss = fused ? loom::linear_cross_entropy(model->final_hidden(inputs).flatten(0, 1), model->head_weight(),
                                                     targets, 16)
                        : loom::cross_entropy(model->forward(inputs).flatten(0, 1), targets);
      loss.backward();
      std::vector<torch::Tensor> g{loss.detach()};
      for (const auto& p : model->parameters()) g.push_back(p.grad().clone());
      return g;
    };
    const auto plain = grads(false), fused = grads(true);
    REQUIRE(plain.size() == fused.size());
    for (size_t i = 0; i < plain.size(); ++i) {
      INFO("tied " << tied << " tensor " << i);
      CHECK(relative_diff(fused[i], plain[i]) <= 1e-5);
    }
  }
}
