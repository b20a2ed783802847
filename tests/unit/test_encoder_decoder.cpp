// The encoder-decoder (model.arch: transformer): parameter counts against built models, logits against
// torch.nn.Transformer with the same weights and padding on both sides (tests/golden/transformer_forward.py),
// padding that changes nothing, incremental (cached) decoding against the full decoder, and the
// translation loss against per-pair losses.
#include <cmath>
#include <fstream>

#include "core/error.h"
#include "data/seq2seq_source.h"
#include "data/synthetic_pairs.h"
#include "models/encoder_decoder.h"
#include "models/estimates.h"
#include "test_util.h"
#include "train/translation_task.h"

using loom::test::max_abs_diff;
using torch::indexing::Slice;

namespace {

struct Variant {
  std::string name;
  std::vector<std::string> sets;
};

const std::vector<Variant>& variants() {
  static const std::vector<Variant> all = {
      {"paper-post-norm", {}},
      {"pre-norm-learned-gelu-untied",
       {"model.norm_position=pre", "model.position=learned", "model.activation=gelu", "model.tie_embeddings=false",
        "model.scale_embeddings=false"}},
      {"post-norm-no-bias-3-encoder-layers", {"model.bias=false", "model.n_encoder_layers=3"}},
  };
  return all;
}

// vocab 40, d_model 32, 2 + 2 layers, 4 heads, d_ff 48, context 16, no dropout; the paper's variant
// (post-norm, sinusoidal, ReLU, tied, scaled embeddings) unless the variant says otherwise.
loom::ModelConfig small(const Variant& variant) {
  std::vector<std::string> sets = {"model.arch=transformer", "model.vocab_size=40", "model.d_model=32",
                                   "model.n_layers=2",       "model.n_heads=4",     "model.d_ff=48",
                                   "model.max_seq_len=16",   "model.dropout=0",     "data.seq_len=16",
                                   "model.norm_position=post", "model.position=sinusoidal", "model.activation=relu",
                                   "model.scale_embeddings=true"};
  sets.insert(sets.end(), variant.sets.begin(), variant.sets.end());
  return loom::parse_config("", variant.name, sets).model;
}

int64_t numel_sum(torch::nn::Module& model) {
  int64_t n = 0;
  for (const auto& p : model.parameters()) n += p.numel();
  return n;
}

void perturb(torch::nn::Module& model) {
  torch::NoGradGuard no_grad;
  for (auto& p : model.parameters()) p.add_(torch::randn_like(p) * 0.2);
}

// A batch with padding on both sides: lengths (B), tokens in [3, 40) and 0 after each length.
torch::Tensor padded_tokens(const std::vector<int64_t>& lengths, int64_t width) {
  auto t = torch::randint(3, 40, {static_cast<int64_t>(lengths.size()), width}, torch::kLong);
  for (size_t b = 0; b < lengths.size(); ++b) t[static_cast<int64_t>(b)].narrow(0, lengths[b], width - lengths[b]).zero_();
  return t;
}

}  // namespace

TEST_CASE("encoder-decoder: count_parameters equals the built model's parameters", "[models][seq2seq]") {
  for (const auto& variant : variants()) {
    INFO(variant.name);
    const auto config = small(variant);
    loom::EncoderDecoder model(config);
    CHECK(loom::count_parameters(config) == numel_sum(*model));
    const auto named = model->named_parameters();
    CHECK(named.contains("lm_head.weight") == !config.tie_embeddings);
    CHECK(named.contains("encoder_norm.weight") == (config.norm_position == "pre"));
    CHECK(named.contains("decoder.1.cross_attention.qkv.weight"));
    CHECK(!named.contains("encoder.0.cross_attention.qkv.weight"));
  }
  // The paper's base model with its 37000-token joint vocabulary: 63.1M against the published 65M.
  auto base = loom::load_config((loom::test::source_dir() / "configs/transformer-base.yaml").string(),
                                {"model.vocab_size=37000"});
  CHECK(loom::count_parameters(base.model) == 63082496);
}

