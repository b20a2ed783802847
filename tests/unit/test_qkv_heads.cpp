// qkv_heads (models/qkv_heads.h): the head views of the fused projection, and a backward that gives the same
// gradient as split + view + transpose whatever layout the head gradients come in, without a copy when they
// already lie in the projection's layout.
#include "models/blocked_attention.h"
#include "models/qkv_heads.h"
#include "test_util.h"

namespace {

// The reference: what attention.cpp did before qkv_heads.
std::vector<torch::Tensor> split_heads(const torch::Tensor& qkv, int64_t H, int64_t K, int64_t D) {
  const int64_t B = qkv.size(0), T = qkv.size(1);
  const auto parts = qkv.split({H * D, K * D, K * D}, -1);
  return {parts[0].view({B, T, H, D}).transpose(1, 2), parts[1].view({B, T, K, D}).transpose(1, 2),
          parts[2].view({B, T, K, D}).transpose(1, 2)};
}

}  // namespace

TEST_CASE("qkv_heads: the views and the gradient of split + view + transpose, grouped heads too", "[attention]") {
  torch::manual_seed(7);
  for (const auto& [H, K] : {std::pair<int64_t, int64_t>{4, 4}, {4, 2}, {6, 1}}) {
    CAPTURE(H, K);
    const int64_t B = 2, T = 5, D = 3;
    const auto qkv = torch::randn({B, T, (H + 2 * K) * D});
    const auto gq = torch::randn({B, H, T, D}), gk = torch::randn({B, K, T, D}), gv = torch::randn({B, K, T, D});
    // Loss: a weighted sum of each head tensor, so each gets its own gradient; v is left out in one case.
    for (const bool use_v : {true, false}) {
      CAPTURE(use_v);
      auto ours_in = qkv.clone().requires_grad_(), ref_in = qkv.clone().requires_grad_();
      const auto [q, k, v] = loom::qkv_heads(ours_in, H, K, D);
      const auto ref = split_heads(ref_in, H, K, D);
      CHECK(torch::equal(q, ref[0]));
      CHECK(torch::equal(k, ref[1]));
      CHECK(torch::equal(v, ref[2]));
      CHECK(q.data_ptr() == ours_in.data_ptr());  // views, no copies
      auto loss = [&](const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& c) {
        auto l = (a * gq).sum() + (b * gk).sum();
        return use_v ? l + (c * gv).sum() : l;
      };
      loss(q, k, v).backward();
      loss(ref[0], ref[1], ref[2]).backward();
      CHECK(torch::equal(ours_in.grad(), ref_in.grad()));
    }
  }
}

TEST_CASE("qkv_heads: gradients already in the projection's layout are its gradient as they are", "[attention]") {
  // The blocked attention's backward writes dq, dk, dv as views of one (B, T, 3, H, D) buffer.
  torch::manual_seed(8);
  const int64_t B = 2, T = 64, H = 2, D = 16;
  const auto qkv = torch::randn({B, T, 3 * H * D}).to(torch::kBFloat16);
  auto ours_in = qkv.clone().requires_grad_(), ref_in = qkv.clone().requires_grad_();
  const auto [q, k, v] = loom::qkv_heads(ours_in, H, H, D);
  auto y = loom::blocked_causal_attention(q, k, v);
  const auto ref = split_heads(ref_in, H, H, D);
  auto y_ref = loom::blocked_causal_attention(ref[0], ref[1], ref[2]);
  const auto g = torch::randn(y.sizes()).to(torch::kBFloat16);
  // A hook sees the gradients the attention hands back: they share one buffer, so the input's gradient is it.
  std::vector<const void*> grad_q_data;
  q.register_hook([&](const torch::Tensor& grad) { grad_q_data.push_back(grad.data_ptr()); });
  y.backward(g);
  y_ref.backward(g);
  CHECK(torch::equal(ours_in.grad(), ref_in.grad()));
  REQUIRE(grad_q_data.size() == 1);
  CHECK(ours_in.grad().data_ptr() == grad_q_data[0]);
}

TEST_CASE("qkv_heads: a projection of the wrong width is refused with the shapes", "[attention]") {
  CHECK_THROWS_WITH(loom::qkv_heads(torch::zeros({2, 3, 10}), 2, 1, 3), Catch::Contains("(B, T, (H + 2K) D)"));
}
