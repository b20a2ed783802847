// Mixture of Experts (models/moe.h, models/moe_router.h): each router kind's experts and weights, the
// load-balancing and z losses, the expert-bias sign rule and capacity dropping against closed forms; the
// grouped experts against a per-expert masked loop (output and gradients); the aux losses reaching the router
// through the identity on the output; the model.moe keys and their checks; parameter counts of MoE GPTs
// (built against the closed forms, and the Mixtral and Qwen3 presets against transformers' counts).
#include <chrono>
#include <cmath>
#include <cstdio>

#include "core/config.h"
#include "models/estimates.h"
#include "models/gpt.h"
#include "models/moe.h"
#include "models/moe_router.h"
#include "parallel/context_parallel_layout.h"
#include "parallel/process_group.h"
#include "test_util.h"

using loom::MoeRouter;

namespace {

torch::Tensor moe_logits() {
  // 3 tokens x 4 experts
  return torch::tensor({{1.0, 3.0, 2.0, 0.0}, {0.5, -1.0, 0.0, 2.5}, {0.0, 0.0, 1.0, 1.0}}, torch::kDouble);
}

loom::MoeOptions small_moe(loom::Activation activation = loom::Activation::kSwiglu) {
  loom::MoeOptions o;
  o.d_model = 8;
  o.num_experts = 4;
  o.top_k = 2;
  o.d_ff = 6;
  o.activation = activation;
  return o;
}

}  // namespace

TEST_CASE("moe router: topk_softmax picks the largest logits and softmaxes them", "[moe]") {
  const auto l = moe_logits();
  const auto r = loom::route(l, MoeRouter::kTopkSoftmax, 2, false);
  CHECK(torch::equal(r.experts.narrow(0, 0, 2), torch::tensor({{1, 2}, {3, 0}}, torch::kLong)));
  // token 0: softmax([3, 2]) = [e / (e + 1), 1 / (e + 1)]
  const double e = std::exp(1.0);
  CHECK_THAT(r.weights[0][0].item<double>(), loom::test::close_to(e / (e + 1), 1e-12));
  CHECK_THAT(r.weights[1][1].item<double>(), loom::test::close_to(1 / (1 + std::exp(2.0)), 1e-12));
  CHECK_THAT(r.probs, loom::test::tensor_close_to(torch::softmax(l, -1), 1e-12));
}

TEST_CASE("moe router: softmax_topk takes probabilities, normalize divides by their sum", "[moe]") {
  const auto l = moe_logits();
  const auto p = torch::softmax(l, -1);
  const auto plain = loom::route(l, MoeRouter::kSoftmaxTopk, 2, false);
  CHECK(torch::equal(plain.experts.narrow(0, 0, 2), torch::tensor({{1, 2}, {3, 0}}, torch::kLong)));
  CHECK_THAT(plain.weights[0][0].item<double>(), loom::test::close_to(p[0][1].item<double>(), 1e-12));
  CHECK_THAT(plain.weights[1][1].item<double>(), loom::test::close_to(p[1][0].item<double>(), 1e-12));
  const auto normalized = loom::route(l, MoeRouter::kSoftmaxTopk, 2, true);
  CHECK_THAT(normalized.weights[0][0].item<double>(),
             loom::test::close_to(p[0][1].item<double>() / (p[0][1].item<double>() + p[0][2].item<double>()), 1e-12));
  CHECK_THAT(normalized.weights.sum(-1), loom::test::tensor_close_to(torch::ones({3}, torch::kDouble), 1e-12));
}

TEST_CASE("moe router: sigmoid scores, probs normalised per token", "[moe]") {
  const auto l = moe_logits();
  const auto s = torch::sigmoid(l);
  const auto r = loom::route(l, MoeRouter::kSigmoid, 1, false);
  CHECK(torch::equal(r.experts.narrow(0, 0, 2).squeeze(1), torch::tensor({1, 3}, torch::kLong)));
  CHECK_THAT(r.weights[0][0].item<double>(), loom::test::close_to(s[0][1].item<double>(), 1e-12));
  CHECK_THAT(r.probs, loom::test::tensor_close_to(s / s.sum(-1, true), 1e-12));
  const auto n = loom::route(l, MoeRouter::kSigmoid, 2, true);
  CHECK_THAT(n.weights[1][0].item<double>(),
             loom::test::close_to(s[1][3].item<double>() / (s[1][3].item<double>() + s[1][0].item<double>()), 1e-12));
}

