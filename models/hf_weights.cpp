#include "models/hf_weights.h"

#include <map>
#include <set>

#include "core/config_fields.h"
#include "core/error.h"
#include "parallel/tensor_parallel.h"

namespace loom {
namespace {

using Piece = HfPiece;

const char* kGpt2Prefix = "transformer.";

std::vector<Piece> pieces(const ModelConfig& c, GptImpl& model) {
  std::vector<Piece> out;
  const auto kinds = c.bias ? std::vector<std::string>{"weight", "bias"} : std::vector<std::string>{"weight"};
  switch (weight_names(c)) {
    case WeightNames::kLoom:
      for (const auto& p : model.named_parameters()) out.push_back({p.key(), p.key()});
      break;
    case WeightNames::kGpt2: {
      const std::string t = kGpt2Prefix;
      out = {{t + "wte.weight", "token_embedding.weight"}, {t + "wpe.weight", "position_embedding.weight"}};
      const std::vector<std::pair<std::string, std::string>> layers = {{"ln_1", "ln1"}, {"attn.c_attn", "attention.qkv"},
          {"attn.c_proj", "attention.out"}, {"ln_2", "ln2"}, {"mlp.c_fc", "mlp.up"}, {"mlp.c_proj", "mlp.down"}};
      for (int64_t i = 0; i < c.n_layers; ++i) {
        const std::string hf = t + "h." + std::to_string(i) + ".", loom = "blocks." + std::to_string(i) + ".";
        for (const auto& [h, l] : layers) {
          out.push_back({hf + h + ".weight", loom + l + ".weight", /*transpose=*/h.rfind("ln_", 0) != 0});
          out.push_back({hf + h + ".bias", loom + l + ".bias"});
        }
      }
      out.push_back({t + "ln_f.weight", "final_norm.weight"});
      out.push_back({t + "ln_f.bias", "final_norm.bias"});
      break;
    }
    case WeightNames::kLlama:
    case WeightNames::kMixtral:
    case WeightNames::kQwen3Moe: {
      const int64_t q = c.n_heads * c.head_dim(), kv = c.kv_heads() * c.head_dim();
      out.push_back({"model.embed_tokens.weight", "token_embedding.weight"});
      for (int64_t i = 0; i < c.n_layers; ++i) {
        const std::string hf = "model.layers." + std::to_string(i) + ".", loom = "blocks." + std::to_string(i) + ".";
        out.push_back({hf + "input_layernorm.weight", loom + "ln1.weight"});
        for (const auto& kind : kinds) {
          const std::string qkv = loom + "attention.qkv." + kind;
          out.push_back({hf + "self_attn.q_proj." + kind, qkv, false, 0, q});
          out.push_back({hf + "self_attn.k_proj." + kind, qkv, false, q, kv});
          out.push_back({hf + "self_attn.v_proj." + kind, qkv, false, q + kv, kv});
          out.push_back({hf + "self_attn.o_proj." + kind, loom + "attention.out." + kind});
        }
        if (c.qk_norm) {
          out.push_back({hf + "self_attn.q_norm.weight", loom + "attention.q_norm"});
          out.push_back({hf + "self_attn.k_norm.weight", loom + "attention.k_norm"});
        }
        out.push_back({hf + "post_attention_layernorm.weight", loom + "ln2.weight"});
        if (c.moe.layer_is_moe(i)) {
          const bool mixtral = weight_names(c) == WeightNames::kMixtral;
          const std::string moe = hf + (mixtral ? "block_sparse_moe." : "mlp.");
          out.push_back({moe + "gate.weight", loom + "mlp.router.weight"});
          const std::vector<std::pair<std::string, std::string>> mats =
              mixtral ? std::vector<std::pair<std::string, std::string>>{{"w1", "gate"}, {"w3", "up"}, {"w2", "down"}}
                      : std::vector<std::pair<std::string, std::string>>{{"gate_proj", "gate"}, {"up_proj", "up"},
                                                                         {"down_proj", "down"}};
          for (int64_t e = 0; e < c.moe.num_experts; ++e)
            for (const auto& [h, l] : mats) {
              Piece piece{moe + "experts." + std::to_string(e) + "." + h + ".weight", loom + "mlp.experts." + l};
              piece.index = e;
              out.push_back(piece);
            }
          continue;
        }
        for (const auto& kind : kinds)
          for (const char* m : {"gate", "up", "down"})
            out.push_back({hf + "mlp." + m + "_proj." + kind, loom + "mlp." + m + "." + kind});
      }
      out.push_back({"model.norm.weight", "final_norm.weight"});
      break;
    }
  }
  if (!c.tie_embeddings && weight_names(c) != WeightNames::kLoom) out.push_back({"lm_head.weight", "lm_head.weight"});
  return out;
}

// The part of the parameter a piece covers (a view).
torch::Tensor slice(const torch::Tensor& param, const Piece& piece) {
  if (piece.index >= 0) return param.select(0, piece.index);
  return piece.rows < 0 ? param : param.narrow(0, piece.row_begin, piece.rows);
}

std::map<std::string, torch::Tensor> parameters_by_name(torch::nn::Module& model) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : model.named_parameters()) out[p.key()] = p.value();
  return out;
}

