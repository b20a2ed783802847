// The encoder-decoder (model.arch: transformer): parameter counts against built models, logits against
// torch.nn.Transformer with the same weights and padding on both sides (tests/golden/transformer_forward.py;
// RoPE, ALiBi and a sliding window against its explicit float64 forward),
// padding that changes nothing, incremental (cached) decoding against the full decoder, the
// translation loss against per-pair losses, and batches padded to a multiple (data.pad_to_multiple,
// sequence parallelism) that score as the unpadded ones.
#include <cmath>
#include <fstream>
#include <map>

#include "core/error.h"
#include "data/pairs/seq2seq_source.h"
#include "data/pairs/synthetic_pairs.h"
#include "models/encoder_decoder.h"
#include "models/estimates.h"
#include "test_util.h"
#include "train/run_plan.h"
#include "train/translation_task.h"

using loom::test::max_abs_diff;
using torch::indexing::Slice;
using loom::test::numel_sum;
using loom::test::perturb;

namespace {

struct EncoderDecoderVariant {
  std::string name;
  std::vector<std::string> sets;
};

const std::vector<EncoderDecoderVariant>& encoder_decoder_variants() {
  static const std::vector<EncoderDecoderVariant> all = {
      {"paper-post-norm", {}},
      {"pre-norm-learned-gelu-untied",
       {"model.norm_position=pre", "model.position=learned", "model.activation=gelu", "model.tie_embeddings=false",
        "model.scale_embeddings=false"}},
      {"post-norm-no-bias-3-encoder-layers", {"model.bias=false", "model.n_encoder_layers=3"}},
      // Positions in the self-attention instead of the embeddings: RoPE with a sliding window of 4 (the
      // encoder's keeps |i - j| < 4), and ALiBi (the encoder's by |i - j|).
      {"pre-norm-rope-window-4", {"model.norm_position=pre", "model.position=rope", "model.attention_window=4"}},
      {"post-norm-alibi", {"model.position=alibi"}},
  };
  return all;
}

// vocab 40, d_model 32, 2 + 2 layers, 4 heads, d_ff 48, context 16, no dropout; the paper's variant
// (post-norm, sinusoidal, ReLU, tied, scaled embeddings) unless the variant says otherwise.
loom::ModelConfig small_encoder_decoder(const EncoderDecoderVariant& variant) {
  std::vector<std::string> sets = {"model.arch=transformer", "model.vocab_size=40", "model.d_model=32",
                                   "model.n_layers=2",       "model.n_heads=4",     "model.d_ff=48",
                                   "model.max_seq_len=16",   "model.dropout=0",     "data.seq_len=16",
                                   "model.norm_position=post", "model.position=sinusoidal", "model.activation=relu",
                                   "model.scale_embeddings=true"};
  sets.insert(sets.end(), variant.sets.begin(), variant.sets.end());
  return loom::parse_config("", variant.name, sets).model;
}

// A batch with padding on both sides: lengths (B), tokens in [3, 40) and 0 after each length.
torch::Tensor padded_tokens(const std::vector<int64_t>& lengths, int64_t width) {
  auto t = torch::randint(3, 40, {static_cast<int64_t>(lengths.size()), width}, torch::kLong);
  for (size_t b = 0; b < lengths.size(); ++b) t[static_cast<int64_t>(b)].narrow(0, lengths[b], width - lengths[b]).zero_();
  return t;
}

}  // namespace

