// Activation checkpointing (train.activation_checkpointing): recomputing blocks in backward gives the
// same loss and the same gradients as keeping the activations, with dropout on (the RNG state is
// replayed) and under bf16 autocast, for the GPT's blocks and for the encoder-decoder's (pre- and
// post-norm, cross-attention, padded sources and targets); and it really keeps less (fewer bytes saved for
// backward, and a function recomputed in segments holds one segment's activations at a time in backward).
#include "core/cpu_allocator.h"
#include "models/encoder_decoder.h"
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
  precision.dtype = bf16 ? loom::Dtype::kBf16 : loom::Dtype::kFp32;
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

// The encoder-decoder on a batch padded on both sides: source lengths 9, 4, 1, target lengths 3, 7, 5.
Run seq2seq_loss_and_grads(loom::EncoderDecoder& model, uint64_t seed, bool bf16) {
  model->zero_grad();
  torch::manual_seed(5);
  auto source = torch::randint(3, 40, {3, 9}, torch::kLong), target = torch::randint(3, 40, {3, 8}, torch::kLong);
  const std::vector<int64_t> source_lengths = {9, 4, 1}, target_lengths = {3, 7, 5};
  for (int64_t b = 0; b < 3; ++b) {
    source[b].narrow(0, source_lengths[b], 9 - source_lengths[b]).zero_();
    target[b].narrow(0, target_lengths[b] + 1, 7 - target_lengths[b]).zero_();
  }
  auto labels = target.narrow(1, 1, 7).clone();
  labels.masked_fill_(labels == 0, loom::kIgnoreIndex);
  torch::manual_seed(seed);
  loom::PrecisionConfig precision;
  precision.dtype = bf16 ? loom::Dtype::kBf16 : loom::Dtype::kFp32;
  double loss_value = 0;
  {
    loom::AutocastGuard autocast(precision, torch::kCPU);
    const auto logits = model->forward(source, torch::tensor(source_lengths, torch::kLong), target.narrow(1, 0, 7));
    auto loss = loom::cross_entropy(logits.flatten(0, 1), labels.flatten(), 0.1);
    loss.backward();
    loss_value = loss.item<double>();
  }
  Run run{loss_value, {}};
  for (const auto& p : model->parameters()) run.grads.push_back(p.grad().clone());
  return run;
}

}  // namespace

TEST_CASE("recompute: the encoder-decoder's blocks, pre- and post-norm, give the plain gradients, dropout included",
          "[recompute][seq2seq]") {
  for (const std::string norm : {"post", "pre"}) {
    const auto config = loom::parse_config("", "test", {"model.arch=transformer", "model.vocab_size=40", "model.d_model=32",
                                                        "model.n_layers=2", "model.n_encoder_layers=2", "model.n_heads=4",
                                                        "model.d_ff=48", "model.max_seq_len=16", "data.seq_len=16",
                                                        "model.dropout=0.2", "model.norm_position=" + norm})
                            .model;
    torch::manual_seed(7);
    loom::EncoderDecoder model(config);
    model->train();
    for (const bool bf16 : {false, true}) {
      model->parallelize({loom::ActivationCheckpointing::kNone});
      const Run plain = seq2seq_loss_and_grads(model, 11, bf16);
      const Run other_seed = seq2seq_loss_and_grads(model, 12, bf16);
      CHECK(plain.loss != other_seed.loss);  // dropout is on: a replay with the wrong RNG state would show
      for (const auto mode : {loom::ActivationCheckpointing::kFull, loom::ActivationCheckpointing::kSelective}) {
        model->parallelize({mode});
        const Run recomputed = seq2seq_loss_and_grads(model, 11, bf16);
        INFO(norm << "-norm, bf16 " << bf16 << " mode " << loom::enum_name(mode));
        CHECK(recomputed.loss == plain.loss);
        REQUIRE(recomputed.grads.size() == plain.grads.size());
        for (size_t i = 0; i < plain.grads.size(); ++i) {
          INFO("parameter " << i);
          CHECK(torch::equal(recomputed.grads[i], plain.grads[i]));
        }
      }
    }
  }
}

TEST_CASE("recompute: a side tensor that needs gradient gets the sum of the segments' gradients", "[recompute]") {
  const auto x = torch::randn({8, 8}, torch::requires_grad());
  const auto memory = torch::randn({8, 8}, torch::requires_grad());
  const auto mask = torch::rand({8, 8}) > 0.5;  // read without gradient
  const loom::RecomputeSegments segments{
      [](const torch::Tensor& in, const loom::RecomputeSide& side) { return torch::tanh(in.mm(side[0])); },
      [](const torch::Tensor& in, const loom::RecomputeSide& side) {
        return torch::tanh(in + side[0]).masked_fill(side[1], 0.0);
      }};
  const loom::RecomputeSide side{memory, mask};
  auto plain = x;
  for (const auto& segment : segments) plain = segment(plain, side);
  torch::autograd::backward({plain.pow(2).sum()});
  const auto gx = x.grad().clone(), gm = memory.grad().clone();
  x.mutable_grad().zero_();
  memory.mutable_grad().zero_();
  const auto y = loom::recompute_in_backward(segments, x, nullptr, side);
  CHECK(torch::equal(y, plain));
  REQUIRE(y.grad_fn() != nullptr);
  CHECK(y.grad_fn()->next_edges().size() == 2);  // x and the memory; the mask is no input
  torch::autograd::backward({y.pow(2).sum()});
  CHECK(torch::allclose(x.grad(), gx, 1e-6, 1e-6));
  CHECK(torch::allclose(memory.grad(), gm, 1e-6, 1e-6));
  CHECK(memory.grad().abs().sum().item<double>() > 0);
}