// Tensors a Hugging Face file may hold that the model rightly has no place for.
bool ignorable(WeightNames names, const ModelConfig& c, const std::string& name) {
  auto ends_with = [&](const std::string& suffix) {
    return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (names == WeightNames::kLoom) return false;
  if (name == "lm_head.weight" && c.tie_embeddings) return true;  // some writers keep the tied copy
  if (names == WeightNames::kGpt2) return ends_with(".attn.bias") || ends_with(".attn.masked_bias");
  return ends_with("rotary_emb.inv_freq");
}

// Under pipeline parallelism: a parameter of the whole model (in loom's names) that another stage holds.
bool held_by_another_stage(GptImpl& model, const std::map<std::string, torch::Tensor>& params,
                           const std::string& name) {
  const ModelStage& stage = model.stage();
  if ((stage.first && stage.last) || params.count(name) > 0) return false;
  const std::string blocks = "blocks.";
  if (name.rfind(blocks, 0) == 0) {
    const auto dot = name.find('.', blocks.size());
    const std::string index = name.substr(blocks.size(), dot == std::string::npos ? dot : dot - blocks.size());
    if (index.empty() || index.find_first_not_of("0123456789") != std::string::npos) return false;
    const int64_t i = std::stoll(index);
    return i < model.config().n_layers && (i < stage.first_block || i >= stage.end_block);
  }
  const std::string top = name.substr(0, name.find('.'));
  return top == "token_embedding" || top == "position_embedding" || top == "final_norm" || top == "lm_head";
}

}  // namespace

WeightNames weight_names(const ModelConfig& c) {
  const bool full_attention = c.attention_window == 0;
  if (c.position == PositionKind::kLearned && c.norm == NormKind::kLayerNorm && c.activation == Activation::kGelu && c.bias && full_attention &&
      c.kv_heads() == c.n_heads)
    return WeightNames::kGpt2;
  if (c.position == PositionKind::kRope && c.norm == NormKind::kRmsNorm && c.activation == Activation::kSwiglu &&
      full_attention && c.rope_scaling != RopeScaling::kNtk) {
    const MoeConfig& e = c.moe;
    if (!e.enabled()) return c.qk_norm ? WeightNames::kLoom : WeightNames::kLlama;
    // The routers and layouts transformers' MoE models have (models/moe.h; no expert bias, dropless).
    const bool plain = e.shared_experts == 0 && e.bias_update_rate == 0 && e.capacity_factor == 0 && !c.bias;
    if (plain && !c.qk_norm && e.router == MoeRouter::kTopkSoftmax && e.every == 1 && e.first_dense == 0)
      return WeightNames::kMixtral;
    if (plain && c.qk_norm && e.router == MoeRouter::kSoftmaxTopk) return WeightNames::kQwen3Moe;
  }
  return WeightNames::kLoom;
}

