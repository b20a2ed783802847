#include "models/t5_weights.h"

#include <fstream>

#include "core/error.h"
#include "models/safetensors.h"

namespace loom {
namespace {

// exporting: a tied head without T5's scale also as lm_head.weight (config.json then says untied, see
// t5_config_json).
std::vector<HfPiece> t5_pieces(const ModelConfig& c, bool exporting) {
  const int64_t inner = c.n_heads * c.head_dim();
  std::vector<HfPiece> out = {{"shared.weight", "token_embedding.weight"},
                              {"encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
                               "encoder_relative_bias.weight"},
                              {"decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
                               "decoder_relative_bias.weight"},
                              {"encoder.final_layer_norm.weight", "encoder_norm.weight"},
                              {"decoder.final_layer_norm.weight", "decoder_norm.weight"}};
  if (!c.tie_embeddings) out.push_back({"lm_head.weight", "lm_head.weight"});
  if (c.tie_embeddings && !c.scale_head && exporting) out.push_back({"lm_head.weight", "token_embedding.weight"});
  auto attention = [&](const std::string& hf, const std::string& loom) {
    int64_t row = 0;
    for (const char* part : {"q", "k", "v"}) {
      out.push_back({hf + "." + part + ".weight", loom + ".qkv.weight", false, row, inner});
      row += inner;
    }
    out.push_back({hf + ".o.weight", loom + ".out.weight"});
  };
  auto mlp = [&](const std::string& hf, const std::string& loom) {
    if (c.gated_mlp()) {
      out.push_back({hf + ".DenseReluDense.wi_0.weight", loom + ".mlp.gate.weight"});
      out.push_back({hf + ".DenseReluDense.wi_1.weight", loom + ".mlp.up.weight"});
    } else {
      out.push_back({hf + ".DenseReluDense.wi.weight", loom + ".mlp.up.weight"});
    }
    out.push_back({hf + ".DenseReluDense.wo.weight", loom + ".mlp.down.weight"});
    out.push_back({hf + ".layer_norm.weight", loom + ".ln2.weight"});
  };
  for (int64_t i = 0; i < c.encoder_layers(); ++i) {
    const std::string hf = "encoder.block." + std::to_string(i) + ".layer.", loom = "encoder." + std::to_string(i);
    attention(hf + "0.SelfAttention", loom + ".attention");
    out.push_back({hf + "0.layer_norm.weight", loom + ".ln1.weight"});
    mlp(hf + "1", loom);
  }
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string hf = "decoder.block." + std::to_string(i) + ".layer.", loom = "decoder." + std::to_string(i);
    attention(hf + "0.SelfAttention", loom + ".attention");
    out.push_back({hf + "0.layer_norm.weight", loom + ".ln1.weight"});
    attention(hf + "1.EncDecAttention", loom + ".cross_attention");
    out.push_back({hf + "1.layer_norm.weight", loom + ".ln_cross.weight"});
    mlp(hf + "2", loom);
  }
  return out;
}

// What T5Config.feed_forward_proj names loom's activation; null: none.
const char* feed_forward_proj(Activation activation) {
  switch (activation) {
    case Activation::kRelu: return "relu";
    case Activation::kGeglu: return "gated-gelu";  // gelu_new: the tanh approximation, as loom's geglu
    default: return nullptr;
  }
}

}  // namespace

std::pair<std::string, std::string> t5_hf_names_problem(const ModelConfig& c) {
  if (c.position != PositionKind::kRelative) return {"model.position", "T5 has relative positions"};
  if (c.norm != NormKind::kRmsNorm) return {"model.norm", "T5's norms are rmsnorm"};
  if (c.norm_position != NormPosition::kPre) return {"model.norm_position", "T5's blocks are pre-norm"};
  if (c.bias) return {"model.bias", "T5 has no biases: set it false"};
  if (c.scale_attention) return {"model.scale_attention", "T5 does not scale its attention scores: set it false"};
  if (c.scale_embeddings) return {"model.scale_embeddings", "T5 does not scale its embeddings: set it false"};
  if (c.kv_heads() != c.n_heads) return {"model.n_kv_heads", "T5 has n_heads key/value heads"};
  if (c.attention_window != 0) return {"model.attention_window", "T5 attends to every position"};
  if (feed_forward_proj(c.activation) == nullptr)
    return {"model.activation", "T5's MLP is relu (T5) or geglu (T5 v1.1, Flan-T5's gated-gelu)"};
  return {};
}