TEST_CASE("moe router: the expert bias moves the selection, never the weights", "[moe]") {
  const auto l = moe_logits();
  // Expert 0 pushed up by 10: every token picks it first; its weight is still its own logit's softmax.
  const auto bias = torch::tensor({10.0, 0.0, 0.0, 0.0});
  const auto r = loom::route(l, MoeRouter::kTopkSoftmax, 2, false, bias);
  CHECK(torch::equal(r.experts.select(1, 0), torch::zeros({3}, torch::kLong)));
  // token 0: experts 0 and 1, softmax([1, 3])
  CHECK_THAT(r.weights[0][0].item<double>(), loom::test::close_to(1 / (1 + std::exp(2.0)), 1e-12));
  const auto s = loom::route(l, MoeRouter::kSigmoid, 2, false, bias);
  CHECK_THAT(s.weights[0][0].item<double>(), loom::test::close_to(1 / (1 + std::exp(-1.0)), 1e-12));
}

TEST_CASE("moe losses: load balancing on a hand-built assignment, z-loss, bias update", "[moe]") {
  // 4 tokens, 2 experts, top-1: 3 slots to expert 0, 1 to expert 1; mean probabilities (0.6, 0.4).
  const auto probs = torch::tensor({{0.9, 0.1}, {0.7, 0.3}, {0.5, 0.5}, {0.3, 0.7}}, torch::kDouble);
  const auto experts = torch::tensor({{0}, {0}, {0}, {1}}, torch::kLong);
  // E * sum f_e P_e = 2 * (0.75 * 0.6 + 0.25 * 0.4) = 1.1
  CHECK_THAT(loom::load_balancing_loss(probs, experts).item<double>(), loom::test::close_to(1.1, 1e-12));
  // Balanced: 1 whatever the probabilities' spread.
  const auto even = torch::tensor({{0}, {1}, {0}, {1}}, torch::kLong);
  CHECK_THAT(loom::load_balancing_loss(torch::full({4, 2}, 0.5, torch::kDouble), even).item<double>(),
             loom::test::close_to(1.0, 1e-12));
  const auto logits = torch::tensor({{0.0, 0.0}, {1.0, 2.0}}, torch::kDouble);
  const double z0 = std::log(2.0), z1 = std::log(std::exp(1.0) + std::exp(2.0));
  CHECK_THAT(loom::router_z_loss(logits).item<double>(), loom::test::close_to((z0 * z0 + z1 * z1) / 2, 1e-12));
  // Tokens split over two ranks (context parallelism): with the whole load and token count, each rank's part
  // from its own probabilities; the parts, and their gradients, sum to the whole's.
  {
    const auto whole = probs.clone().requires_grad_(true);
    loom::load_balancing_loss(whole, experts).backward();
    const auto load = loom::expert_load(experts, 2), tokens = torch::tensor(4.0, torch::kDouble);
    const auto part = probs.clone().requires_grad_(true);
    const auto a = loom::load_balancing_loss(part.narrow(0, 0, 1), load, tokens, 1);
    const auto b = loom::load_balancing_loss(part.narrow(0, 1, 3), load, tokens, 1);
    (a + b).backward();
    CHECK_THAT((a + b).item<double>(), loom::test::close_to(1.1, 1e-12));
    CHECK(torch::allclose(part.grad(), whole.grad(), 0, 1e-12));
    const auto za = loom::router_z_loss(logits.narrow(0, 0, 1), torch::tensor(2.0, torch::kDouble));
    const auto zb = loom::router_z_loss(logits.narrow(0, 1, 1), torch::tensor(2.0, torch::kDouble));
    CHECK_THAT((za + zb).item<double>(), loom::test::close_to((z0 * z0 + z1 * z1) / 2, 1e-12));
  }
  // Loads 6, 2, 4, 4 (mean 4): the overloaded expert goes down, the underloaded up, the average ones stay.
  const auto bias = torch::tensor({0.5f, 0.0f, -0.25f, 0.0f});
  const auto updated = loom::updated_expert_bias(bias, torch::tensor({6, 2, 4, 4}, torch::kLong), 0.01);
  CHECK_THAT(updated, loom::test::tensor_close_to(torch::tensor({0.49f, 0.01f, -0.25f, 0.0f}), 1e-6));
}