std::string weight_names_label(WeightNames names) {
  switch (names) {
    case WeightNames::kGpt2: return "gpt2";
    case WeightNames::kLlama: return "llama";
    case WeightNames::kMixtral: return "mixtral";
    case WeightNames::kQwen3Moe: return "qwen3_moe";
    case WeightNames::kLoom: break;
  }
  return "loom";
}

std::vector<std::pair<std::string, torch::Tensor>> export_pieces(torch::nn::Module& model,
                                                                 const std::vector<HfPiece>& pieces,
                                                                 const std::string& label) {
  const auto params = parameters_by_name(model);
  std::vector<std::pair<std::string, torch::Tensor>> out;
  std::set<std::string> covered;
  for (const auto& piece : pieces) {
    auto t = slice(params.at(piece.param).detach(), piece);
    out.emplace_back(piece.name, (piece.transpose ? t.t() : t).to(torch::kCPU).contiguous());
    covered.insert(piece.param);
  }
  LOOM_CHECK(covered.size() == params.size(), "internal: the ", label, " name mapping misses ",
             params.size() - covered.size(), " parameters");
  return out;
}

std::vector<std::pair<std::string, torch::Tensor>> export_weights(GptImpl& model) {
  return export_pieces(model, pieces(model.config(), model), weight_names_label(weight_names(model.config())));
}

void import_pieces(torch::nn::Module& model, Communicator* tp, const std::vector<HfPiece>& pieces,
                   std::map<std::string, torch::Tensor> stored, const std::string& source, const std::string& label,
                   const std::function<bool(const std::string&)>& ignorable) {
  // The file holds the whole model. A pipeline stage takes only its own parameters; a tensor-parallel
  // parameter is assembled at its full size and then cut into this rank's shard (ShardLayout), so that
  // every layout starts from the same weights.
  const auto params = parameters_by_name(model);
  const auto layouts = shard_layouts(model);
  std::map<std::string, torch::Tensor> full;  // the sharded parameters at full size, on the CPU
  for (const auto& [name, layout] : layouts) {
    auto shape = params.at(name).sizes().vec();
    shape[static_cast<size_t>(layout.dim)] = 0;
    for (const int64_t section : layout.sections) shape[static_cast<size_t>(layout.dim)] += section;
    full[name] = torch::empty(shape, params.at(name).options().device(torch::kCPU));
  }
  torch::NoGradGuard no_grad;
  for (const auto& piece : pieces) {
    auto found = stored.find(piece.name);
    if (params.count(piece.param) == 0) {  // another pipeline stage's
      if (found != stored.end()) stored.erase(found);
      continue;
    }
    LOOM_CHECK(found != stored.end(), source, ": no tensor ", piece.name, " (the model.* config names its weights as ",
               label, ", see models/hf_weights.h)");
    const torch::Tensor& t = found->second;
    const auto whole = full.find(piece.param);
    auto target = slice(whole != full.end() ? whole->second : params.at(piece.param), piece);
    const auto expected = piece.transpose ? target.t().sizes() : target.sizes();
    LOOM_CHECK(t.sizes() == expected, source, ": tensor ", piece.name, " has shape ", t.sizes(),
               " but the model.* config needs ", expected);
    LOOM_CHECK(t.is_floating_point(), source, ": tensor ", piece.name, " has dtype ", t.scalar_type(),
               ", not a floating-point type");
    target.copy_(piece.transpose ? t.t() : t);
    stored.erase(found);
  }
  for (const auto& [name, whole] : full)
    params.at(name).copy_(take_shard(whole, layouts.at(name), tp_size(tp), tp != nullptr ? tp->rank() : 0));
  for (const auto& [name, tensor] : stored)
    LOOM_CHECK(ignorable(name), source, ": tensor ", name, " has no place in the model (", label,
               " names; does the model.* config match the file?)");
}