TEST_CASE("encoder-decoder: count_parameters equals the built model's parameters", "[models][seq2seq]") {
  for (const auto& variant : encoder_decoder_variants()) {
    INFO(variant.name);
    const auto config = small_encoder_decoder(variant);
    loom::EncoderDecoder model(config);
    CHECK(loom::count_parameters(config) == numel_sum(*model));
    const auto named = model->named_parameters();
    CHECK(named.contains("lm_head.weight") == !config.tie_embeddings);
    CHECK(named.contains("encoder_norm.weight") == (config.norm_position == loom::NormPosition::kPre));
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
  for (const auto& variant : encoder_decoder_variants()) {
    loom::EncoderDecoder model(small_encoder_decoder(variant));
    perturb(*model);
    model->eval();
    const std::vector<int64_t> src_len = {9, 4, 1}, tgt_len = {3, 7, 5};
    const auto source = padded_tokens(src_len, 9);
    const auto target = padded_tokens(tgt_len, 7);
    const auto source_lengths = torch::tensor(src_len, torch::kLong);
    nlohmann::json one;
    const auto& c = model->config();
    one["config"] = {{"d_model", c.d_model}, {"n_heads", c.n_heads}, {"n_layers", c.n_layers},
                     {"n_encoder_layers", c.n_encoder_layers}, {"d_ff", c.ffn_dim()}, {"norm_position", loom::enum_name(c.norm_position)},
                     {"norm_eps", c.norm_eps}, {"activation", loom::enum_name(c.activation)}, {"bias", c.bias},
                     {"position", loom::enum_name(c.position)}, {"scale_embeddings", c.scale_embeddings},
                     {"tie_embeddings", c.tie_embeddings}, {"rope_theta", c.rope_theta},
                     {"attention_window", c.attention_window}};
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
  REQUIRE(golden["logits"].size() == encoder_decoder_variants().size());
  for (size_t i = 0; i < encoder_decoder_variants().size(); ++i) {
    INFO(encoder_decoder_variants()[i].name);
    const auto expected = loom::test::json_tensor(golden["logits"][i], torch::kDouble);
    REQUIRE(ours[i].sizes() == expected.sizes());
    // Compare the real target positions (a padded position's output is never used).
    const auto real = ~loom::padding_mask(target_lengths[i], expected.size(1));  // (B, T)
    const auto a = ours[i].to(torch::kDouble).index({real}), b = expected.index({real});
    CHECK(a.size(0) == 3 + 7 + 5);
    CHECK_THAT(a, loom::test::reference_logits(b));
  }
}

TEST_CASE("encoder-decoder: padding and what it holds do not change the logits", "[models][seq2seq]") {
  torch::manual_seed(32);
  loom::EncoderDecoder model(small_encoder_decoder(encoder_decoder_variants()[1]));
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
  CHECK_THAT(batched.index({Slice(0, 1), Slice(0, 4)}), loom::test::same_forward_as(alone));
  // The source's real tokens do matter.
  wide[0][2] = (wide[0][2].item<int64_t>() + 1 - 3) % 37 + 3;
  const auto changed = model->forward(wide, torch::tensor({5, 8}, torch::kLong), targets);
  CHECK(max_abs_diff(changed.index({Slice(0, 1), Slice(0, 4)}), alone) > 1e-4);
}

TEST_CASE("encoder-decoder: incremental decoding equals the full decoder", "[models][seq2seq][cache]") {
  torch::manual_seed(33);
  for (const auto& variant : encoder_decoder_variants()) {
    INFO(variant.name);
    loom::EncoderDecoder model(small_encoder_decoder(variant));
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
    CHECK(state.cross[0].k.size(2) == 6);  // the encoder's keys, computed once
    CHECK_THAT(torch::cat(steps, 1), loom::test::same_forward_as(full));
    // Reordering the state reorders the rows it continues.
    state.select(torch::tensor({1, 1, 0}, torch::kLong));
    const auto next = torch::randint(3, 40, {3, 1}, torch::kLong);
    const auto continued = model->decode_step(next, state);
    const auto reference = model->forward(source.index_select(0, torch::tensor({1, 1, 0})),
                                          lengths.index_select(0, torch::tensor({1, 1, 0})),
                                          torch::cat({target.index_select(0, torch::tensor({1, 1, 0})), next}, 1));
    CHECK_THAT(continued, loom::test::same_forward_as(reference.narrow(1, 9, 1)));
  }
}

TEST_CASE("translation task: the loss is the token-weighted mean of per-pair losses, padding ignored",
          "[train][seq2seq]") {
  torch::manual_seed(34);
  auto config = loom::parse_config("", "test", {"model.arch=transformer", "model.d_model=32", "model.n_layers=2",
                                                 "model.n_heads=4", "model.max_seq_len=16", "data.seq_len=16",
                                                 "model.dropout=0", "data.synthetic=reverse", "data.synthetic_vocab=40",
                                                 "data.synthetic_max_len=10"});
  const loom::RunPlan plan(config, 0);
  CHECK(plan.config().model.vocab_size == 40);  // from the data
  auto task = loom::make_task(plan.config(), torch::kCPU, loom::TaskData::kTraining);
  task->model().eval();
  torch::NoGradGuard no_grad;
  const auto& data = dynamic_cast<const loom::SyntheticPairs&>(dynamic_cast<loom::TranslationTask&>(*task).data());
  std::vector<loom::TokenPair> pairs = {data.pair(5, 0), data.pair(5, 1), data.pair(5, 2)};
  for (double smoothing : {0.0, 0.1}) {
    double weighted = 0;
    int64_t tokens = 0;
    for (const auto& pair : pairs) {
      const auto one = loom::collate_pairs({pair});
      weighted += task->loss(one, torch::kCPU, smoothing).item<double>() * static_cast<double>(one.loss_tokens());
      tokens += one.loss_tokens();
    }
    const auto batch = loom::collate_pairs(pairs);
    CHECK(batch.loss_tokens() == tokens);
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
    loom::make_task(loom::RunPlan(config, 0).config(), torch::kCPU, loom::TaskData::kTraining, nullptr, nullptr, stage);
    return torch::rand({16});
  };
  const auto whole = draw_after_build(1, 0), stage0 = draw_after_build(2, 0), stage1 = draw_after_build(2, 1);
  torch::manual_seed(5 + 100);
  const auto seeded = torch::rand({16});
  CHECK(torch::equal(stage0, whole));
  CHECK(torch::equal(stage1, seeded));
  CHECK_FALSE(torch::equal(stage1, stage0));
}

TEST_CASE("pair batches padded to a multiple: lengths rounded up, the loss unchanged", "[train][seq2seq]") {
  // pad_to_multiple itself: S 5 -> 8, T 4 -> 8 with token 0 and kIgnoreLabel; the lengths stay.
  const auto batch = loom::collate_pairs({{{5, 6, 7, 8, 9}, {3, 4, 5}}, {{7, 8}, {9}}});  // S 5, T 4
  const auto padded = loom::pad_to_multiple(batch, 8);
  CHECK(padded.source.sizes() == torch::IntArrayRef({2, 8}));
  CHECK(padded.target_inputs.sizes() == torch::IntArrayRef({2, 8}));
  CHECK(padded.target_labels.sizes() == torch::IntArrayRef({2, 8}));
  CHECK(torch::equal(padded.source.narrow(1, 0, 5), batch.source));
  CHECK(padded.source.narrow(1, 5, 3).eq(0).all().item<bool>());
  CHECK(padded.target_inputs.narrow(1, 4, 4).eq(0).all().item<bool>());
  CHECK(padded.target_labels.narrow(1, 4, 4).eq(loom::kIgnoreLabel).all().item<bool>());
  CHECK(torch::equal(padded.source_lengths, batch.source_lengths));
  CHECK(padded.loss_tokens() == batch.loss_tokens());
  CHECK(loom::pad_to_multiple(batch, 1).source.size(1) == 5);
  CHECK(loom::pad_to_multiple(padded, 4).source.size(1) == 8);  // already a multiple

  // The translation task pads every batch to data.pad_to_multiple; its loss is the unpadded batch's.
  torch::manual_seed(35);
  const std::vector<std::string> sets = {"model.arch=transformer", "model.d_model=32", "model.n_layers=2",
                                         "model.n_heads=4",        "model.max_seq_len=16", "data.seq_len=16",
                                         "model.dropout=0",        "data.synthetic=reverse", "data.synthetic_vocab=40",
                                         "data.synthetic_max_len=10"};
  auto config = loom::parse_config("", "test", sets);
  auto plain = loom::make_task(loom::RunPlan(config, 0).config(), torch::kCPU, loom::TaskData::kTraining);
  auto sets8 = sets;
  sets8.push_back("data.pad_to_multiple=8");
  auto config8 = loom::parse_config("", "test", sets8);
  auto task8 = loom::make_task(loom::RunPlan(config8, 0).config(), torch::kCPU, loom::TaskData::kTraining,
                               dynamic_cast<loom::TranslationTask&>(*plain).encoder_decoder().ptr());
  plain->model().eval();
  torch::NoGradGuard no_grad;
  for (int64_t step : {0, 3}) {
    const auto a = plain->train_batch(step, 0, 5).as<loom::Seq2SeqBatch>();
    const auto b = task8->train_batch(step, 0, 5).as<loom::Seq2SeqBatch>();
    CHECK(b.source.size(1) % 8 == 0);
    CHECK(b.target_inputs.size(1) % 8 == 0);
    CHECK(b.loss_tokens() == a.loss_tokens());
    const bool grew = b.source.size(1) > a.source.size(1) || b.target_inputs.size(1) > a.target_inputs.size(1);
    CHECK(grew);  // reversal: T = S + 1, so S and T are never both multiples of 8 already
    for (double smoothing : {0.0, 0.1})
      CHECK(plain->loss(b, torch::kCPU, smoothing).item<double>() ==
            Approx(plain->loss(a, torch::kCPU, smoothing).item<double>()).epsilon(1e-6));
  }
  const auto e = task8->eval_batch(0, 4).as<loom::Seq2SeqBatch>();
  CHECK(e.source.size(1) % 8 == 0);
  CHECK(e.target_inputs.size(1) % 8 == 0);
}

TEST_CASE("pair batch padding multiple: lcm with tp under sequence parallelism, a config error where it cannot fit",
          "[config][seq2seq]") {
  auto with = [](std::vector<std::string> extra) {
    std::vector<std::string> sets = {"model.arch=transformer", "model.n_heads=4", "model.max_seq_len=24",
                                     "data.seq_len=24"};
    sets.insert(sets.end(), extra.begin(), extra.end());
    return loom::parse_config("", "test", sets);
  };
  CHECK(with({}).sequence_pad_multiple() == 1);
  CHECK(with({"data.pad_to_multiple=4", "parallel.tp=2"}).sequence_pad_multiple() == 4);  // no SP: tp plays no part
  CHECK(with({"parallel.tp=2", "parallel.sequence_parallel=true"}).sequence_pad_multiple() == 2);
  CHECK(with({"data.pad_to_multiple=3", "parallel.tp=4", "parallel.sequence_parallel=true"}).sequence_pad_multiple() == 12);
  CHECK_THROWS_WITH(with({"data.pad_to_multiple=5"}), Catch::Matchers::Contains("model.max_seq_len") &&
                                                          Catch::Matchers::Contains("must be a multiple of 5"));
  CHECK_THROWS_WITH(with({"data.pad_to_multiple=0"}), Catch::Matchers::Contains("data.pad_to_multiple: 0 must be >= 1"));
  CHECK_THROWS_WITH(loom::parse_config("", "test", {"data.pad_to_multiple=2"}),
                    Catch::Matchers::Contains("data.pad_to_multiple: applies to model.arch=transformer only"));
}

TEST_CASE("encoder-decoder memory estimate: sequence parallelism keeps 1/tp of what TP keeps whole",
          "[models][seq2seq][estimates]") {
  // 6 + 6 pre-norm layers, fp32 with dropout, tp 4, micro-batch 8 of 128 positions (source and target
  // alike). Kept whole under TP, per block: the norm and projection inputs 16sbh and the residual dropout
  // masks 2sbh; a decoder block's cross-attention adds its norm's input and output 8sbh and a dropout mask
  // sbh; the head the final norm's input 4sbh, the encoder its final norm's input 4sbh. Sequence parallelism
  // keeps 1/4 of them: 3/4 of (12 * 18 + 6 * 9 + 4 + 4) sbh less; but then each cross-attention's k/v
  // projection takes a gathered copy of the memory (6 x 4sbh / 4) where TP alone reads the memory itself,
  // kept once (4sbh): 2sbh more.
  std::vector<std::string> sets = {"model.arch=transformer", "model.vocab_size=1000", "model.d_model=512",
                                   "model.n_layers=6",        "model.n_heads=8",        "model.max_seq_len=256",
                                   "data.seq_len=128",        "model.dropout=0.1",      "precision.dtype=fp32",
                                   "train.batch_size=8",      "parallel.tp=4",          "parallel.dp=1"};
  const auto tp_only = loom::estimate_memory(loom::parse_config("", "test", sets));
  sets.push_back("parallel.sequence_parallel=true");
  const auto with_sp = loom::estimate_memory(loom::parse_config("", "test", sets));
  const double sbh = 128.0 * 8 * 512;
  CHECK(static_cast<double>(tp_only.activations - with_sp.activations) == Approx((278 * 3 / 4.0 - 2) * sbh).margin(2));
  CHECK(with_sp.weights == tp_only.weights);
}

TEST_CASE("encoder-decoder memory estimate: activation checkpointing keeps each block's input, recomputes one sub-layer",
          "[models][seq2seq][estimates]") {
  // 6 + 6 pre-norm layers, fp32 without dropout (SDPA's flash kernel keeps each query's log-sum-exp, 4asb),
  // vocabulary 1000, micro-batch 8 of 128 positions (source and target alike). Per block: the attention half
  // keeps its norm's input and output 8sbh, q k v and the projection input 16sbh and 4asb; the MLP half
  // its norm's input and output 8sbh and ReLU's output 16sbh; a decoder block's cross-attention what an
  // attention half keeps (its k/v projection's input is the memory itself, kept once, 4sbh). Beside the
  // blocks: the encoder's final norm input 4sbh, the decoder's 4sbh, the head's input 4sbh, the loss's
  // log-probs 4sbV, and the loss backward's 8sbV more at the start of backward.
  const double s = 128, b = 8, h = 512, a = 8, V = 1000, L = 6;
  const double sbh = s * b * h, scores = 4 * a * s * b;
  const double attention = 24 * sbh + scores, mlp = 24 * sbh, cross = 24 * sbh + scores;
  const double beside = 4 * sbh /* memory */ + 4 * sbh + 4 * sbh + 4 * sbh + 4 * s * b * V;
  const double loss_backward = 8 * s * b * V;
  const std::map<std::string, double> expected{
      {"none", L * (attention + mlp) + L * (attention + mlp + cross) + beside + loss_backward},
      // each block's input; after the loss's backward, one sub-layer recomputed at a time (the largest:
      // the cross-attention, 24sbh + 4asb)
      {"full", 2 * L * 4 * sbh + beside + std::max(loss_backward, cross)},
      // the attention half (and cross-attention) and the MLP half's input kept; one MLP half (less that
      // input) recomputed
      {"selective", L * (attention + 4 * sbh) + L * (attention + 4 * sbh + cross) + beside +
                        std::max(loss_backward, mlp - 4 * sbh)},
  };
  for (const auto& [mode, bytes] : expected) {
    INFO("activation checkpointing " << mode);
    const auto config = loom::parse_config(
        "", "test",
        {"model.arch=transformer", "model.vocab_size=1000", "model.d_model=512", "model.n_layers=6",
         "model.n_heads=8", "model.d_ff=2048", "model.max_seq_len=256", "data.seq_len=128", "model.dropout=0",
         "model.norm_position=pre", "model.activation=relu", "precision.dtype=fp32", "train.batch_size=8",
         "train.activation_checkpointing=" + mode});
    CHECK(static_cast<double>(loom::estimate_memory(config).activations) == Approx(bytes).epsilon(1e-9));
  }
}