TEST_CASE("moe capacity: overflow slots dropped in token order and counted", "[moe]") {
  // 5 tokens, top-2 over 3 experts, capacity factor 0.6: ceil(0.6 * 10 / 3) = 2 slots per expert.
  CHECK(loom::expert_capacity(0.6, 5, 2, 3) == 2);
  CHECK(loom::expert_capacity(1.0, 4, 1, 2) == 2);
  const auto experts = torch::tensor({{0, 1}, {0, 2}, {0, 1}, {1, 2}, {2, 0}}, torch::kLong);
  const auto keep = loom::capacity_keep(experts, 3, 2);
  // expert 0: tokens 0, 1 kept, 2 and 4 dropped; expert 1: 0, 2 kept, 3 dropped; expert 2: 1, 3 kept, 4 dropped.
  const auto expected = torch::tensor({{true, true}, {true, true}, {false, true}, {false, true}, {false, false}});
  CHECK(torch::equal(keep, expected));
  CHECK(keep.numel() - keep.sum().item<int64_t>() == 4);
}

// Capacity under context parallelism ([mpi]: also under `mpirun -np 2` and `-np 4`, the world as the cp
// group): each rank holds its two chunks of 3 sequences (parallel/context_parallel_layout.h) and gets its part
// of the keep the whole sequences get in one process, which dropping only its own tokens in order would miss.
TEST_CASE("moe capacity under CP: each rank keeps what one process keeps of its tokens", "[moe][mpi]") {
  auto cp = loom::test::processes().world(/*timeout_s=*/60);
  const int64_t n = cp->size(), B = 3, T = 8 * n, k = 2, E = 4;
  const double factor = 0.8;  // ceil(0.8 * B T k / E) slots per expert: a skewed choice overflows
  torch::manual_seed(11);     // the same whole micro-batch on every rank
  const auto first = torch::multinomial(torch::tensor({0.55, 0.25, 0.1, 0.1}), B * T, /*replacement=*/true);
  const auto second = (first + torch::randint(1, E, {B * T}, torch::kLong)) % E;
  const auto whole = torch::stack({first, second}, 1).view({B, T, k});
  const auto whole_keep = loom::capacity_keep(whole.reshape({-1, k}), E, loom::expert_capacity(factor, B * T, k, E));
  REQUIRE(whole_keep.logical_not().sum().item<int64_t>() > 0);
  const auto mine = loom::cp_split(whole, 1, n, cp->rank()).reshape({-1, k});
  const auto expected = loom::cp_split(whole_keep.view({B, T, k}), 1, n, cp->rank()).reshape({-1, k});
  const auto keep = loom::capacity_keep_over_sequences(mine, B, E, factor, *cp);
  CHECK(torch::equal(keep, expected));
  // Against the shortcut: on a rank of several, its tokens alone at its share of the capacity keep other slots.
  if (n > 1 && cp->rank() == n - 1) {
    const auto alone = loom::capacity_keep(mine, E, loom::expert_capacity(factor, mine.size(0), k, E));
    CHECK_FALSE(torch::equal(alone, expected));
  }
}