void check_t5_hf_names(const ModelConfig& c, const std::string& what) {
  const auto [key, why] = t5_hf_names_problem(c);
  if (!key.empty()) throw ConfigError(what + ": " + key + ": " + why + "; T5ForConditionalGeneration has no names for this model");
}

void load_t5_weights(EncoderDecoderImpl& model, const std::filesystem::path& path) {
  const ModelConfig& c = model.config();
  check_t5_hf_names(c, "model.init_from");
  const auto file = hf_weights_file(path);
  // A directory's config.json says the bucketing the table was trained with; the table's rows say the count.
  const auto config_json = file.parent_path() / "config.json";
  if (std::filesystem::is_regular_file(config_json)) {
    std::ifstream in(config_json);
    const auto j = nlohmann::json::parse(in, nullptr, false);
    const std::pair<const char*, std::pair<const char*, int64_t>> keys[] = {
        {"relative_attention_num_buckets", {"model.relative_buckets", c.relative_buckets}},
        {"relative_attention_max_distance", {"model.relative_max_distance", c.relative_max_distance}}};
    for (const auto& [hf, loom] : keys)
      if (j.is_object() && j.contains(hf) && j[hf].is_number_integer() && j[hf].get<int64_t>() != loom.second)
        throw ConfigError("model.init_from: " + config_json.string() + " has " + hf + "=" +
                          std::to_string(j[hf].get<int64_t>()) + " but " + loom.first + "=" +
                          std::to_string(loom.second) + ": set " + loom.first + " to the file's");
  }
  std::map<std::string, torch::Tensor> stored;
  for (const auto& [name, tensor] : read_safetensors(file).tensors) stored[name] = tensor;
  for (const char* stack : {"encoder", "decoder"}) {
    const std::string name = std::string(stack) + ".block.0.layer.0.SelfAttention.relative_attention_bias.weight";
    const auto found = stored.find(name);
    if (found != stored.end() && found->second.dim() == 2 && found->second.size(0) != c.relative_buckets)
      throw ConfigError("model.init_from: " + file.string() + ": " + name + " has " +
                        std::to_string(found->second.size(0)) + " buckets but model.relative_buckets=" +
                        std::to_string(c.relative_buckets) + ": set model.relative_buckets to the file's");
  }
  // An untied head from a file of transformers 5 (which ties T5's lm_head always, saving only `shared`).
  if (!c.tie_embeddings && stored.count("lm_head.weight") == 0 && stored.count("shared.weight") > 0)
    stored["lm_head.weight"] = stored["shared.weight"];
  import_pieces(model, model.tp_group(), t5_pieces(c, false), std::move(stored), file.string(), "T5ForConditionalGeneration",
                [&](const std::string& name) {
                  // The tied copies of the embedding.
                  return name == "encoder.embed_tokens.weight" || name == "decoder.embed_tokens.weight" ||
                         (c.tie_embeddings && name == "lm_head.weight");
                });
}

std::vector<std::pair<std::string, torch::Tensor>> export_t5_weights(EncoderDecoderImpl& model) {
  check_t5_hf_names(model.config(), "loom export");
  return export_pieces(model, t5_pieces(model.config(), true), "T5ForConditionalGeneration");
}

nlohmann::ordered_json t5_config_json(const ModelConfig& c, const SpecialTokenIds& tokens) {
  return {{"architectures", {"T5ForConditionalGeneration"}},
          {"model_type", "t5"},
          {"vocab_size", c.vocab_size},
          {"d_model", c.d_model},
          {"d_kv", c.head_dim()},
          {"d_ff", c.ffn_dim()},
          {"num_layers", c.encoder_layers()},
          {"num_decoder_layers", c.n_layers},
          {"num_heads", c.n_heads},
          {"relative_attention_num_buckets", c.relative_buckets},
          {"relative_attention_max_distance", c.relative_max_distance},
          {"dropout_rate", c.dropout},
          {"layer_norm_epsilon", c.norm_eps},
          {"initializer_factor", 1.0},
          {"feed_forward_proj", feed_forward_proj(c.activation)},
          {"is_encoder_decoder", true},
          // transformers 4 scales the decoder's output exactly when the head is tied, 5 when tie_word_embeddings
          // is not false (scale_decoder_outputs; it ties the head always): an unscaled tied head is written
          // untied, lm_head.weight a copy of the embedding, which both read alike.
          {"tie_word_embeddings", c.scale_head},
          {"scale_decoder_outputs", c.scale_head},
          {"decoder_start_token_id", tokens.bos.value_or(1)},
          {"eos_token_id", tokens.eos.value_or(2)},
          {"pad_token_id", tokens.pad.value_or(0)},
          {"dtype", "float32"}};
}

}  // namespace loom