void import_weights(GptImpl& model, const SafetensorsFile& file, const std::string& source) {
  const ModelConfig& c = model.config();
  const WeightNames names = weight_names(c);
  const auto all = pieces(c, model);
  // GPT-2 files come with and without the "transformer." prefix: a name without it takes it.
  std::set<std::string> names_of_pieces;
  for (const auto& piece : all) names_of_pieces.insert(piece.name);
  std::map<std::string, torch::Tensor> stored;
  for (const auto& [name, tensor] : file.tensors) {
    const std::string prefixed = kGpt2Prefix + name;
    stored[names == WeightNames::kGpt2 && names_of_pieces.count(prefixed) > 0 ? prefixed : name] = tensor;
  }
  const auto params = parameters_by_name(model);
  import_pieces(model, model.tp_group(), all, std::move(stored), source, weight_names_label(names),
                [&](const std::string& name) {
                  return ignorable(names, c, name) ||
                         (names == WeightNames::kLoom && held_by_another_stage(model, params, name));
                });
}

std::filesystem::path hf_weights_file(const std::filesystem::path& path) {
  // A Hugging Face model directory (save_pretrained's, or loom export's) holds its weights in model.safetensors.
  if (!std::filesystem::is_directory(path)) return path;
  const auto file = path / "model.safetensors";
  LOOM_CHECK(std::filesystem::is_regular_file(file), path.string(), " is a directory without model.safetensors "
             "(save the model with safe_serialization, or point model.init_from at the .safetensors file)");
  return file;
}

void load_weights_file(GptImpl& model, const std::filesystem::path& path) {
  const auto file = hf_weights_file(path);
  import_weights(model, read_safetensors(file), file.string());
}

