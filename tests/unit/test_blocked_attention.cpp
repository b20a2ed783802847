// Blocked causal attention (models/blocked_attention.h) against at::scaled_dot_product_attention: output
// and gradients in fp32 (both row kernels) and bf16, T not a multiple of the block, and a GPT's loss and
// gradients through it against SDPA forced. The hidden [.bench] case times both at the bench-gpt shape.
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "models/blocked_attention.h"
#include "models/gpt.h"
#include "test_util.h"

namespace {

struct AttentionResult {
  torch::Tensor out, dq, dk, dv;
};

// Output and input gradients of `attend` at q, k, v (B, H, T, D) against upstream gradient g.
template <typename Attend>
AttentionResult run_attention(const Attend& attend, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
           const torch::Tensor& g) {
  const auto r = loom::test::output_and_gradients([&](const auto& in) { return attend(in[0], in[1], in[2]); },
                                                  {q, k, v}, g);
  return {r[0], r[1], r[2], r[3]};
}

const auto sdpa = [](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
};

// |a - b| / |b| over the whole tensor, in double.
double rel(const torch::Tensor& a, const torch::Tensor& b) {
  const auto bd = b.to(torch::kDouble);
  return ((a.to(torch::kDouble) - bd).norm() / bd.norm()).item<double>();
}

std::vector<double> errors(const AttentionResult& r, const AttentionResult& ref) {
  return {rel(r.out, ref.out), rel(r.dq, ref.dq), rel(r.dk, ref.dk), rel(r.dv, ref.dv)};
}

// q, k, v, g (B, H, T, D) as the model makes them: views of (B, T, H, D) with heads transposed.
std::vector<torch::Tensor> inputs(int64_t B, int64_t H, int64_t T, int64_t D, torch::Dtype dtype) {
  std::vector<torch::Tensor> t;
  for (int i = 0; i < 4; ++i) t.push_back(torch::randn({B, T, H, D}).to(dtype).transpose(1, 2));
  return t;
}

}  // namespace

TEST_CASE("blocked attention: fp32 output and gradients equal SDPA's", "[models][attention]") {
  torch::manual_seed(0);
  struct Shape {
    int64_t T, D, block;
  };
  for (const auto& s : {Shape{100, 64, 64}, Shape{256, 32, 64}, Shape{300, 64, 128}, Shape{7, 32, 64}}) {
    for (const bool portable : {false, true}) {
      CAPTURE(s.T, s.D, s.block, portable);
      const auto in = inputs(2, 3, s.T, s.D, torch::kFloat);
      const auto ref = run_attention(sdpa, in[0], in[1], in[2], in[3]);
      auto blocked = [&](auto q, auto k, auto v) { return loom::blocked_causal_attention(q, k, v, s.block, portable); };
      const auto got = run_attention(blocked, in[0], in[1], in[2], in[3]);
      for (double e : errors(got, ref)) CHECK(e < 1e-5);
    }
  }
}

TEST_CASE("blocked attention: bf16 is as close to fp32 as SDPA in bf16 is", "[models][attention]") {
  torch::manual_seed(1);
  for (const int64_t T : {100, 256, 300}) {
    for (const int64_t D : {64, 32}) {
      CAPTURE(T, D);
      const auto in = inputs(2, 4, T, D, torch::kBFloat16);
      std::vector<torch::Tensor> wide;  // the same bf16 values in double: the reference
      for (const auto& t : in) wide.push_back(t.to(torch::kDouble));
      const auto ref = run_attention(sdpa, wide[0], wide[1], wide[2], wide[3]);
      const auto theirs = errors(run_attention(sdpa, in[0], in[1], in[2], in[3]), ref);
      for (const bool portable : {false, true}) {
        auto blocked = [&](auto q, auto k, auto v) { return loom::blocked_causal_attention(q, k, v, 64, portable); };
        const auto ours = errors(run_attention(blocked, in[0], in[1], in[2], in[3]), ref);
        for (size_t i = 0; i < ours.size(); ++i) {
          CAPTURE(portable, i, ours[i], theirs[i]);
          CHECK(ours[i] < 2e-2);
          CHECK(ours[i] <= 2.0 * theirs[i]);
        }
      }
    }
  }
}