TEST_CASE("recompute: full and selective checkpointing give the plain gradients, dropout included", "[recompute]") {
  torch::manual_seed(3);
  loom::Gpt model(dropout_config());
  model->train();
  const auto tokens = torch::randint(0, 61, {4, 16}, torch::kLong);
  for (const bool bf16 : {false, true}) {
    model->parallelize({loom::ActivationCheckpointing::kNone});
    const Run plain = loss_and_grads(model, tokens, 11, bf16);
    const Run other_seed = loss_and_grads(model, tokens, 12, bf16);
    CHECK(plain.loss != other_seed.loss);  // dropout is on: a replay with the wrong RNG state would show
    for (const auto mode : {loom::ActivationCheckpointing::kFull, loom::ActivationCheckpointing::kSelective}) {
      model->parallelize({mode});
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
  const loom::Recomputable fn = [&](const torch::Tensor& in, const loom::RecomputeSide&) {
    return torch::tanh(torch::tanh(in.mm(w)).mm(w));
  };
  const auto reference = fn(x, {});
  torch::autograd::backward({reference.sum()});
  const auto gx = x.grad().clone(), gw = w.grad().clone();
  x.mutable_grad().zero_();
  w.mutable_grad().zero_();
  const loom::RecomputeSegments segments{fn};
  const auto y = loom::recompute_in_backward(segments, x);
  CHECK(torch::equal(y, reference));
  // The graph of y holds one node (the recompute) whose only input is x: no intermediate of fn is alive.
  REQUIRE(y.grad_fn() != nullptr);
  CHECK(y.grad_fn()->next_edges().size() == 1);
  torch::autograd::backward({y.sum()});
  CHECK(torch::equal(x.grad(), gx));
  CHECK(torch::equal(w.grad(), gw));
}

TEST_CASE("recompute: segments give the same gradients and hold one segment's activations at a time",
          "[recompute]") {
  // Each segment keeps four (1024, 256) fp32 activations (1 MiB each) for its backward; its weight is 256 KiB.
  const std::vector<torch::Tensor> weights{torch::randn({256, 256}).div(16).requires_grad_(true),
                                           torch::randn({256, 256}).div(16).requires_grad_(true)};
  auto segment = [](const torch::Tensor& w) -> loom::Recomputable {
    return [w](const torch::Tensor& in, const loom::RecomputeSide&) {
      auto h = in;
      for (int i = 0; i < 4; ++i) h = torch::tanh(h.mm(w));
      return h;
    };
  };
  const loom::RecomputeSegments halves{segment(weights[0]), segment(weights[1])};
  const loom::RecomputeSegments whole{
      [&](const torch::Tensor& in, const loom::RecomputeSide& c) { return halves[1](halves[0](in, c), c); }};
  const auto x = torch::randn({1024, 256});
  loom::use_cpu_allocator(loom::CpuAllocatorKind::kCaching);
  auto backward_peak = [&](const loom::RecomputeSegments& segments) {
    auto* allocator = loom::caching_cpu_allocator();
    const auto input = x.clone().requires_grad_(true);
    for (const auto& w : weights) w.mutable_grad() = torch::Tensor();
    const auto y = loom::recompute_in_backward(segments, input);
    allocator->reset_peak();
    const auto before = allocator->stats().allocated;
    torch::autograd::backward({y.sum()});
    std::vector<torch::Tensor> grads{input.grad().clone()};
    for (const auto& w : weights) grads.push_back(w.grad().clone());
    return std::make_pair(allocator->stats().peak_allocated - before, grads);
  };
  const auto [whole_peak, whole_grads] = backward_peak(whole);
  const auto [halves_peak, halves_grads] = backward_peak(halves);
  loom::use_cpu_allocator(loom::CpuAllocatorKind::kSystem);
  for (size_t i = 0; i < whole_grads.size(); ++i) CHECK(torch::equal(halves_grads[i], whole_grads[i]));
  // The whole function holds both segments' 8 activations at the start of its backward, the halves 4 (and
  // the first half's output, recomputed without gradients).
  INFO("backward peak above the start: whole " << whole_peak << " B, halves " << halves_peak << " B");
  const int64_t activation = 1024 * 256 * 4;
  CHECK(whole_peak - halves_peak >= 2 * activation);
  CHECK(whole_peak - halves_peak <= 4 * activation);
}
