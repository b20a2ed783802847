// The decoder's variants (norms, positions, activations, biases, tying, grouped-query heads, sliding
// windows), all one model with options: closed-form parameter and FLOP counts against built models, the
// presets' published sizes, the memory estimate against Korthikanti et al.'s formula, KV-cached against
// uncached logits and generation, and logits against a float64 PyTorch reference
// (tests/golden/gpt_forward.py) and Hugging Face transformers' GPT-2 and LLaMA (tests/golden/hf_forward.py).
#include <cmath>
#include <fstream>
#include <map>
#include <set>

#include "core/error.h"
#include "models/generate.h"
#include "models/gpt.h"
#include "test_util.h"

using loom::test::max_abs_diff;
using torch::indexing::Slice;
using loom::test::numel_sum;
using loom::test::perturb;

namespace {

struct Variant {
  std::string name;
  std::vector<std::string> sets;  // model.* overrides on top of the small base
};

const std::vector<Variant>& variants() {
  static const std::vector<Variant> all = {
      {"gpt", {}},
      {"gpt-untied", {"model.tie_embeddings=false"}},
      {"llama-gqa",
       {"model.norm=rmsnorm", "model.position=rope", "model.activation=swiglu", "model.bias=false",
        "model.tie_embeddings=false", "model.n_kv_heads=2"}},
      {"mqa-alibi-geglu", {"model.n_kv_heads=1", "model.position=alibi", "model.activation=geglu"}},
      {"alibi-6-heads", {"model.d_model=48", "model.n_heads=6", "model.n_kv_heads=3", "model.position=alibi"}},
      {"rope-window-linear",
       {"model.norm=rmsnorm", "model.position=rope", "model.attention_window=5", "model.rope_scaling=linear",
        "model.rope_scaling_factor=2", "model.rope_theta=500"}},
      {"rope-ntk-gqa", {"model.position=rope", "model.rope_scaling=ntk", "model.rope_scaling_factor=4", "model.n_kv_heads=2"}},
      {"alibi-window-relu", {"model.position=alibi", "model.attention_window=4", "model.activation=relu", "model.bias=false"}},
      {"sinusoidal-relu-untied", {"model.position=sinusoidal", "model.activation=relu", "model.tie_embeddings=false"}},
      {"sinusoidal-window-swiglu", {"model.position=sinusoidal", "model.attention_window=3", "model.activation=swiglu"}},
  };
  return all;
}

// A small model of the variant: vocab 50, d_model 32, 2 layers, 4 heads, d_ff 48, context 16, no dropout.
loom::ModelConfig small(const Variant& variant, const std::vector<std::string>& more = {}) {
  std::vector<std::string> sets = {"model.vocab_size=50", "model.d_model=32",     "model.n_layers=2",
                                   "model.n_heads=4",     "model.d_ff=48",        "model.max_seq_len=16",
                                   "model.dropout=0",     "data.seq_len=16"};
  sets.insert(sets.end(), variant.sets.begin(), variant.sets.end());
  sets.insert(sets.end(), more.begin(), more.end());
  return loom::parse_config("", variant.name, sets).model;
}

// Models this small run many tiny ops, where handing work to a second thread costs more than the math.
struct OneThread {
  int previous = torch::get_num_threads();
  OneThread() { torch::set_num_threads(1); }
  ~OneThread() { torch::set_num_threads(previous); }
};

// Perturbs every parameter so that biases and norm gains are not their trivial init values.
// One case of the golden scripts' input: the model's config, weights and the tokens.
nlohmann::json golden_case(loom::Gpt& model, const torch::Tensor& tokens) {
  const auto& c = model->config();
  nlohmann::json out;
  out["config"] = {{"vocab_size", c.vocab_size}, {"d_model", c.d_model}, {"n_layers", c.n_layers},
                   {"n_heads", c.n_heads}, {"n_kv_heads", c.n_kv_heads}, {"d_ff", c.ffn_dim()},
                   {"max_seq_len", c.max_seq_len}, {"norm", loom::enum_name(c.norm)}, {"norm_eps", c.norm_eps},
                   {"position", loom::enum_name(c.position)}, {"rope_theta", c.rope_theta}, {"rope_scaling", loom::enum_name(c.rope_scaling)},
                   {"rope_scaling_factor", c.rope_scaling_factor}, {"activation", loom::enum_name(c.activation)}, {"bias", c.bias},
                   {"attention_window", c.attention_window}, {"tie_embeddings", c.tie_embeddings}};
  for (const auto& p : model->named_parameters()) out["params"][p.key()] = loom::test::tensor_json(p.value());
  out["tokens"] = loom::test::tensor_json(tokens);
  return out;
}

// Runs tests/golden/<script> on the cases; its logits, one (B, T, V) float64 tensor per case.
std::vector<torch::Tensor> golden_logits(const std::string& script, const nlohmann::json& cases) {
  const auto path = loom::test::scratch_dir("variants-golden") / "spec.json";
  std::ofstream(path) << nlohmann::json{{"cases", cases}}.dump();
  const auto golden = loom::test::python_golden(script, path.string());
  std::vector<torch::Tensor> out;
  for (const auto& logits : golden["logits"])
    out.push_back(loom::test::json_tensor(logits, torch::kDouble));
  return out;
}

}  // namespace

