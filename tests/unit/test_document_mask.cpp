// Packed documents (data.document_mask, models/document_mask.h): a window holding several documents gives,
// for every document, the logits, the loss and the gradients of running that document alone, in fp32 within
// same_forward_as's bounds: for GPT-2 style (learned positions), LLaMA style (RoPE, GQA), ALiBi with a
// sliding window and sinusoidal positions; through SDPA and through the blocked CPU kernel; with activation
// checkpointing; in pipeline stages; and under TP and SP ([tp]: runs as a unit test and under mpirun).
#include "models/blocked_attention.h"
#include "models/document_mask.h"
#include "models/gpt.h"
#include "optim/cross_entropy.h"
#include "parallel/tensor_parallel.h"
#include "test_util.h"

namespace {

using torch::indexing::Slice;

// Rows of documents: lengths per row, each row summing to T.
using Layout = std::vector<std::vector<int64_t>>;
const Layout kLayout = {{6, 9, 1, 4}, {20}, {3, 17}};
constexpr int64_t kT = 20, kVocab = 64;

// (B, T) int64: each token's position in its document.
torch::Tensor positions_of(const Layout& layout) {
  std::vector<torch::Tensor> rows;
  for (const auto& lengths : layout) {
    std::vector<torch::Tensor> parts;
    for (int64_t n : lengths) parts.push_back(torch::arange(n, torch::kLong));
    rows.push_back(torch::cat(parts));
  }
  return torch::stack(rows);
}

struct PackedCase {
  torch::Tensor tokens, targets, positions;
};

PackedCase packed_case() {
  torch::manual_seed(5);
  PackedCase c;
  c.tokens = torch::randint(kVocab, {3, kT}, torch::kLong);
  c.targets = torch::randint(kVocab, {3, kT}, torch::kLong);  // any targets: the loss is per token
  c.positions = positions_of(kLayout);
  return c;
}

// The logits of every document run alone, at its place in the window: (B, T, V).
torch::Tensor documents_alone(loom::GptImpl& model, const torch::Tensor& tokens, const Layout& layout) {
  std::vector<torch::Tensor> rows;
  for (size_t b = 0; b < layout.size(); ++b) {
    std::vector<torch::Tensor> parts;
    int64_t start = 0;
    for (int64_t n : layout[b]) {
      parts.push_back(model.forward(tokens.index({Slice(b, b + 1), Slice(start, start + n)})).squeeze(0));
      start += n;
    }
    rows.push_back(torch::cat(parts));
  }
  return torch::stack(rows);
}

// The summed token losses, so that the packed window's and the documents' are the same sum.
torch::Tensor summed_loss(const torch::Tensor& logits, const torch::Tensor& targets) {
  return torch::nn::functional::cross_entropy(
      logits.reshape({-1, logits.size(-1)}), targets.reshape(-1),
      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
}

std::vector<torch::Tensor> gradients(loom::GptImpl& model) {
  std::vector<torch::Tensor> out;
  for (const auto& p : model.parameters()) out.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
  model.zero_grad();
  return out;
}

// A gradient sums the per-token terms of every token in another order (the window's rows against each
// document alone): a few ulps of the largest gradient element, as same_forward_as bounds the logits.
loom::test::TensorCloseTo same_gradient_as(const torch::Tensor& expected) {
  return loom::test::tensor_close_to(expected, 32 * loom::test::kFloatEps, 32 * loom::test::kFloatEps);
}

std::vector<std::string> variant_sets(const std::string& variant) {
  std::vector<std::string> sets = {"model.vocab_size=64", "model.d_model=32", "model.n_layers=2", "model.n_heads=4",
                                   "model.max_seq_len=32", "data.seq_len=20", "model.dropout=0"};
  if (variant == "llama")
    for (const char* s : {"model.norm=rmsnorm", "model.position=rope", "model.activation=swiglu", "model.bias=false",
                          "model.tie_embeddings=false", "model.n_kv_heads=2"})
      sets.push_back(s);
  if (variant == "alibi") sets.insert(sets.end(), {"model.position=alibi", "model.attention_window=5"});
  if (variant == "sinusoidal") sets.push_back("model.position=sinusoidal");
  return sets;
}

}  // namespace

TEST_CASE("document mask: the mask and the first keys follow from the positions", "[models][attention]") {
  const auto positions = positions_of({{2, 3}});  // 0 1 | 0 1 2
  const auto mask = loom::document_causal_mask(positions);
  const auto expected = torch::tensor({1, 0, 0, 0, 0,  //
                                       1, 1, 0, 0, 0,  //
                                       0, 0, 1, 0, 0,  //
                                       0, 0, 1, 1, 0,  //
                                       0, 0, 1, 1, 1}).to(torch::kBool).view({1, 1, 5, 5});
  CHECK(mask.equal(expected));
  CHECK(loom::document_starts(positions).equal(torch::tensor({{0, 0, 2, 2, 2}}, torch::kLong)));
}

TEST_CASE("document mask: a packed window's logits, loss and gradients are each document's alone",
          "[models][attention]") {
  const auto variant = GENERATE(as<std::string>{}, "gpt2", "llama", "alibi", "sinusoidal");
  const auto attention = GENERATE(loom::BlockedAttentionMode::kOff, loom::BlockedAttentionMode::kAlways);
  CAPTURE(variant, int(attention));
  loom::set_blocked_attention_mode(attention);
  const auto config = loom::parse_config("", "x.yaml", variant_sets(variant));
  torch::manual_seed(3);
  loom::Gpt model(config.model);
  const auto c = packed_case();

  const auto packed = model->forward(c.tokens, nullptr, c.positions);
  const auto alone = documents_alone(*model, c.tokens, kLayout);
  CHECK_THAT(packed, loom::test::same_forward_as(alone));
  // Without the mask the window is one sequence: the test would see the difference.
  CHECK(loom::test::max_abs_diff(model->forward(c.tokens), alone) > 1e-3);

  model->zero_grad();
  const auto packed_loss = summed_loss(model->forward(c.tokens, nullptr, c.positions), c.targets);
  packed_loss.backward();
  const auto packed_grads = gradients(*model);
  const auto alone_loss = summed_loss(documents_alone(*model, c.tokens, kLayout), c.targets);
  alone_loss.backward();
  const auto alone_grads = gradients(*model);
  // Each token's loss within same_forward_as's bound of its logits, summed over the window's tokens.
  const double logit_scale = alone.abs().max().item<double>() + 1;
  CHECK_THAT(packed_loss.item<double>(),
             loom::test::close_to(alone_loss.item<double>(), 0.0,
                                  16 * loom::test::kFloatEps * logit_scale * static_cast<double>(c.tokens.numel())));
  for (size_t i = 0; i < packed_grads.size(); ++i) {
    CAPTURE(i);
    CHECK_THAT(packed_grads[i], same_gradient_as(alone_grads[i]));
  }

  // The fused head + loss path (train.loss_chunk_tokens) takes the positions too.
  const auto hidden = model->final_hidden(c.tokens, c.positions);
  CHECK_THAT(torch::matmul(hidden, model->head_weight().t()), loom::test::same_forward_as(alone));
  loom::set_blocked_attention_mode(loom::BlockedAttentionMode::kAuto);
}

TEST_CASE("document mask: activation checkpointing recomputes with the same documents", "[models][attention]") {
  const auto config = loom::parse_config("", "x.yaml", variant_sets("llama"));
  torch::manual_seed(3);
  loom::Gpt model(config.model);
  const auto c = packed_case();
  summed_loss(model->forward(c.tokens, nullptr, c.positions), c.targets).backward();
  const auto plain = gradients(*model);
  for (const auto mode : {loom::ActivationCheckpointing::kFull, loom::ActivationCheckpointing::kSelective}) {
    CAPTURE(int(mode));
    model->parallelize({mode});
    summed_loss(model->forward(c.tokens, nullptr, c.positions), c.targets).backward();
    const auto recomputed = gradients(*model);
    for (size_t i = 0; i < plain.size(); ++i) CHECK_THAT(recomputed[i], same_gradient_as(plain[i]));
  }
}

TEST_CASE("document mask: pipeline stages carry the positions", "[models][attention]") {
  for (const auto& variant : {"gpt2", "llama"}) {
    CAPTURE(variant);
    auto sets = variant_sets(variant);
    sets.insert(sets.end(), {"model.n_layers=3", "parallel.pp=3"});
    const auto config = loom::parse_config("", "x.yaml", sets);
    torch::manual_seed(3);
    loom::Gpt whole(config.model);
    std::vector<loom::Gpt> stages;
    for (int64_t s = 0; s < 3; ++s) {
      torch::manual_seed(3);
      stages.emplace_back(config.model, loom::TensorParallelism{}, loom::model_stage(config.model, config.parallel, s));
    }
    const auto c = packed_case();
    auto x = stages[0]->forward_stage(c.tokens, {}, c.positions);
    x = stages[1]->forward_stage({}, x, c.positions);
    x = stages[2]->forward_stage({}, x, c.positions);
    CHECK_THAT(x, loom::test::same_forward_as(documents_alone(*whole, c.tokens, kLayout)));
  }
}

TEST_CASE("document mask: the blocked kernel's documents equal SDPA's mask, fp32 and bf16", "[models][attention]") {
  torch::manual_seed(4);
  const int64_t B = 2, H = 3, T = 100, D = 16;  // T past one 64-query block
  const auto positions = positions_of({{30, 50, 20}, {1, 70, 29}});
  const auto mask = loom::document_causal_mask(positions);
  const auto starts = loom::document_starts(positions);
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    std::vector<torch::Tensor> in;
    for (int i = 0; i < 4; ++i) in.push_back(torch::randn({B, T, H, D}).to(dtype).transpose(1, 2));
    // The reference in double, from the same (rounded) inputs.
    const auto reference = loom::test::output_and_gradients(
        [&](const auto& x) { return at::scaled_dot_product_attention(x[0], x[1], x[2], mask); },
        {in[0].to(torch::kDouble), in[1].to(torch::kDouble), in[2].to(torch::kDouble)}, in[3].to(torch::kDouble));
    for (const bool portable : {false, true}) {
      CAPTURE(dtype, portable);
      const auto got = loom::test::output_and_gradients(
          [&](const auto& x) { return loom::blocked_causal_attention(x[0], x[1], x[2], 64, portable, starts); },
          {in[0], in[1], in[2]}, in[3]);
      // fp32: a few ulps of the values summed; bf16: the products and stored probabilities round to 8 bits.
      const double tolerance = dtype == torch::kFloat ? 64 * loom::test::kFloatEps : 4 * loom::test::kBf16Eps;
      for (size_t i = 0; i < got.size(); ++i) {
        CAPTURE(i);
        CHECK_THAT(got[i], loom::test::tensor_close_to(reference[i], tolerance, tolerance));
      }
    }
  }
  CHECK_THAT(loom::test::message_of([&] {
               loom::blocked_causal_attention(torch::zeros({1, 1, 4, 8}), torch::zeros({1, 1, 4, 8}),
                                              torch::zeros({1, 1, 4, 8}), 64, false,
                                              torch::tensor({{0, 2, 0, 0}}, torch::kLong));
             }),
             Catch::Contains("key_starts[b, t] must lie in [0, t]"));
}