TEST_CASE("moe experts: grouped == a per-expert masked loop, forward and gradients", "[moe]") {
  for (auto activation : {loom::Activation::kSwiglu, loom::Activation::kGelu}) {
    torch::manual_seed(3);
    const auto o = small_moe(activation);
    loom::MoeExperts experts(o.num_experts, o.d_model, o.d_ff, activation, 0.3, 0.3);
    const int64_t N = 13;
    const auto x = torch::randn({N, o.d_model});
    const auto r = loom::route(torch::randn({N, o.num_experts}), MoeRouter::kSoftmaxTopk, 2, false);
    for (bool capacity : {false, true}) {
      INFO("activation " << static_cast<int>(activation) << " capacity " << capacity);
      const auto keep = capacity ? loom::capacity_keep(r.experts, o.num_experts, 4) : torch::Tensor();
      const auto g = torch::randn({N, o.d_model});
      auto grads_of = [&](const std::function<torch::Tensor(const torch::Tensor&)>& f) {
        for (auto& p : experts->parameters()) p.mutable_grad() = torch::Tensor();
        const auto leaf = x.clone().requires_grad_();
        const auto y = f(leaf);
        y.backward(g);
        std::vector<torch::Tensor> out = {y.detach(), leaf.grad()};
        for (auto& p : experts->parameters()) out.push_back(p.grad().clone());
        return out;
      };
      const auto grouped = grads_of([&](const torch::Tensor& in) { return experts->forward(in, r.experts, r.weights, keep); });
      const auto loop = grads_of([&](const torch::Tensor& in) {
        auto y = torch::zeros_like(in);
        for (int64_t e = 0; e < o.num_experts; ++e) {
          auto mask = r.experts == e;
          if (keep.defined()) mask = mask & keep;
          const auto w = (r.weights * mask.to(r.weights.dtype())).sum(1, true);  // (N, 1)
          y = y + w * experts->expert(e, in);
        }
        return y;
      });
      REQUIRE(grouped.size() == loop.size());
      for (size_t i = 0; i < grouped.size(); ++i) CHECK_THAT(grouped[i], loom::test::tensor_close_to(loop[i], 1e-5, 1e-6));
    }
  }
}

TEST_CASE("moe layer: aux losses reach the router with the micro-batch's weight, output unchanged", "[moe]") {
  torch::manual_seed(4);
  auto o = small_moe();
  o.aux_loss_coef = 0.1;
  o.z_loss_coef = 0.01;
  o.shared_d_ff = 5;
  loom::Moe moe(o);
  auto plain_options = o;
  plain_options.aux_loss_coef = plain_options.z_loss_coef = 0;
  loom::Moe plain(plain_options);
  torch::NoGradGuard off;
  for (auto& p : plain->named_parameters()) p.value().copy_(moe->named_parameters()[p.key()]);
  torch::AutoGradMode on(true);
  const auto x = torch::randn({2, 5, o.d_model});
  const auto g = torch::randn({2, 5, o.d_model});
  moe->train();
  plain->train();
  moe->set_aux_loss_weight(3.0);
  const auto y = moe->forward(x);
  CHECK(torch::equal(y.detach(), plain->forward(x).detach()));
  (y * g).sum().backward();
  // The same gradient by hand: <plain output, g> + 3 (0.1 balance + 0.01 z) over the same routing.
  const auto yp = plain->forward(x);
  const auto flat = x.reshape({-1, o.d_model});
  const auto logits = torch::linear(flat, plain->named_parameters()["router.weight"]);
  const auto r = loom::route(logits, o.router, o.top_k, o.normalize);
  const auto total = (yp * g).sum() + 3.0 * (0.1 * loom::load_balancing_loss(r.probs, r.experts) + 0.01 * loom::router_z_loss(logits));
  total.backward();
  for (const auto& p : moe->named_parameters()) {
    INFO(p.key());
    CHECK_THAT(p.value().grad(), loom::test::tensor_close_to(plain->named_parameters()[p.key()].grad(), 1e-5, 1e-7));
  }
  // The step's statistics: one micro-batch, 10 tokens x top-2 slots.
  const auto stats = moe->take_stats();
  CHECK(stats.micro_batches == 1);
  CHECK(stats.load.sum().item<double>() == 20);
  CHECK(stats.aux_loss > 0);
  CHECK(moe->take_stats().micro_batches == 0);
}