TEST_CASE("variants: count_parameters equals the built model's parameters", "[models][variants]") {
  for (const auto& variant : variants()) {
    INFO(variant.name);
    const auto config = small(variant);
    loom::Gpt model(config);
    CHECK(loom::count_parameters(config) == numel_sum(*model));
    const auto named = model->named_parameters();
    CHECK(named.contains("lm_head.weight") == !config.tie_embeddings);
    CHECK(named.contains("position_embedding.weight") == (config.position == loom::PositionKind::kLearned));
    CHECK(named.contains("blocks.0.mlp.gate.weight") == config.gated_mlp());
    CHECK(named.contains("blocks.1.attention.out.bias") == config.bias);
    CHECK(named.contains("blocks.1.ln2.bias") == (config.norm == loom::NormKind::kLayerNorm));
    // The fused projection holds n_heads query heads and n_kv_heads key and value heads.
    const int64_t D = config.head_dim();
    CHECK(named["blocks.0.attention.qkv.weight"].size(0) == (config.n_heads + 2 * config.kv_heads()) * D);
  }
}

TEST_CASE("variants: training FLOPs per token are 6 x matmul weights + attention", "[models][variants]") {
  for (const auto& variant : variants()) {
    INFO(variant.name);
    const auto config = small(variant);
    loom::Gpt model(config);
    // Every weight a token is multiplied by: all matrices except the position table, and the token
    // table only when it doubles as the LM head.
    double matmul = 0;
    for (const auto& p : model->named_parameters()) {
      if (p.value().dim() != 2 || p.key() == "position_embedding.weight") continue;
      if (!config.tie_embeddings && p.key() == "token_embedding.weight") continue;
      matmul += static_cast<double>(p.value().numel());
    }
    const int64_t T = 12;
    const int64_t keys = config.attention_window > 0 ? std::min<int64_t>(T, config.attention_window) : T;
    const double attention = 12.0 * 2 * config.d_model * static_cast<double>(keys);
    CHECK(loom::training_flops_per_token(config, T) == Approx(6 * matmul + attention).epsilon(1e-12));
  }
}

TEST_CASE("variants: the presets have their published sizes", "[models][variants][presets]") {
  // gpt2-finetune is GPT-2 small again, so that its model.init_from (Hugging Face's gpt2) fits.
  const std::vector<std::pair<std::string, int64_t>> presets = {{"gpt2-124m", 124439808},
                                                                {"gpt2-finetune", 124439808},
                                                                {"gpt2-350m", 354823168},
                                                                {"llama2-7b", 6738415616},
                                                                {"llama3-8b", 8030261248}};
  for (const auto& [name, parameters] : presets) {
    INFO(name);
    const auto config = loom::load_config((loom::test::source_dir() / "configs" / (name + ".yaml")).string());
    CHECK(loom::count_parameters(config.model) == parameters);
  }
  // llama-tiny takes its vocabulary from the tokenizer; at 1024 tokens it builds and counts as it says.
  auto tiny = loom::load_config((loom::test::source_dir() / "configs" / "llama-tiny.yaml").string(),
                                {"model.vocab_size=1024"});
  CHECK(tiny.model.norm == loom::NormKind::kRmsNorm);
  CHECK(tiny.model.kv_heads() < tiny.model.n_heads);
  loom::Gpt model(tiny.model);
  CHECK(loom::count_parameters(tiny.model) == numel_sum(*model));
}

