// safetensors reading and writing, and weights under Hugging Face's names: loom -> file -> loom is bitwise,
// corrupt files are errors naming the file, and transformers' GPT2LMHeadModel and LlamaForCausalLM (GQA)
// agree with loom on the same weights in both directions (tests/golden/hf_safetensors.py).
#include <cstring>
#include <fstream>

#include "core/config.h"
#include "core/error.h"
#include "core/file_io.h"
#include "models/hf_weights.h"
#include "models/safetensors.h"
#include "test_util.h"

using loom::test::perturb;

namespace {

using loom::test::message_of;
using Named = std::vector<std::pair<std::string, torch::Tensor>>;

// A small model: vocab 50, d_model 32, 2 layers, 4 heads, d_ff 48, context 16, no dropout, plus `sets`.
loom::ModelConfig small(const std::vector<std::string>& sets) {
  std::vector<std::string> all = {"model.vocab_size=50", "model.d_model=32", "model.n_layers=2", "model.n_heads=4",
                                  "model.d_ff=48",       "model.max_seq_len=16", "model.dropout=0", "data.seq_len=16"};
  all.insert(all.end(), sets.begin(), sets.end());
  return loom::parse_config("", "test", all).model;
}

const std::vector<std::string> kLlama = {"model.norm=rmsnorm", "model.position=rope", "model.activation=swiglu",
                                         "model.bias=false", "model.tie_embeddings=false", "model.n_kv_heads=2"};

bool same_parameters(loom::Gpt& a, loom::Gpt& b) {
  const auto pa = a->named_parameters(), pb = b->named_parameters();
  if (pa.size() != pb.size()) return false;
  for (const auto& p : pa)
    if (!torch::equal(p.value(), pb[p.key()])) return false;
  return true;
}

}  // namespace

TEST_CASE("safetensors: write then read is bitwise for every dtype", "[safetensors]") {
  torch::manual_seed(1);
  const Named tensors = {{"f32", torch::randn({3, 5})},
                         {"f16", torch::randn({4}).to(torch::kHalf)},
                         {"bf16", torch::randn({2, 3}).to(torch::kBFloat16)},
                         {"f64", torch::randn({2, 2}, torch::kDouble)},
                         {"i64", torch::arange(-3, 9, torch::kLong).reshape({3, 4})},
                         {"i32", torch::arange(5, torch::kInt)},
                         {"u8", torch::arange(7, torch::kByte)},
                         {"bool", torch::tensor({true, false, true})},
                         {"scalar", torch::tensor(2.5f)},
                         {"empty", torch::zeros({0, 3})},
                         {"transposed", torch::randn({3, 4}).t()}};  // stored contiguous
  const auto path = loom::test::scratch_dir("safetensors") / "t.safetensors";
  loom::write_safetensors(path, tensors, {{"format", "pt"}, {"note", "x"}});
  const auto bytes = loom::read_file(path);
  uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);
  CHECK(header % 8 == 0);  // data 8-byte aligned
  const auto file = loom::read_safetensors(path);
  CHECK(file.metadata == std::map<std::string, std::string>{{"format", "pt"}, {"note", "x"}});
  REQUIRE(file.tensors.size() == tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    INFO(tensors[i].first);
    CHECK(file.tensors[i].first == tensors[i].first);  // file order is write order
    const auto& t = file.tensors[i].second;
    CHECK(t.scalar_type() == tensors[i].second.scalar_type());
    CHECK(t.sizes() == tensors[i].second.sizes());
    CHECK(torch::equal(t, tensors[i].second));
  }
  CHECK(!file.find("absent").defined());
  CHECK(torch::equal(file.find("i64"), tensors[4].second));
}

TEST_CASE("safetensors: reads the files of Python's safetensors package", "[safetensors][golden]") {
  const auto dir = loom::test::scratch_dir("safetensors-py");
  const auto path = (dir / "py.safetensors").string();
  const std::string script =
      "python3 -c \"import torch; from safetensors.torch import save_file; "
      "save_file({'w': torch.arange(6, dtype=torch.float32).reshape(2, 3), 'h': torch.tensor([1.5, -2.0]).half(), "
      "'b': torch.tensor([[0.25, 3.0]]).bfloat16(), 'i': torch.tensor([-1, 2**40])}, '" + path + "', {'k': 'v'})\"";
  REQUIRE(std::system(script.c_str()) == 0);
  const auto file = loom::read_safetensors(path);
  CHECK(file.metadata.at("k") == "v");
  CHECK(torch::equal(file.find("w"), torch::arange(6, torch::kFloat).reshape({2, 3})));
  CHECK(torch::equal(file.find("h"), torch::tensor({1.5, -2.0}).to(torch::kHalf)));
  CHECK(torch::equal(file.find("b"), torch::tensor({{0.25, 3.0}}).to(torch::kBFloat16)));
  CHECK(torch::equal(file.find("i"), torch::tensor({int64_t{-1}, int64_t{1} << 40})));
}

