// T5 (the encoder-decoder with T5's options, models/encoder_decoder.h): the presets' closed-form parameter
// counts against transformers' T5ForConditionalGeneration and built models against the closed form, its
// Hugging Face weights both ways against transformers (tests/golden/hf_t5.py: the relative bias buckets,
// unscaled attention, RMSNorm, ReLU and gated-GELU MLPs, head_dim != d_model / n_heads, the scaled tied head),
// a bucket count the file disagrees with refused naming both, and cached decoding against the full decoder.
#include <fstream>

#include "core/config.h"
#include "core/error.h"
#include "models/encoder_decoder.h"
#include "models/estimates.h"
#include "models/relative_position_bias.h"
#include "models/safetensors.h"
#include "models/t5_weights.h"
#include "test_util.h"

namespace {

// vocab 40, d_model 32, 2 + 2 layers (3 encoder layers with "model.n_encoder_layers=3"), 4 heads, d_ff 48,
// 8 relative buckets up to distance 6 (so that sequences of 12 reach the logarithmic and the last buckets).
loom::ModelConfig t5_config(const std::vector<std::string>& sets = {}) {
  std::vector<std::string> all = {
      "model.arch=transformer", "model.vocab_size=40",        "model.d_model=32",          "model.n_layers=2",
      "model.n_heads=4",        "model.d_ff=48",              "model.max_seq_len=16",      "model.dropout=0",
      "model.norm=rmsnorm",     "model.norm_position=pre",    "model.norm_eps=1e-6",       "model.position=relative",
      "model.relative_buckets=8", "model.relative_max_distance=6", "model.bias=false",   "model.scale_attention=false",
      "model.activation=relu",  "model.tie_embeddings=true",  "model.scale_head=true",     "data.seq_len=16"};
  all.insert(all.end(), sets.begin(), sets.end());
  return loom::parse_config("", "t5-test", all).model;
}

// The v1.1 shape: gated GELU, 3 heads of 8 (an inner size of 24 in a 32-wide model), no head scale.
const std::vector<std::string> kV11 = {"model.activation=geglu", "model.n_heads=3", "model.head_dim=8",
                                       "model.scale_head=false"};

struct T5Inputs {
  torch::Tensor source, source_padding, target;
};
// source (2, 12), the second row's last 5 positions padded; target (2, 10).
T5Inputs t5_inputs(int64_t vocab) {
  T5Inputs in;
  in.source = torch::randint(2, vocab, {2, 12}, torch::kLong);
  in.source_padding = torch::zeros({2, 12}, torch::kBool);
  in.source_padding.index_put_({1, torch::indexing::Slice(7, 12)}, true);
  in.source.masked_fill_(in.source_padding, 0);
  in.target = torch::randint(2, vocab, {2, 10}, torch::kLong);
  return in;
}

nlohmann::json hf_t5_config(const loom::ModelConfig& c) {
  return {{"vocab_size", c.vocab_size}, {"d_model", c.d_model}, {"d_kv", c.head_dim()}, {"d_ff", c.ffn_dim()},
          {"num_layers", c.encoder_layers()}, {"num_decoder_layers", c.n_layers}, {"num_heads", c.n_heads},
          {"relative_attention_num_buckets", c.relative_buckets},
          {"relative_attention_max_distance", c.relative_max_distance},
          {"feed_forward_proj", c.activation == loom::Activation::kGeglu ? "gated-gelu" : "relu"},
          {"scale", c.scale_head}};
}

torch::Tensor hf_t5(const std::string& mode, const loom::ModelConfig& c, const T5Inputs& in,
                    const std::filesystem::path& dir) {
  const nlohmann::json input = {{"config", hf_t5_config(c)}, {"source", loom::test::tensor_json(in.source)},
                                {"source_padding", loom::test::tensor_json(in.source_padding.to(torch::kLong))},
                                {"target", loom::test::tensor_json(in.target)}, {"seed", 7}};
  const auto path = dir.string() + ".json";
  std::ofstream(path) << input.dump();
  const auto out = loom::test::python_golden("hf_t5.py", mode + " " + path + " " + dir.string() + " 2>/dev/null");
  return loom::test::json_tensor(out["logits"], torch::kFloat);
}

torch::Tensor lengths_of(const torch::Tensor& padding) { return (~padding).sum(1); }

}  // namespace

TEST_CASE("t5: parameter counts equal transformers' and the built model's", "[t5][seq2seq]") {
  // transformers' T5ForConditionalGeneration for the same config: tests/golden/hf_t5.py count (meta device).
  const auto preset = [](const char* name) {
    return loom::load_config((loom::test::source_dir() / "configs" / name).string()).model;
  };
  CHECK(loom::count_parameters(preset("t5-small.yaml")) == 60506624);
  CHECK(loom::count_parameters(preset("t5-base.yaml")) == 222903552);
  CHECK(loom::count_parameters(preset("t5-v1_1-small.yaml")) == 76961152);  // transformers 4's untied head
  std::vector<std::string> untied = kV11;
  untied.push_back("model.tie_embeddings=false");
  for (const auto& sets : std::vector<std::vector<std::string>>{{}, kV11, untied, {"model.n_encoder_layers=3"}}) {
    const auto config = t5_config(sets);
    loom::EncoderDecoder model(config);
    CHECK(loom::test::numel_sum(*model) == loom::count_parameters(config));
  }
}