nlohmann::ordered_json hf_config_json(const ModelConfig& c, const SpecialTokenIds& tokens) {
  const auto id = [](const std::optional<int64_t>& t) { return t ? nlohmann::ordered_json(*t) : nlohmann::ordered_json(); };
  nlohmann::ordered_json j;
  switch (weight_names(c)) {
    case WeightNames::kGpt2:
      j = {{"architectures", {"GPT2LMHeadModel"}}, {"model_type", "gpt2"}, {"vocab_size", c.vocab_size},
           {"n_positions", c.max_seq_len}, {"n_ctx", c.max_seq_len}, {"n_embd", c.d_model}, {"n_layer", c.n_layers},
           {"n_head", c.n_heads}, {"n_inner", c.ffn_dim()}, {"activation_function", "gelu_new"},
           {"layer_norm_epsilon", c.norm_eps}, {"resid_pdrop", c.dropout}, {"embd_pdrop", c.dropout},
           {"attn_pdrop", c.dropout}, {"initializer_range", c.init_std}, {"tie_word_embeddings", c.tie_embeddings},
           {"bos_token_id", id(tokens.bos)}, {"eos_token_id", id(tokens.eos)}, {"pad_token_id", id(tokens.pad)},
           {"dtype", "float32"}};
      break;
    case WeightNames::kLlama: {
      nlohmann::ordered_json rope = {{"rope_type", "default"}, {"rope_theta", c.rope_theta}};
      if (c.rope_scaling == RopeScaling::kLinear) rope = {{"rope_type", "linear"}, {"rope_theta", c.rope_theta}, {"factor", c.rope_scaling_factor}};
      j = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"vocab_size", c.vocab_size},
           {"hidden_size", c.d_model}, {"intermediate_size", c.ffn_dim()}, {"num_hidden_layers", c.n_layers},
           {"num_attention_heads", c.n_heads}, {"num_key_value_heads", c.kv_heads()}, {"head_dim", c.head_dim()},
           {"max_position_embeddings", c.max_seq_len}, {"rms_norm_eps", c.norm_eps}, {"rope_theta", c.rope_theta},
           {"rope_parameters", rope}, {"attention_bias", c.bias}, {"mlp_bias", c.bias}, {"hidden_act", "silu"},
           {"attention_dropout", c.dropout}, {"initializer_range", c.init_std}, {"tie_word_embeddings", c.tie_embeddings},
           {"bos_token_id", id(tokens.bos)}, {"eos_token_id", id(tokens.eos)}, {"pad_token_id", id(tokens.pad)},
           {"dtype", "float32"}};
      break;
    }
    case WeightNames::kMixtral:
    case WeightNames::kQwen3Moe: {
      const bool mixtral = weight_names(c) == WeightNames::kMixtral;
      nlohmann::ordered_json rope = {{"rope_type", "default"}, {"rope_theta", c.rope_theta}};
      if (c.rope_scaling == RopeScaling::kLinear) rope = {{"rope_type", "linear"}, {"rope_theta", c.rope_theta}, {"factor", c.rope_scaling_factor}};
      j = {{"architectures", {mixtral ? "MixtralForCausalLM" : "Qwen3MoeForCausalLM"}},
           {"model_type", mixtral ? "mixtral" : "qwen3_moe"}, {"vocab_size", c.vocab_size},
           {"hidden_size", c.d_model}, {"intermediate_size", mixtral ? c.expert_dim() : c.ffn_dim()},
           {"num_hidden_layers", c.n_layers}, {"num_attention_heads", c.n_heads},
           {"num_key_value_heads", c.kv_heads()}, {"head_dim", c.head_dim()},
           {"max_position_embeddings", c.max_seq_len}, {"rms_norm_eps", c.norm_eps}, {"rope_theta", c.rope_theta},
           {"rope_parameters", rope}, {"attention_bias", false}, {"hidden_act", "silu"},
           {"num_experts_per_tok", c.moe.top_k}, {"router_aux_loss_coef", c.moe.aux_loss_coef},
           {"output_router_logits", false}, {"sliding_window", nullptr},
           {"attention_dropout", c.dropout}, {"initializer_range", c.init_std}, {"tie_word_embeddings", c.tie_embeddings},
           {"bos_token_id", id(tokens.bos)}, {"eos_token_id", id(tokens.eos)}, {"pad_token_id", id(tokens.pad)},
           {"dtype", "float32"}};
      if (mixtral) {
        j["num_local_experts"] = c.moe.num_experts;
      } else {
        std::vector<int64_t> dense;
        for (int64_t i = 0; i < c.n_layers; ++i)
          if (!c.moe.layer_is_moe(i)) dense.push_back(i);
        j["num_experts"] = c.moe.num_experts;
        j["moe_intermediate_size"] = c.expert_dim();
        j["norm_topk_prob"] = c.moe.normalize;
        j["decoder_sparse_step"] = 1;
        j["mlp_only_layers"] = dense;
        j["use_sliding_window"] = false;
      }
      break;
    }
    case WeightNames::kLoom: {
      Config config;
      config.model = c;
      nlohmann::ordered_json model;
      visit_fields(config, [&](const std::string& path, auto& member, const char*) {
        if (path.rfind("model.", 0) != 0 || path == "model.init_from") return;
        using Member = std::decay_t<decltype(member)>;
        // Only model.* keys are written; the checks keep other sections' types (a map of special tokens) out.
        if constexpr (is_config_enum_v<Member>) {
          model[path.substr(6)] = enum_name(member);  // as the YAML names it
        } else if constexpr (!std::is_same_v<Member, SpecialTokensSetting>) {
          model[path.substr(6)] = member;
        }
      });
      j = {{"model_type", "loom"}, {"loom_model", model}, {"bos_token_id", id(tokens.bos)},
           {"eos_token_id", id(tokens.eos)}, {"pad_token_id", id(tokens.pad)}};
      break;
    }
  }
  return j;
}

}  // namespace loom
