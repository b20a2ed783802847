// MoE models under Hugging Face's names (models/hf_weights.h): transformers' random MixtralForCausalLM and
// Qwen3MoeForCausalLM (saved by tests/golden/hf_moe.py) load into loom with equal fp32 logits, and loom's
// export of a perturbed model loads in transformers' from_pretrained with equal logits.
#include <fstream>

#include "core/config.h"
#include "models/hf_weights.h"
#include "models/safetensors.h"
#include "test_util.h"

namespace {

struct MoeCase {
  std::string family;
  std::vector<std::string> sets;
};

const std::vector<MoeCase>& moe_cases() {
  static const std::vector<MoeCase> all = {
      {"mixtral", {"model.moe.router=topk_softmax", "model.moe.d_ff=20"}},
      {"qwen3_moe", {"model.moe.router=softmax_topk", "model.moe.normalize=true", "model.qk_norm=true",
                     "model.head_dim=12", "model.moe.first_dense=1", "model.moe.d_ff=12", "model.norm_eps=1e-6"}},
      {"qwen3_moe", {"model.moe.router=softmax_topk", "model.qk_norm=true", "model.moe.top_k=1"}},
  };
  return all;
}

loom::ModelConfig moe_config(const std::vector<std::string>& sets) {
  std::vector<std::string> all = {"model.vocab_size=50", "model.d_model=32", "model.n_layers=3", "model.n_heads=4",
                                  "model.n_kv_heads=2", "model.d_ff=48", "model.max_seq_len=16", "model.dropout=0",
                                  "data.seq_len=16", "model.norm=rmsnorm", "model.position=rope",
                                  "model.activation=swiglu", "model.bias=false", "model.tie_embeddings=false",
                                  "model.rope_theta=1000000", "model.moe.num_experts=4", "model.moe.top_k=2"};
  all.insert(all.end(), sets.begin(), sets.end());
  return loom::parse_config("", "test", all).model;
}

nlohmann::json moe_case(const std::string& family, const loom::ModelConfig& c, const torch::Tensor& tokens, int seed) {
  std::vector<int64_t> dense;
  for (int64_t i = 0; i < c.n_layers; ++i)
    if (!c.moe.layer_is_moe(i)) dense.push_back(i);
  nlohmann::json config = {{"vocab_size", c.vocab_size}, {"d_model", c.d_model}, {"n_layers", c.n_layers},
                           {"n_heads", c.n_heads}, {"n_kv_heads", c.n_kv_heads}, {"head_dim", c.head_dim()},
                           {"d_ff", c.ffn_dim()}, {"expert_d_ff", c.expert_dim()}, {"max_seq_len", c.max_seq_len},
                           {"norm_eps", c.norm_eps}, {"rope_theta", c.rope_theta},
                           {"tie_embeddings", c.tie_embeddings}, {"num_experts", c.moe.num_experts},
                           {"top_k", c.moe.top_k}, {"normalize", c.moe.normalize}, {"dense_layers", dense}};
  return {{"family", family}, {"config", config}, {"tokens", loom::test::tensor_json(tokens)}, {"seed", seed}};
}

torch::Tensor moe_golden(const std::string& mode, const nlohmann::json& input, const std::filesystem::path& dir) {
  const auto path = dir.string() + ".json";
  std::ofstream(path) << input.dump();
  const auto out = loom::test::python_golden("hf_moe.py", mode + " " + path + " " + dir.string() + " 2>/dev/null");
  return loom::test::json_tensor(out["logits"], torch::kFloat);
}

}  // namespace

TEST_CASE("moe hf weights: the family follows the router and layout", "[moe][hf]") {
  CHECK(loom::weight_names(moe_config(moe_cases()[0].sets)) == loom::WeightNames::kMixtral);
  CHECK(loom::weight_names(moe_config(moe_cases()[1].sets)) == loom::WeightNames::kQwen3Moe);
  // What transformers' MoE models do not have keeps loom's names.
  CHECK(loom::weight_names(moe_config({"model.moe.shared_experts=1"})) == loom::WeightNames::kLoom);
  CHECK(loom::weight_names(moe_config({"model.moe.every=2"})) == loom::WeightNames::kLoom);
  CHECK(loom::weight_names(moe_config({"model.moe.bias_update_rate=0.001"})) == loom::WeightNames::kLoom);
  CHECK(loom::weight_names(moe_config({"model.moe.router=sigmoid"})) == loom::WeightNames::kLoom);
}

TEST_CASE("moe hf weights: transformers' Mixtral and Qwen3-MoE load into loom with equal logits", "[moe][hf][golden]") {
  torch::manual_seed(11);
  for (size_t i = 0; i < moe_cases().size(); ++i) {
    const auto& [family, sets] = moe_cases()[i];
    INFO(family << " " << i);
    const auto config = moe_config(sets);
    const auto tokens = torch::randint(0, config.vocab_size, {2, 16}, torch::kLong);
    const auto dir = loom::test::scratch_dir("hf-moe-import-" + std::to_string(i)) / "hf";
    const auto expected = moe_golden("write", moe_case(family, config, tokens, 20 + static_cast<int>(i)), dir);
    loom::Gpt model(config);
    loom::load_weights_file(*model, dir / "model.safetensors");
    model->eval();
    torch::NoGradGuard no_grad;
    CHECK_THAT(model->forward(tokens), loom::test::reference_logits(expected));
  }
}

TEST_CASE("moe hf weights: loom's export loads in transformers with equal logits", "[moe][hf][golden]") {
  torch::manual_seed(12);
  for (size_t i = 0; i < moe_cases().size(); ++i) {
    const auto& [family, sets] = moe_cases()[i];
    INFO(family << " " << i);
    const auto config = moe_config(sets);
    loom::Gpt model(config);
    loom::test::perturb(*model);
    model->eval();
    const auto tokens = torch::randint(0, config.vocab_size, {2, 16}, torch::kLong);
    const auto dir = loom::test::scratch_dir("hf-moe-export-" + std::to_string(i)) / "export";
    std::filesystem::create_directories(dir);
    loom::write_safetensors(dir / "model.safetensors", loom::export_weights(*model), {{"format", "pt"}});
    std::ofstream(dir / "config.json") << loom::hf_config_json(config, {}).dump(2);
    const auto expected = moe_golden("read", moe_case(family, config, tokens, 0), dir);
    torch::NoGradGuard no_grad;
    CHECK_THAT(model->forward(tokens), loom::test::reference_logits(expected));
  }
}