TEST_CASE("variants: config validation of the model keys", "[models][variants][config]") {
  auto error = [](const std::vector<std::string>& sets) -> std::string {
    try {
      small({"bad", sets});
    } catch (const loom::ConfigError& e) {
      return e.what();
    }
    return "";
  };
  CHECK_THAT(error({"model.n_kv_heads=3"}), Catch::Contains("--set model.n_kv_heads=3: model.n_kv_heads: 3 does not divide model.n_heads=4"));
  CHECK_THAT(error({"model.norm=batchnorm"}), Catch::Contains("model.norm: 'batchnorm' is not one of layernorm, rmsnorm"));
  CHECK_THAT(error({"model.position=rotary"}), Catch::Contains("model.position: 'rotary' is not one of"));
  CHECK_THAT(error({"model.activation=silu"}), Catch::Contains("model.activation: 'silu' is not one of"));
  CHECK_THAT(error({"model.rope_scaling=linear"}), Catch::Contains("model.rope_scaling: applies to model.position=rope only"));
  CHECK_THAT(error({"model.position=rope", "model.rope_scaling=yarn"}), Catch::Contains("'yarn' is not one of none, linear, ntk"));
  CHECK_THAT(error({"model.position=rope", "model.rope_scaling_factor=0.5"}), Catch::Contains("model.rope_scaling_factor: 0.5 must be >= 1"));
  CHECK_THAT(error({"model.position=rope", "model.d_model=36", "model.n_heads=4"}), Catch::Contains("rope needs an even head size"));
  CHECK_THAT(error({"model.attention_window=-1"}), Catch::Contains("model.attention_window: -1 must be >= 0"));
  CHECK_THAT(error({"model.norm_eps=0"}), Catch::Contains("model.norm_eps: 0 must be > 0"));
  CHECK(error({"model.n_kv_heads=1"}).empty());
}

TEST_CASE("variants: ALiBi slopes follow Press et al.", "[models][variants]") {
  const auto eight = loom::alibi_slopes(8);
  for (int64_t h = 0; h < 8; ++h) CHECK(eight[h].item<double>() == Approx(std::pow(2.0, -(h + 1.0))));
  // 6 heads: the 4-head slopes 2^-2, 2^-4, 2^-6, 2^-8, then every other 8-head slope: 2^-1, 2^-3.
  const std::vector<double> six = {0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125};
  const auto slopes = loom::alibi_slopes(6);
  for (int64_t h = 0; h < 6; ++h) CHECK(slopes[h].item<double>() == Approx(six[h]));
}