TEST_CASE("encoder-decoder: logits equal torch.nn.Transformer with padding on both sides", "[models][seq2seq][golden]") {
  nlohmann::json cases = nlohmann::json::array();
  std::vector<torch::Tensor> ours, target_lengths;
  torch::manual_seed(31);
  for (const auto& variant : variants()) {
    loom::EncoderDecoder model(small(variant));
    perturb(*model);
    model->eval();
    const std::vector<int64_t> src_len = {9, 4, 1}, tgt_len = {3, 7, 5};
    const auto source = padded_tokens(src_len, 9);
    const auto target = padded_tokens(tgt_len, 7);
    const auto source_lengths = torch::tensor(src_len, torch::kLong);
    nlohmann::json one;
    const auto& c = model->config();
    one["config"] = {{"d_model", c.d_model}, {"n_heads", c.n_heads}, {"n_layers", c.n_layers},
                     {"n_encoder_layers", c.n_encoder_layers}, {"d_ff", c.ffn_dim()}, {"norm_position", c.norm_position},
                     {"norm_eps", c.norm_eps}, {"activation", c.activation}, {"bias", c.bias},
                     {"position", c.position}, {"scale_embeddings", c.scale_embeddings},
                     {"tie_embeddings", c.tie_embeddings}};
    for (const auto& p : model->named_parameters()) one["params"][p.key()] = loom::test::tensor_json(p.value());
    one["source"] = loom::test::tensor_json(source);
    one["source_lengths"] = src_len;
    one["target"] = loom::test::tensor_json(target);
    one["target_lengths"] = tgt_len;
    cases.push_back(one);
    torch::NoGradGuard no_grad;
    ours.push_back(model->forward(source, source_lengths, target));
    target_lengths.push_back(torch::tensor(tgt_len, torch::kLong));
  }
  const auto path = loom::test::scratch_dir("seq2seq-golden") / "spec.json";
  std::ofstream(path) << nlohmann::json{{"cases", cases}}.dump();
  const auto golden = loom::test::python_golden("transformer_forward.py", path.string());
  REQUIRE(golden["logits"].size() == variants().size());
  for (size_t i = 0; i < variants().size(); ++i) {
    INFO(variants()[i].name);
    const auto expected = loom::test::json_tensor(golden["logits"][i], torch::kDouble);
    REQUIRE(ours[i].sizes() == expected.sizes());
    // Compare the real target positions (a padded position's output is never used).
    const auto real = ~loom::padding_mask(target_lengths[i], expected.size(1));  // (B, T)
    const auto a = ours[i].to(torch::kDouble).index({real}), b = expected.index({real});
    CHECK(a.size(0) == 3 + 7 + 5);
    CHECK(max_abs_diff(a, b) <= 1e-5 * std::max(1.0, b.abs().max().item<double>()));
  }
}

TEST_CASE("encoder-decoder: padding and what it holds do not change the logits", "[models][seq2seq]") {
  torch::manual_seed(32);
  loom::EncoderDecoder model(small(variants()[1]));
  perturb(*model);
  model->eval();
  torch::NoGradGuard no_grad;
  const auto source = torch::randint(3, 40, {1, 5}, torch::kLong);
  const auto target = torch::randint(3, 40, {1, 4}, torch::kLong);
  const auto alone = model->forward(source, torch::tensor({5}, torch::kLong), target);
  // The same pair padded to 8 source positions (holding arbitrary tokens) beside a longer pair.
  auto wide = torch::randint(3, 40, {2, 8}, torch::kLong);
  wide[0].narrow(0, 0, 5).copy_(source[0]);
  auto targets = torch::randint(3, 40, {2, 6}, torch::kLong);
  targets[0].narrow(0, 0, 4).copy_(target[0]);
  const auto batched = model->forward(wide, torch::tensor({5, 8}, torch::kLong), targets);
  CHECK(max_abs_diff(batched.index({Slice(0, 1), Slice(0, 4)}), alone) <= 1e-5);
  // The source's real tokens do matter.
  wide[0][2] = (wide[0][2].item<int64_t>() + 1 - 3) % 37 + 3;
  const auto changed = model->forward(wide, torch::tensor({5, 8}, torch::kLong), targets);
  CHECK(max_abs_diff(changed.index({Slice(0, 1), Slice(0, 4)}), alone) > 1e-4);
}

