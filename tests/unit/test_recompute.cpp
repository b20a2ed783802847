// Activation checkpointing (train.activation_checkpointing): recomputing blocks in backward gives the
// same loss and the same gradients as keeping the activations, with dropout on (the RNG state is
// replayed) and under bf16 autocast; and it really keeps less (fewer bytes saved for backward).
#include "models/gpt.h"
#include "models/recompute.h"
#include "optim/cross_entropy.h"
#include "train/runtime.h"
#include "test_util.h"

namespace {

loom::ModelConfig dropout_config() {
  auto c = loom::test::small_gpt_config(/*vocab_size=*/61, /*d_model=*/32, /*n_layers=*/3, /*n_heads=*/4,
                                        /*max_seq_len=*/16);
  c.dropout = 0.2;
  return c;
}

struct Run {
  double loss = 0;
  std::vector<torch::Tensor> grads;
};

Run loss_and_grads(loom::Gpt& model, const torch::Tensor& tokens, uint64_t seed, bool bf16) {
  model->zero_grad();
  torch::manual_seed(seed);
  loom::PrecisionConfig precision;
  precision.dtype = bf16 ? "bf16" : "fp32";
  double loss_value = 0;
  {
    loom::AutocastGuard autocast(precision, torch::kCPU);
    auto logits = model->forward(tokens.narrow(1, 0, 15));
    auto loss = loom::cross_entropy(logits.flatten(0, 1), tokens.narrow(1, 1, 15).flatten());
    loss.backward();
    loss_value = loss.item<double>();
  }
  Run run{loss_value, {}};
  for (const auto& p : model->parameters()) run.grads.push_back(p.grad().clone());
  return run;
}

}  // namespace

TEST_CASE("recompute: full and selective checkpointing give the plain gradients, dropout included", "[recompute]") {
  torch::manual_seed(3);
  loom::Gpt model(dropout_config());
  model->train();
  const auto tokens = torch::randint(0, 61, {4, 16}, torch::kLong);
  for (const bool bf16 : {false, true}) {
    model->set_activation_checkpointing(loom::ActivationCheckpointing::kNone);
    const Run plain = loss_and_grads(model, tokens, 11, bf16);
    const Run other_seed = loss_and_grads(model, tokens, 12, bf16);
    CHECK(plain.loss != other_seed.loss);  // dropout is on: a replay with the wrong RNG state would show
    for (const auto mode : {loom::ActivationCheckpointing::kFull, loom::ActivationCheckpointing::kSelective}) {
      model->set_activation_checkpointing(mode);
      const Run recomputed = loss_and_grads(model, tokens, 11, bf16);
      INFO("bf16 " << bf16 << " mode " << static_cast<int>(mode));
      CHECK(recomputed.loss == plain.loss);
      REQUIRE(recomputed.grads.size() == plain.grads.size());
      for (size_t i = 0; i < plain.grads.size(); ++i) {
        INFO("parameter " << i);
        CHECK(torch::equal(recomputed.grads[i], plain.grads[i]));
      }
    }
  }
}

TEST_CASE("recompute: a checkpointed function keeps only its input for backward", "[recompute]") {
  const auto x = torch::randn({64, 64}, torch::requires_grad());
  const auto w = torch::randn({64, 64}, torch::requires_grad());
  const loom::Recomputable fn = [&](const torch::Tensor& in) { return torch::tanh(torch::tanh(in.mm(w)).mm(w)); };
  const auto reference = fn(x);
  torch::autograd::backward({reference.sum()});
  const auto gx = x.grad().clone(), gw = w.grad().clone();
  x.mutable_grad().zero_();
  w.mutable_grad().zero_();
  const auto y = loom::recompute_in_backward(fn, x);
  CHECK(torch::equal(y, reference));
  // The graph of y holds one node (the recompute) whose only input is x: no intermediate of fn is alive.
  REQUIRE(y.grad_fn() != nullptr);
  CHECK(y.grad_fn()->next_edges().size() == 1);
  torch::autograd::backward({y.sum()});
  CHECK(torch::equal(x.grad(), gx));
  CHECK(torch::equal(w.grad(), gw));
}