TEST_CASE("variants: KV-cached forward equals the full forward", "[models][variants][cache]") {
  const OneThread one_thread;
  for (const auto& variant : variants()) {
    INFO(variant.name);
    torch::manual_seed(21);
    const auto config = small(variant);
    loom::Gpt model(config);
    perturb(*model);
    model->eval();
    torch::NoGradGuard no_grad;
    const auto tokens = torch::randint(0, config.vocab_size, {2, 14}, torch::kLong);
    const auto full = model->forward(tokens);  // (2, 14, V)
    const int64_t K = config.kv_heads(), D = config.head_dim(), W = config.attention_window;

    // One token at a time: the cache holds n_kv_heads heads and, with a window, at most W positions.
    auto caches = model->new_caches();
    std::vector<torch::Tensor> steps;
    for (int64_t t = 0; t < 14; ++t) steps.push_back(model->forward(tokens.index({Slice(), Slice(t, t + 1)}), &caches));
    CHECK_THAT(torch::cat(steps, 1), loom::test::same_forward_as(full));
    const int64_t kept = W > 0 ? W : 14;
    const auto& second = dynamic_cast<const loom::ContiguousKVCache&>(caches[1]);
    CHECK(second.keys().sizes() == std::vector<int64_t>({2, K, kept, D}));
    CHECK(second.values().sizes() == std::vector<int64_t>({2, K, kept, D}));
    CHECK(caches[0].seen() == 14);

    // Chunks after a prefix (some longer than the window): new positions see the cache and each other.
    auto chunked = model->new_caches();
    std::vector<torch::Tensor> parts;
    const std::vector<std::pair<int64_t, int64_t>> chunks = {{0, 6}, {6, 7}, {7, 13}, {13, 14}};
    for (auto [from, to] : chunks) {
      parts.push_back(model->forward(tokens.index({Slice(), Slice(from, to)}), &chunked));
      CHECK(dynamic_cast<const loom::ContiguousKVCache&>(chunked[0]).length() == (W > 0 ? std::min(W, to) : to));
    }
    CHECK_THAT(torch::cat(parts, 1), loom::test::same_forward_as(full));
  }
}

TEST_CASE("variants: greedy generation is the same with and without the KV cache", "[models][variants][generate]") {
  const OneThread one_thread;
  for (const auto& variant : variants()) {
    INFO(variant.name);
    torch::manual_seed(22);
    loom::Gpt model(small(variant));
    perturb(*model);
    loom::SamplingOptions greedy;
    greedy.temperature = 0;
    // 6 prompt + 24 new tokens: past the context of 16, where both paths restart from the last 16.
    const std::vector<int64_t> prompt = {3, 14, 15, 9, 2, 6};
    const auto cached = loom::generate(model, prompt, 24, greedy);
    greedy.use_cache = false;
    const auto uncached = loom::generate(model, prompt, 24, greedy);
    REQUIRE(cached.size() == 24);
    CHECK(cached == uncached);
    CHECK(std::set<int64_t>(cached.begin(), cached.end()).size() >= 2);  // not one token repeated
  }
}

TEST_CASE("variants: a sliding window only sees the last window positions", "[models][variants]") {
  torch::manual_seed(23);
  const auto config = small(variants()[5]);  // rope-window-linear, window 5
  REQUIRE(config.attention_window == 5);
  loom::Gpt model(config);
  model->eval();
  torch::NoGradGuard no_grad;
  auto tokens = torch::randint(0, 50, {1, 14}, torch::kLong);
  const auto before = model->forward(tokens);
  tokens[0][3] = (tokens[0][3].item<int64_t>() + 1) % 50;
  const auto after = model->forward(tokens);
  // Position 3 reaches positions 3..7 in layer 1 and 3..11 through two layers: 12 and 13 are unaffected.
  CHECK(max_abs_diff(before.index({Slice(), Slice(0, 3)}), after.index({Slice(), Slice(0, 3)})) <= 1e-6);
  CHECK(max_abs_diff(before.index({Slice(), Slice(3, 12)}), after.index({Slice(), Slice(3, 12)})) > 1e-4);
  CHECK(max_abs_diff(before.index({Slice(), Slice(12, 14)}), after.index({Slice(), Slice(12, 14)})) <= 1e-6);
}

TEST_CASE("variants: logits equal an independent float64 PyTorch forward", "[models][variants][golden]") {
  nlohmann::json cases = nlohmann::json::array();
  std::vector<torch::Tensor> ours;
  torch::manual_seed(24);
  for (const auto& variant : variants()) {
    loom::Gpt model(small(variant));
    perturb(*model);
    model->eval();
    const auto tokens = torch::randint(0, 50, {3, 12}, torch::kLong);
    cases.push_back(golden_case(model, tokens));
    torch::NoGradGuard no_grad;
    ours.push_back(model->forward(tokens));
  }
  const auto expected = golden_logits("gpt_forward.py", cases);
  REQUIRE(expected.size() == variants().size());
  for (size_t i = 0; i < expected.size(); ++i) {
    INFO(variants()[i].name);
    CHECK_THAT(ours[i], loom::test::reference_logits(expected[i]));
  }
}