TEST_CASE("moe config: nested keys, defaults, checks naming the key", "[moe][config]") {
  const std::string yaml = "model:\n  n_layers: 4\n  moe:\n    num_experts: 8\n    top_k: 2\n    every: 2\n    first_dense: 1\n";
  const auto c = loom::parse_config(yaml, "x.yaml");
  CHECK(c.model.moe.num_experts == 8);
  CHECK(!c.model.moe.layer_is_moe(0));
  CHECK(c.model.moe.layer_is_moe(1));
  CHECK(!c.model.moe.layer_is_moe(2));
  CHECK(c.model.moe.layer_is_moe(3));
  // The dumped config nests the same way and reads back.
  const auto again = loom::parse_config(loom::to_yaml(c), "dump.yaml");
  CHECK(again.model.moe.every == 2);
  CHECK(again.model.moe.first_dense == 1);
  CHECK_THAT(loom::test::config_error(yaml, {"model.moe.top_k=9"}), Catch::Contains("model.moe.top_k"));
  CHECK_THAT(loom::test::config_error("model:\n  moe:\n    experts: 4\n"), Catch::Contains("model.moe.experts: unknown key"));
  CHECK_THAT(loom::test::config_error(yaml, {"model.moe.normalize=true"}), Catch::Contains("model.moe.normalize"));
  CHECK_THAT(loom::test::config_error(yaml, {"model.moe.first_dense=4"}), Catch::Contains("model.moe.first_dense"));
  CHECK_THAT(loom::test::config_error(yaml, {"model.arch=bert"}), Catch::Contains("model.arch=gpt only"));
}

TEST_CASE("moe estimates: under sequence parallelism an MoE block keeps the sequence it gathers", "[moe][estimates]") {
  // GPT-2 small, fp32, no dropout, every block an MoE (top-2 of 4, its MLP half the larger), tp 2: a block's
  // norm inputs and outputs (2 x 8sbh) are kept for s/t positions under SP, and the MoE MLP keeps the gathered
  // sequence whole (4sbh): per block -8sbh + 4sbh. Taken per block (3 blocks less 2) so the head cancels.
  auto activations = [](int64_t layers, bool sp) {
    const auto config = loom::load_config(
        (loom::test::source_dir() / "configs" / "gpt2-124m.yaml").string(),
        {"precision.dtype=fp32", "model.dropout=0", "train.micro_batch_size=2", "train.batch_size=64",
         "model.moe.num_experts=4", "model.moe.top_k=2", "parallel.tp=2", "model.n_layers=" + std::to_string(layers),
         std::string("parallel.sequence_parallel=") + (sp ? "true" : "false")});
    return static_cast<double>(loom::estimate_memory(config).activations);
  };
  const double sbh = 1024.0 * 2 * 768;
  CHECK(activations(3, true) - activations(2, true) - (activations(3, false) - activations(2, false)) ==
        Approx(-8 * sbh + 4 * sbh).epsilon(1e-12));
}