TEST_CASE("t5: relative position buckets are T5's", "[t5][seq2seq]") {
  // Hugging Face's T5Attention._relative_position_bucket(key - query) for num_buckets 32, max_distance 128.
  const auto relative = torch::tensor({-200, -128, -100, -20, -8, -7, -1, 0, 1, 7, 8, 20, 100, 128, 200}, torch::kLong);
  const auto both = loom::relative_position_buckets(relative, true, 32, 128);
  const auto causal = loom::relative_position_buckets(relative, false, 32, 128);
  CHECK(both.equal(torch::tensor({15, 15, 15, 10, 8, 7, 1, 0, 17, 23, 24, 26, 31, 31, 31}, torch::kLong)));
  CHECK(causal.equal(torch::tensor({31, 31, 30, 17, 8, 7, 1, 0, 0, 0, 0, 0, 0, 0, 0}, torch::kLong)));
}

TEST_CASE("t5: transformers' random T5ForConditionalGeneration loads with equal logits, and loom's export loads back",
          "[t5][hf][golden]") {
  torch::manual_seed(12);
  struct Variant {
    std::string name;
    std::vector<std::string> sets;
  };
  for (const auto& variant : std::vector<Variant>{{"t5", {}}, {"v1.1", kV11}, {"3-encoder-layers", {"model.n_encoder_layers=3"}}}) {
    INFO(variant.name);
    const auto config = t5_config(variant.sets);
    const auto in = t5_inputs(config.vocab_size);
    const auto dir = loom::test::scratch_dir("hf-t5-" + variant.name);
    const auto expected = hf_t5("write", config, in, dir / "hf");
    loom::EncoderDecoder model(config);
    loom::load_t5_weights(*model, dir / "hf");
    model->eval();
    torch::NoGradGuard no_grad;
    const auto logits = model->forward(in.source, lengths_of(in.source_padding), in.target);
    CHECK_THAT(logits, loom::test::reference_logits(expected));
    const double relative = ((logits - expected).abs().max() / expected.abs().max()).item<double>();
    CHECK(relative < 1e-5);
    WARN("import: max |loom - transformers| / max |transformers| = " << relative);

    if (variant.name == "v1.1") {  // an untied head reads transformers 5's file (its head is `shared`)
      auto untied_config = config;
      untied_config.tie_embeddings = false;
      loom::EncoderDecoder untied(untied_config);
      loom::load_t5_weights(*untied, dir / "hf");
      untied->eval();
      CHECK_THAT(untied->forward(in.source, lengths_of(in.source_padding), in.target),
                 loom::test::reference_logits(expected));
    }

    // Export: changed weights, written as `loom export` does, read by from_pretrained.
    loom::test::perturb(*model);
    const auto exported = dir / "export";
    std::filesystem::create_directories(exported);
    loom::write_safetensors(exported / "model.safetensors", loom::export_t5_weights(*model), {{"format", "pt"}});
    std::ofstream(exported / "config.json") << loom::t5_config_json(config, {}).dump(2);
    CHECK_THAT(model->forward(in.source, lengths_of(in.source_padding), in.target),
               loom::test::reference_logits(hf_t5("read", config, in, exported)));
  }
}

TEST_CASE("t5: a file whose bucket count differs from model.relative_buckets is refused naming both", "[t5][hf][golden]") {
  torch::manual_seed(13);
  const auto config = t5_config();
  const auto dir = loom::test::scratch_dir("hf-t5-buckets");
  hf_t5("write", config, t5_inputs(config.vocab_size), dir / "hf");
  auto other = config;
  other.relative_buckets = 16;
  loom::EncoderDecoder model(other);
  // The directory's config.json, then (the file alone) the table's rows.
  const auto from_directory = loom::test::message_of([&] { loom::load_t5_weights(*model, dir / "hf"); });
  CHECK_THAT(from_directory, Catch::Contains("relative_attention_num_buckets=8") &&
                                 Catch::Contains("model.relative_buckets=16"));
  const auto alone = dir / "alone.safetensors";
  std::filesystem::copy_file(dir / "hf" / "model.safetensors", alone, std::filesystem::copy_options::overwrite_existing);
  const auto from_file = loom::test::message_of([&] { loom::load_t5_weights(*model, alone); });
  CHECK_THAT(from_file, Catch::Contains("has 8 buckets") && Catch::Contains("model.relative_buckets=16"));
  // A model that is not T5-shaped has no T5 names.
  loom::EncoderDecoder biased(t5_config({"model.bias=true"}));
  CHECK_THAT(loom::test::message_of([&] { loom::export_t5_weights(*biased); }), Catch::Contains("model.bias"));
}

TEST_CASE("t5: incremental decoding adds the cached positions' relative bias", "[t5][seq2seq][cache]") {
  torch::manual_seed(14);
  for (const auto& sets : std::vector<std::vector<std::string>>{{}, kV11}) {
    loom::EncoderDecoder model(t5_config(sets));
    loom::test::perturb(*model);
    model->eval();
    torch::NoGradGuard no_grad;
    const auto in = t5_inputs(40);
    const auto lengths = lengths_of(in.source_padding);
    const auto full = model->forward(in.source, lengths, in.target);  // (2, 10, V)
    auto state = model->start_decoding(in.source, lengths);
    std::vector<torch::Tensor> steps;
    steps.push_back(model->decode_step(in.target.narrow(1, 0, 3), state));  // a prefix of 3, then one at a time
    for (int64_t t = 3; t < 10; ++t) steps.push_back(model->decode_step(in.target.narrow(1, t, 1), state));
    CHECK(state.seen() == 10);
    CHECK_THAT(torch::cat(steps, 1), loom::test::same_forward_as(full));
  }
}