TEST_CASE("variants: logits equal Hugging Face GPT2LMHeadModel and LlamaForCausalLM", "[models][variants][golden][hf]") {
  // (family, variant): GPT-2 as it is; LLaMA with GQA, with biases and tied, and with linear RoPE scaling.
  const std::vector<std::pair<std::string, Variant>> models = {
      {"gpt2", {"gpt2", {}}},
      {"llama", variants()[2]},
      {"llama", {"llama-bias-tied", {"model.norm=rmsnorm", "model.position=rope", "model.activation=swiglu",
                                     "model.n_kv_heads=1", "model.rope_theta=500000"}}},
      {"llama", {"llama-linear", {"model.norm=rmsnorm", "model.position=rope", "model.activation=swiglu",
                                  "model.bias=false", "model.tie_embeddings=false", "model.rope_scaling=linear",
                                  "model.rope_scaling_factor=4"}}},
  };
  nlohmann::json cases = nlohmann::json::array();
  std::vector<torch::Tensor> ours;
  torch::manual_seed(25);
  for (const auto& [family, variant] : models) {
    loom::Gpt model(small(variant));
    perturb(*model);
    model->eval();
    const auto tokens = torch::randint(0, 50, {2, 16}, torch::kLong);
    auto one = golden_case(model, tokens);
    one["family"] = family;
    cases.push_back(one);
    torch::NoGradGuard no_grad;
    ours.push_back(model->forward(tokens));
  }
  const auto expected = golden_logits("hf_forward.py", cases);
  REQUIRE(expected.size() == models.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    INFO(models[i].second.name);
    CHECK_THAT(ours[i], loom::test::reference_logits(expected[i]));
  }
}

TEST_CASE("variants: memory estimate follows Korthikanti et al. for GPT-2", "[models][variants][memory]") {
  // GPT-2 small with dropout in bf16: per layer sbh(10 + 24/t + 5as/(ht)) bytes (their equation 2) and
  // 4sbh more for the two norm inputs, fp32 under autocast; plus the head: the final norm's fp32 input
  // 4sbh, the LM head's bf16 input 2sbh; on one rank the loss's log-probs 4sbV and, at its backward's peak,
  // their gradient and the logits' 8sbV more; under TP the vocabulary-parallel loss's fp32 shifted logits and
  // exp, and in backward their fp32 gradient and its bf16 copy: 14sbV/t.
  for (int64_t tp : {1, 2, 4}) {
    INFO("tp " << tp);
    auto config = loom::load_config((loom::test::source_dir() / "configs" / "gpt2-124m.yaml").string(),
                                    {"model.dropout=0.1", "train.micro_batch_size=4", "train.batch_size=64",
                                     "train.loss_chunk_tokens=0", "parallel.tp=" + std::to_string(tp)});
    const double s = 1024, b = 4, h = 768, a = 12, V = 50257, L = 12, t = static_cast<double>(tp);
    const double layer = s * b * h * (10 + 4 + 24 / t + 5 * a * s / (h * t));
    const double head = (4 + 2) * s * b * h + (tp == 1 ? 12 * s * b * V : 14 * s * b * V / t);
    const auto memory = loom::estimate_memory(config);
    CHECK(static_cast<double>(memory.activations) == Approx(L * layer + head).epsilon(1e-9));
    const int64_t params = (124439808 + tp - 1) / tp;
    CHECK(memory.weights == 6 * params);  // fp32 master + bf16 autocast copy
    CHECK(memory.gradients == 4 * params);
    CHECK(memory.optimizer == 8 * params);
  }
  // fp32 without dropout: everything in 4-byte elements, no masks, and SDPA's flash kernel keeps each query's
  // fp32 log-sum-exp instead of the probabilities: 16sbh + asb per layer for GPT-2, in 4-byte elements.
  auto fp32 = loom::load_config((loom::test::source_dir() / "configs" / "gpt2-124m.yaml").string(),
                                {"precision.dtype=fp32", "train.micro_batch_size=2", "train.batch_size=64",
                                 "train.loss_chunk_tokens=0"});
  const double s = 1024, b = 2, h = 768, a = 12;
  const double layer = 4 * (16 * s * b * h + a * s * b);
  // the final norm's and the LM head's inputs, the log-probs and the loss backward's gradients
  const double head = 8 * s * b * h + 12 * s * b * 50257;
  CHECK(static_cast<double>(loom::estimate_memory(fp32).activations) == Approx(12 * layer + head).epsilon(1e-9));
  CHECK(loom::estimate_memory(fp32).weights == 4 * 124439808);
}