TEST_CASE("moe estimates: the closed forms count the built model", "[moe][estimates]") {
  for (const auto& sets : std::vector<std::vector<std::string>>{
           {"model.moe.num_experts=4", "model.moe.top_k=2"},
           {"model.moe.num_experts=3", "model.moe.top_k=1", "model.moe.every=2", "model.moe.first_dense=1",
            "model.moe.d_ff=12", "model.moe.shared_experts=2", "model.activation=swiglu", "model.qk_norm=true",
            "model.head_dim=4", "model.moe.bias_update_rate=0.01"},
           {"model.moe.num_experts=2", "model.moe.top_k=2", "model.moe.shared_experts=1", "model.moe.shared_gate=false",
            "model.tie_embeddings=false"}}) {
    std::vector<std::string> all = {"model.vocab_size=40", "model.d_model=16", "model.n_layers=3", "model.n_heads=2",
                                    "model.d_ff=24", "model.max_seq_len=8", "data.seq_len=8"};
    all.insert(all.end(), sets.begin(), sets.end());
    const auto config = loom::parse_config("", "test", all);
    loom::Gpt model(config.model);
    INFO(sets.front() << " " << sets.size());
    CHECK(loom::count_parameters(config.model) == loom::test::numel_sum(*model));
    // One routed expert's weights skipped per token per MoE layer: (E - k) of them.
    const auto& m = config.model.moe;
    int64_t moe_layers = 0;
    for (int64_t i = 0; i < config.model.n_layers; ++i) moe_layers += m.layer_is_moe(i) ? 1 : 0;
    const int64_t expert = (config.model.gated_mlp() ? 3 : 2) * 16 * config.model.expert_dim();
    CHECK(loom::count_active_parameters(config.model) ==
          loom::count_parameters(config.model) - moe_layers * (m.num_experts - m.top_k) * expert);
    // For the pipeline: the stages' counts add up.
    auto staged = config;
    staged.parallel.pp = 3;
    int64_t sum = 0;
    for (int64_t s = 0; s < 3; ++s) sum += loom::count_stage_parameters(staged, s);
    CHECK(sum == loom::count_parameters(config.model) + (config.model.tie_embeddings ? 40 * 16 : 0));
  }
}

TEST_CASE("moe presets: Mixtral 8x7B and Qwen3-30B-A3B count as transformers does", "[moe][estimates]") {
  const auto source = loom::test::source_dir() / "configs";
  const auto mixtral = loom::load_config((source / "mixtral-8x7b.yaml").string());
  CHECK(loom::count_parameters(mixtral.model) == 46702792704);
  CHECK(loom::count_active_parameters(mixtral.model) == 12879925248);
  const auto qwen = loom::load_config((source / "qwen3-30b-a3b.yaml").string());
  CHECK(loom::count_parameters(qwen.model) == 30532122624);
  CHECK(loom::count_active_parameters(qwen.model) == 3353032704);
}

// Not part of the suite (hidden tag): `build/tests/loom_tests "[.moe-bench]"` times one MoE layer's experts,
// forward + backward, grouped (models/moe.h) against a per-expert masked loop (every expert over every token,
// masked by the routing: E / k times the FLOPs), on this CPU. docs/performance.md has the numbers.
TEST_CASE("moe bench: grouped experts against a per-expert masked loop", "[.moe-bench]") {
  torch::manual_seed(5);
  const int64_t N = 4096, C = 256, F = 512;
  for (const auto& [E, k] : std::vector<std::pair<int64_t, int64_t>>{{8, 2}, {32, 4}}) {
    loom::MoeExperts experts(E, C, F, loom::Activation::kSwiglu, 0.02, 0.02);
    const auto x = torch::randn({N, C});
    const auto r = loom::route(torch::randn({N, E}), MoeRouter::kTopkSoftmax, k, false);
    const auto g = torch::randn({N, C});
    auto grouped = [&](const torch::Tensor& in) { return experts->forward(in, r.experts, r.weights); };
    auto masked = [&](const torch::Tensor& in) {
      auto y = torch::zeros_like(in);
      for (int64_t e = 0; e < E; ++e) {
        const auto w = (r.weights * (r.experts == e).to(r.weights.dtype())).sum(1, true);
        y = y + w * experts->expert(e, in);
      }
      return y;
    };
    auto time = [&](const std::function<torch::Tensor(const torch::Tensor&)>& f) {
      double best = 1e30;
      for (int rep = 0; rep < 4; ++rep) {
        const auto leaf = x.clone().requires_grad_();
        const auto start = std::chrono::steady_clock::now();
        f(leaf).backward(g);
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      }
      return best;
    };
    const double a = time(grouped), b = time(masked);
    std::printf("E=%ld k=%ld, %ld tokens, C=%ld F=%ld: grouped %.1f ms (%.0f tokens/s), masked loop %.1f ms (%.0f tokens/s): %.2fx\n",
                static_cast<long>(E), static_cast<long>(k), static_cast<long>(N), static_cast<long>(C),
                static_cast<long>(F), a * 1e3, N / a, b * 1e3, N / b, b / a);
    CHECK(a > 0);
  }
}