TEST_CASE("encoder-decoder: incremental decoding equals the full decoder", "[models][seq2seq][cache]") {
  torch::manual_seed(33);
  for (const auto& variant : variants()) {
    INFO(variant.name);
    loom::EncoderDecoder model(small(variant));
    perturb(*model);
    model->eval();
    torch::NoGradGuard no_grad;
    const auto source = padded_tokens({6, 3}, 6);
    const auto lengths = torch::tensor({6, 3}, torch::kLong);
    const auto target = torch::randint(3, 40, {2, 9}, torch::kLong);
    const auto full = model->forward(source, lengths, target);  // (2, 9, V)
    auto state = model->start_decoding(source, lengths);
    std::vector<torch::Tensor> steps;
    steps.push_back(model->decode_step(target.narrow(1, 0, 3), state));  // a prefix of 3, then one at a time
    for (int64_t t = 3; t < 9; ++t) steps.push_back(model->decode_step(target.narrow(1, t, 1), state));
    CHECK(state.seen() == 9);
    CHECK(state.cross[0].length() == 6);  // the encoder's keys, computed once
    CHECK(max_abs_diff(torch::cat(steps, 1), full) <= 1e-5);
    // Reordering the state reorders the rows it continues.
    state.select(torch::tensor({1, 1, 0}, torch::kLong));
    const auto next = torch::randint(3, 40, {3, 1}, torch::kLong);
    const auto continued = model->decode_step(next, state);
    const auto reference = model->forward(source.index_select(0, torch::tensor({1, 1, 0})),
                                          lengths.index_select(0, torch::tensor({1, 1, 0})),
                                          torch::cat({target.index_select(0, torch::tensor({1, 1, 0})), next}, 1));
    CHECK(max_abs_diff(continued, reference.narrow(1, 9, 1)) <= 1e-5);
  }
}

TEST_CASE("translation task: the loss is the token-weighted mean of per-pair losses, padding ignored",
          "[train][seq2seq]") {
  torch::manual_seed(34);
  auto config = loom::parse_config("", "test", {"model.arch=transformer", "model.d_model=32", "model.n_layers=2",
                                                 "model.n_heads=4", "model.max_seq_len=16", "data.seq_len=16",
                                                 "model.dropout=0", "data.synthetic=reverse", "data.synthetic_vocab=40",
                                                 "data.synthetic_max_len=10"});
  auto task = loom::make_translation_task(config, torch::kCPU, loom::TaskData::kTraining, loom::EncoderDecoder(nullptr));
  CHECK(config.model.vocab_size == 40);  // from the data
  task->model().eval();
  torch::NoGradGuard no_grad;
  const auto& data = dynamic_cast<const loom::SyntheticPairs&>(task->data());
  std::vector<loom::TokenPair> pairs = {data.pair(5, 0), data.pair(5, 1), data.pair(5, 2)};
  for (double smoothing : {0.0, 0.1}) {
    double weighted = 0;
    int64_t tokens = 0;
    for (const auto& pair : pairs) {
      const auto one = loom::collate_pairs({pair});
      weighted += task->loss(one, torch::kCPU, smoothing).item<double>() * static_cast<double>(one.target_tokens());
      tokens += one.target_tokens();
    }
    const auto batch = loom::collate_pairs(pairs);
    CHECK(batch.target_tokens() == tokens);
    CHECK(task->loss(batch, torch::kCPU, smoothing).item<double>() == Approx(weighted / tokens).epsilon(1e-5));
  }
}

TEST_CASE("pipeline stages: stage s > 0 draws its dropout from run.seed + 100 s, stage 0 as a run without stages",
          "[train][seq2seq][pipeline]") {
  auto draw_after_build = [](int64_t pp, int64_t stage) {
    auto config = loom::parse_config("", "test", {"model.arch=transformer", "model.d_model=16", "model.n_layers=2",
                                                   "model.n_encoder_layers=2", "model.n_heads=2", "model.max_seq_len=16",
                                                   "data.seq_len=16", "model.dropout=0.1", "data.synthetic=reverse",
                                                   "data.synthetic_vocab=40", "data.synthetic_max_len=10", "run.seed=5",
                                                   "parallel.pp=" + std::to_string(pp)});
    loom::make_translation_task(config, torch::kCPU, loom::TaskData::kTraining, loom::EncoderDecoder(nullptr), nullptr,
                                stage);
    return torch::rand({16});
  };
  const auto whole = draw_after_build(1, 0), stage0 = draw_after_build(2, 0), stage1 = draw_after_build(2, 1);
  torch::manual_seed(5 + 100);
  const auto seeded = torch::rand({16});
  CHECK(torch::equal(stage0, whole));
  CHECK(torch::equal(stage1, seeded));
  CHECK_FALSE(torch::equal(stage1, stage0));
}