TEST_CASE("safetensors: a truncated or corrupt file is an error naming it", "[safetensors]") {
  const auto dir = loom::test::scratch_dir("safetensors-bad");
  const auto good = loom::safetensors_bytes({{"w", torch::randn({4, 4})}});
  auto with_header = [](const std::string& json, const std::string& data) {
    std::string bytes(8, '\0');
    const uint64_t n = json.size();
    std::memcpy(bytes.data(), &n, 8);
    return bytes + json + data;
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"empty", ""},
      {"short", good.substr(0, 5)},
      {"truncated-header", good.substr(0, 20)},
      {"truncated-data", good.substr(0, good.size() - 1)},
      {"not-json", with_header("{\"w\": [", "")},
      {"bad-dtype", with_header(R"({"w":{"dtype":"Q7","shape":[1],"data_offsets":[0,4]}})", "abcd")},
      {"size-mismatch", with_header(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", "abcd")},
      {"no-offsets", with_header(R"({"w":{"dtype":"F32","shape":[1]}})", "abcd")},
  };
  for (const auto& [name, bytes] : cases) {
    INFO(name);
    const auto path = dir / (name + ".safetensors");
    std::ofstream(path, std::ios::binary) << bytes;
    const auto message = message_of([&] { loom::read_safetensors(path); });
    CHECK_THAT(message, Catch::Contains(path.string()) && Catch::Contains("not a valid safetensors file"));
  }
  CHECK_THAT(message_of([&] { loom::read_safetensors(dir / "absent.safetensors"); }),
             Catch::Contains("absent.safetensors"));
}

TEST_CASE("hf weights: the family follows the config", "[safetensors][hf]") {
  using loom::WeightNames;
  CHECK(loom::weight_names(small({})) == WeightNames::kGpt2);
  CHECK(loom::weight_names(small({"model.tie_embeddings=false"})) == WeightNames::kGpt2);
  CHECK(loom::weight_names(small(kLlama)) == WeightNames::kLlama);
  CHECK(loom::weight_names(small({"model.norm=rmsnorm", "model.position=rope", "model.activation=swiglu"})) ==
        WeightNames::kLlama);  // biases and a tied head are LlamaConfig options
  CHECK(loom::weight_names(small({"model.position=alibi"})) == WeightNames::kLoom);
  CHECK(loom::weight_names(small({"model.bias=false"})) == WeightNames::kLoom);
  CHECK(loom::weight_names(small({"model.n_kv_heads=2"})) == WeightNames::kLoom);
  auto windowed = kLlama;
  windowed.push_back("model.attention_window=4");
  CHECK(loom::weight_names(small(windowed)) == WeightNames::kLoom);
  auto ntk = kLlama;
  ntk.insert(ntk.end(), {"model.rope_scaling=ntk", "model.rope_scaling_factor=2"});
  CHECK(loom::weight_names(small(ntk)) == WeightNames::kLoom);
}

TEST_CASE("hf weights: export then import is bitwise for every family", "[safetensors][hf]") {
  const std::vector<std::pair<std::string, std::vector<std::string>>> configs = {
      {"gpt2", {}},
      {"gpt2-untied", {"model.tie_embeddings=false"}},
      {"llama-gqa", kLlama},
      {"llama-bias-tied", {"model.norm=rmsnorm", "model.position=rope", "model.activation=swiglu", "model.n_kv_heads=1"}},
      {"loom-names", {"model.position=alibi", "model.activation=geglu", "model.n_kv_heads=2", "model.attention_window=5"}},
  };
  const auto dir = loom::test::scratch_dir("hf-roundtrip");
  for (const auto& [name, sets] : configs) {
    INFO(name);
    const auto config = small(sets);
    torch::manual_seed(1);
    loom::Gpt source(config);
    perturb(*source);
    const auto path = dir / (name + ".safetensors");
    loom::write_safetensors(path, loom::export_weights(*source));
    torch::manual_seed(2);
    loom::Gpt target(config);
    REQUIRE_FALSE(same_parameters(source, target));
    loom::load_weights_file(*target, path);
    CHECK(same_parameters(source, target));
    // The stored names are the family's.
    const auto file = loom::read_safetensors(path);
    const std::string first = file.tensors.front().first;
    const auto family = loom::weight_names(config);
    CHECK(first == (family == loom::WeightNames::kGpt2    ? "transformer.wte.weight"
                    : family == loom::WeightNames::kLlama ? "model.embed_tokens.weight"
                                                          : "token_embedding.weight"));
  }
}

TEST_CASE("hf weights: half-precision files load converted to the model's fp32", "[safetensors][hf]") {
  torch::manual_seed(9);
  loom::Gpt source(small(kLlama));
  auto weights = loom::export_weights(*source);
  for (auto& [name, t] : weights) t = t.to(torch::kBFloat16);  // as Hugging Face publishes LLaMA weights
  const auto path = loom::test::scratch_dir("hf-bf16") / "bf16.safetensors";
  loom::write_safetensors(path, weights);
  loom::Gpt target(small(kLlama));
  loom::load_weights_file(*target, path);
  const auto params = target->named_parameters();
  CHECK(params["token_embedding.weight"].scalar_type() == torch::kFloat);
  CHECK(torch::equal(params["blocks.0.mlp.gate.weight"],
                     source->named_parameters()["blocks.0.mlp.gate.weight"].to(torch::kBFloat16).to(torch::kFloat)));
}

TEST_CASE("hf weights: GPT-2 names and layouts are Hugging Face's", "[safetensors][hf]") {
  torch::manual_seed(3);
  loom::Gpt model(small({}));
  const auto weights = loom::export_weights(*model);
  std::map<std::string, torch::Tensor> by_name(weights.begin(), weights.end());
  CHECK(by_name.size() == 4 + 12 * 2);  // wte, wpe, ln_f (2); per layer 6 weights and 6 biases
  CHECK(by_name.count("lm_head.weight") == 0);
  // Conv1D stores (in, out): c_attn is (C, 3C), c_fc (C, 4C) here (C, d_ff).
  CHECK(by_name.at("transformer.h.0.attn.c_attn.weight").sizes() == torch::IntArrayRef({32, 96}));
  CHECK(by_name.at("transformer.h.1.mlp.c_fc.weight").sizes() == torch::IntArrayRef({32, 48}));
  CHECK(by_name.at("transformer.h.1.mlp.c_proj.weight").sizes() == torch::IntArrayRef({48, 32}));
  const auto params = model->named_parameters();
  CHECK(torch::equal(by_name.at("transformer.h.1.attn.c_proj.weight"), params["blocks.1.attention.out.weight"].t()));
  // Files without the "transformer." prefix and with the causal-mask buffers (OpenAI's converted GPT-2) load.
  loom::SafetensorsFile file;
  for (const auto& [name, t] : weights) file.tensors.emplace_back(name.substr(std::string("transformer.").size()), t);
  file.tensors.emplace_back("h.0.attn.bias", torch::ones({1, 1, 16, 16}));
  file.tensors.emplace_back("h.0.attn.masked_bias", torch::tensor(-1e4));
  torch::manual_seed(4);
  loom::Gpt other(small({}));
  loom::import_weights(*other, file, "openai.safetensors");
  CHECK(same_parameters(model, other));
}

TEST_CASE("hf weights: LLaMA q/k/v split loom's fused rows in order", "[safetensors][hf]") {
  torch::manual_seed(5);
  loom::Gpt model(small(kLlama));
  const auto weights = loom::export_weights(*model);
  std::map<std::string, torch::Tensor> by_name(weights.begin(), weights.end());
  const auto qkv = model->named_parameters()["blocks.1.attention.qkv.weight"];  // (32 + 16 + 16, 32)
  CHECK(torch::equal(by_name.at("model.layers.1.self_attn.q_proj.weight"), qkv.slice(0, 0, 32)));
  CHECK(torch::equal(by_name.at("model.layers.1.self_attn.k_proj.weight"), qkv.slice(0, 32, 48)));
  CHECK(torch::equal(by_name.at("model.layers.1.self_attn.v_proj.weight"), qkv.slice(0, 48, 64)));
  CHECK(by_name.count("lm_head.weight") == 1);
  CHECK(by_name.size() == 3 + 2 * 9);
}

TEST_CASE("hf weights: a mismatching file is an error naming the tensor", "[safetensors][hf]") {
  const auto dir = loom::test::scratch_dir("hf-mismatch");
  torch::manual_seed(6);
  loom::Gpt llama(small(kLlama));
  const auto path = dir / "llama.safetensors";
  loom::write_safetensors(path, loom::export_weights(*llama));

  auto wider = kLlama;
  wider.push_back("model.d_ff=64");
  loom::Gpt other(small(wider));
  CHECK_THAT(message_of([&] { loom::load_weights_file(*other, path); }),
             Catch::Contains(path.string()) && Catch::Contains("model.layers.0.mlp.gate_proj.weight") &&
                 Catch::Contains("[48, 32]") && Catch::Contains("[64, 32]"));

  loom::Gpt gpt2(small({}));
  CHECK_THAT(message_of([&] { loom::load_weights_file(*gpt2, path); }),
             Catch::Contains("no tensor transformer.wte.weight") && Catch::Contains("gpt2"));

  auto tied = kLlama;
  tied.push_back("model.n_layers=1");
  loom::Gpt shallow(small(tied));
  CHECK_THAT(message_of([&] { loom::load_weights_file(*shallow, path); }),
             Catch::Contains("model.layers.1.") && Catch::Contains("has no place in the model"));
}

namespace {

// The keys hf_forward.py's config builders read.
nlohmann::json hf_case(const std::string& family, const loom::ModelConfig& c, const torch::Tensor& tokens, int seed) {
  nlohmann::json config = {{"vocab_size", c.vocab_size}, {"d_model", c.d_model}, {"n_layers", c.n_layers},
                           {"n_heads", c.n_heads}, {"n_kv_heads", c.n_kv_heads}, {"d_ff", c.ffn_dim()},
                           {"max_seq_len", c.max_seq_len}, {"norm_eps", c.norm_eps}, {"rope_theta", c.rope_theta},
                           {"rope_scaling", loom::enum_name(c.rope_scaling)}, {"rope_scaling_factor", c.rope_scaling_factor},
                           {"bias", c.bias}, {"tie_embeddings", c.tie_embeddings}};
  return {{"family", family}, {"config", config}, {"tokens", loom::test::tensor_json(tokens)}, {"seed", seed}};
}

torch::Tensor golden(const std::string& mode, const nlohmann::json& input, const std::filesystem::path& dir) {
  const auto path = dir.string() + ".json";
  std::ofstream(path) << input.dump();
  const auto out = loom::test::python_golden("hf_safetensors.py", mode + " " + path + " " + dir.string() + " 2>/dev/null");
  return loom::test::json_tensor(out["logits"], torch::kFloat);
}

const std::vector<std::pair<std::string, std::vector<std::string>>>& hf_models() {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> all = {
      {"gpt2", {}},
      {"llama", kLlama},
      {"llama", {"model.norm=rmsnorm", "model.position=rope", "model.activation=swiglu", "model.n_kv_heads=1",
                 "model.rope_theta=500000", "model.rope_scaling=linear", "model.rope_scaling_factor=2"}},
  };
  return all;
}

}  // namespace

TEST_CASE("hf weights: transformers' random GPT-2 and LLaMA load into loom with equal logits", "[safetensors][hf][golden]") {
  torch::manual_seed(7);
  for (size_t i = 0; i < hf_models().size(); ++i) {
    const auto& [family, sets] = hf_models()[i];
    INFO(family << " " << i);
    const auto config = small(sets);
    const auto tokens = torch::randint(0, config.vocab_size, {2, 16}, torch::kLong);
    const auto dir = loom::test::scratch_dir("hf-import-" + std::to_string(i)) / "hf";
    const auto expected = golden("write", hf_case(family, config, tokens, 10 + static_cast<int>(i)), dir);
    loom::Gpt model(config);
    loom::load_weights_file(*model, dir / "model.safetensors");
    model->eval();
    torch::NoGradGuard no_grad;
    CHECK_THAT(model->forward(tokens), loom::test::reference_logits(expected));
  }
}

TEST_CASE("hf weights: loom's export loads in transformers' from_pretrained with equal logits", "[safetensors][hf][golden]") {
  torch::manual_seed(8);
  for (size_t i = 0; i < hf_models().size(); ++i) {
    const auto& [family, sets] = hf_models()[i];
    INFO(family << " " << i);
    const auto config = small(sets);
    loom::Gpt model(config);
    perturb(*model);
    model->eval();
    const auto tokens = torch::randint(0, config.vocab_size, {2, 16}, torch::kLong);
    const auto dir = loom::test::scratch_dir("hf-export-" + std::to_string(i)) / "export";
    std::filesystem::create_directories(dir);
    loom::write_safetensors(dir / "model.safetensors", loom::export_weights(*model), {{"format", "pt"}});
    std::ofstream(dir / "config.json") << loom::hf_config_json(config, {}).dump(2);
    const auto expected = golden("read", hf_case(family, config, tokens, 0), dir);
    torch::NoGradGuard no_grad;
    CHECK_THAT(model->forward(tokens), loom::test::reference_logits(expected));
  }
}