TEST_CASE("blocked attention: a GPT's loss and gradients equal those with SDPA", "[models][attention]") {
  torch::manual_seed(2);
  auto config = loom::test::small_gpt_config(/*vocab_size=*/97, /*d_model=*/64, /*n_layers=*/2, /*n_heads=*/4,
                                             /*max_seq_len=*/80);
  loom::Gpt model(config);
  const auto tokens = torch::randint(97, {3, 80}, torch::kLong);
  const auto q = torch::zeros({3, 4, 80, 16});
  auto loss_and_grads = [&](loom::BlockedAttentionMode mode) {
    loom::set_blocked_attention_mode(mode);
    model->zero_grad();
    const auto logits = model->forward(tokens.narrow(1, 0, 79));
    const auto loss = torch::cross_entropy_loss(logits.reshape({-1, 97}), tokens.narrow(1, 1, 79).reshape(-1));
    loss.backward();
    std::vector<torch::Tensor> out{loss.detach()};
    for (const auto& p : model->parameters()) out.push_back(p.grad().clone());
    return out;
  };
  const auto blocked = loss_and_grads(loom::BlockedAttentionMode::kAlways);
  const auto sdpa_forced = loss_and_grads(loom::BlockedAttentionMode::kOff);
  CHECK(!loom::blocked_attention_is_faster(q, q, q));  // off really is off
  loom::set_blocked_attention_mode(loom::BlockedAttentionMode::kAlways);
  CHECK(loom::blocked_attention_is_faster(q, q, q));
  loom::set_blocked_attention_mode(loom::BlockedAttentionMode::kAuto);
  REQUIRE(blocked.size() == sdpa_forced.size());
  // Two kernels sum in different orders: some gradient differs in its last bits, or the model never took
  // the blocked path and this test would compare SDPA with itself.
  bool any_bit_differs = false;
  for (size_t i = 0; i < blocked.size(); ++i) any_bit_differs |= !torch::equal(blocked[i], sdpa_forced[i]);
  CHECK(any_bit_differs);
  CHECK(blocked[0].item<double>() == Approx(sdpa_forced[0].item<double>()).epsilon(1e-6));
  for (size_t i = 1; i < blocked.size(); ++i) {
    CAPTURE(i);
    CHECK(rel(blocked[i], sdpa_forced[i]) < 1e-5);
  }
}

TEST_CASE("blocked attention: fwd+bwd time against SDPA at the bench-gpt layer", "[.bench]") {
  // B=8, H=8, T=256, D=64 (configs/bench-gpt.yaml); alternating rounds, medians in ms per layer.
  for (const auto dtype : {torch::kBFloat16, torch::kFloat}) {
    for (const int64_t T : {256, 512, 1024}) {
      const auto in = inputs(8, 8, T, 64, dtype);
      std::vector<double> ours, theirs;
      auto time = [&](auto attend) {
        const auto start = std::chrono::steady_clock::now();
        run_attention(attend, in[0], in[1], in[2], in[3]);
        return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      };
      for (int round = 0; round < 7; ++round) {
        theirs.push_back(time(sdpa));
        ours.push_back(time([](auto q, auto k, auto v) { return loom::blocked_causal_attention(q, k, v); }));
      }
      std::sort(ours.begin(), ours.end());
      std::sort(theirs.begin(), theirs.end());
      std::printf("%s T=%ld: blocked %.1f ms, sdpa %.1f ms (median of 7; min %.1f vs %.1f)\n",
                  dtype == torch::kFloat ? "fp32" : "bf16", static_cast<long>(T), ours[3], theirs[3], ours[0],
                  theirs[0]);
    }
  }
}