TEST_CASE("variants: the memory estimate follows the fused loss and activation checkpointing",
          "[models][variants][memory]") {
  // GPT-2 small, fp32, no dropout, micro-batch 2 x 1024, one process: the head and loss run fused in
  // chunks of 1024 tokens (the default): one chunk's fp32 logits and their gradient (8 x 1024 x V) and the
  // gradients of the head's input (4sbh) and weight (4Vh) replace the full logits (8sbV).
  const double s = 1024, b = 2, h = 768, a = 12, V = 50257;
  const double sbh = s * b * h, scores = 4 * a * s * b;  // the flash kernel's log-sum-exp
  const double head = 8 * sbh + 8 * 1024 * V + 4 * sbh + 4 * V * h;
  // Per layer: the attention half 8sbh (ln1 input and output) + 16sbh (q, k, v, projection input) + scores,
  // the MLP half 8sbh + 32sbh (GELU's input and output, 4h each).
  const double attention_half = 24 * sbh + scores, mlp_half = 40 * sbh;
  const std::map<std::string, double> expected{
      {"none", 12 * (attention_half + mlp_half) + head},
      // each block's input; one half recomputed at a time (the attention half, here the larger, less its input)
      {"full", 12 * 4 * sbh + head + std::max(attention_half - 4 * sbh, mlp_half)},
      // the attention half and the MLP half's input kept; one MLP half (less that input) recomputed
      {"selective", 12 * (attention_half + 4 * sbh) + head + mlp_half - 4 * sbh},
  };
  for (const auto& [mode, bytes] : expected) {
    INFO("activation checkpointing " << mode);
    const auto config = loom::load_config((loom::test::source_dir() / "configs" / "gpt2-124m.yaml").string(),
                                          {"precision.dtype=fp32", "train.micro_batch_size=2", "train.batch_size=64",
                                           "train.activation_checkpointing=" + mode});
    CHECK(static_cast<double>(loom::estimate_memory(config).activations) == Approx(bytes).epsilon(1e-9));
  }
}

TEST_CASE("variants: a pipeline stage's memory counts the micro-batches in flight", "[models][variants][memory]") {
  // GPT-2 small over 4 stages, 16 micro-batches of 2 x 1024: under 1F1B stage s keeps min(m, pp - s)
  // micro-batches' activations and as many fp32 sends each way it sends (4sbh each; a send lives until
  // the neighbour receives it); under GPipe all m.
  for (const std::string schedule : {"1f1b", "gpipe"}) {
    auto config = loom::load_config((loom::test::source_dir() / "configs" / "gpt2-124m.yaml").string(),
                                    {"precision.dtype=fp32", "train.micro_batch_size=2", "train.batch_size=32",
                                     "parallel.pp=4", "parallel.pp_schedule=" + schedule});
    const double send = 4.0 * 1024 * 2 * 768;
    for (int64_t stage = 0; stage < 4; ++stage) {
      INFO(schedule << " stage " << stage);
      const double in_flight = schedule == "gpipe" ? 16 : static_cast<double>(4 - stage);
      const double directions = (stage < 3) + (stage > 0);
      const auto memory = loom::estimate_memory(config, stage);
      CHECK(static_cast<double>(memory.pipeline_sends) == Approx(directions * in_flight * send).epsilon(1e-12));
      // Three blocks per stage: the activations of one micro-batch times those in flight.
      auto one = config;
      one.train.batch_size = 2;
      if (stage < 3)
        CHECK(static_cast<double>(memory.activations) ==
              Approx(in_flight * static_cast<double>(loom::estimate_memory(one, stage).activations)).epsilon(1e-12));
    }
  }
}