TEST_CASE("document mask: under TP and SP a packed window's logits and loss are each document's alone", "[tp]") {
  auto group = loom::test::processes().world(/*timeout_s=*/60);
  auto& g = *group;
  for (const auto& variant : {"gpt2", "llama"}) {
    for (const bool sequence_parallel : {false, true}) {
      CAPTURE(variant, sequence_parallel);
      auto sets = variant_sets(variant);
      sets.push_back("model.n_kv_heads=4");  // every head count divides 4 ranks
      const auto config = loom::parse_config("", "x.yaml", sets);
      torch::manual_seed(3);
      loom::Gpt whole(config.model);
      torch::manual_seed(3);
      loom::Gpt split(config.model, loom::TensorParallelism(&g, nullptr, sequence_parallel));
      auto c = packed_case();
      c.tokens = c.tokens.narrow(1, 0, 16);  // 16 positions: a multiple of every TP size tested
      c.targets = c.targets.narrow(1, 0, 16);
      const Layout layout = {{6, 9, 1}, {16}, {3, 13}};
      c.positions = positions_of(layout);

      const auto alone = documents_alone(*whole, c.tokens, layout);
      const auto expected_loss = summed_loss(alone, c.targets) / static_cast<double>(c.targets.numel());
      expected_loss.backward();
      const auto logits = split->forward(c.tokens, nullptr, c.positions);  // this rank's vocabulary columns
      CHECK_THAT(loom::gather_from_tp_region(logits, g, kVocab), loom::test::same_forward_as(alone));
      const auto loss = loom::cross_entropy(logits.flatten(0, 1), c.targets.flatten(), 0.0, loom::kIgnoreIndex, &g);
      // A mean of token losses, each within same_forward_as's bound of its logits.
      CHECK_THAT(loss.item<double>(), loom::test::close_to(expected_loss.item<double>(), 0.0,
                                                           16 * loom::test::kFloatEps * (alone.abs().max().item<double>() + 1)));
      loss.backward();
      // A parameter every rank holds whole before the sequence is split: its gradient is the whole model's.
      const std::string name = std::string(variant) == "gpt2" ? "position_embedding.weight" : "final_norm.weight";
      if (!sequence_parallel || name == "position_embedding.weight")
        CHECK_THAT(split->named_parameters()[name].grad(), same_gradient_as(whole->named_parameters()[name].grad()));
    }
  }
}
