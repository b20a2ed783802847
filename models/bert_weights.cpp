#include "models/bert_weights.h"

#include "core/error.h"
#include "models/safetensors.h"

namespace loom {
namespace {

// Which head a weights file's names cover: BertForMaskedLM's, BertForSequenceClassification's, or none (a
// classifier starting from a pretrained BertForMaskedLM: its pooler and classifier keep their fresh init).
enum class BertHead { kMaskedLm, kClassifier, kNone };

// exporting: also the names transformers reads no value from (an untied head's cls.predictions.bias).
std::vector<HfPiece> bert_pieces(const ModelConfig& c, bool exporting, BertHead head) {
  const int64_t C = c.d_model;
  std::vector<HfPiece> out = {{"bert.embeddings.word_embeddings.weight", "token_embedding.weight"},
                              {"bert.embeddings.position_embeddings.weight", "position_embedding.weight"},
                              {"bert.embeddings.token_type_embeddings.weight", "token_type_embedding.weight"}};
  auto both = [&out](const std::string& hf, const std::string& loom) {
    for (const char* kind : {".weight", ".bias"}) out.push_back({hf + kind, loom + kind});
  };
  both("bert.embeddings.LayerNorm", "embedding_norm");
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string hf = "bert.encoder.layer." + std::to_string(i) + ".", loom = "blocks." + std::to_string(i) + ".";
    int64_t row = 0;
    for (const char* part : {"query", "key", "value"}) {
      for (const char* kind : {".weight", ".bias"})
        out.push_back({hf + "attention.self." + part + kind, loom + "attention.qkv" + kind, false, row, C});
      row += C;
    }
    both(hf + "attention.output.dense", loom + "attention.out");
    both(hf + "attention.output.LayerNorm", loom + "ln1");
    both(hf + "intermediate.dense", loom + "mlp.up");
    both(hf + "output.dense", loom + "mlp.down");
    both(hf + "output.LayerNorm", loom + "ln2");
  }
  if (head == BertHead::kClassifier) {
    both("bert.pooler.dense", "pooler");
    both("classifier", "classifier");
  }
  if (head != BertHead::kMaskedLm) return out;
  both("cls.predictions.transform.dense", "mlm_dense");
  both("cls.predictions.transform.LayerNorm", "mlm_norm");
  // transformers ties the decoder's bias to cls.predictions.bias with the embedding, and unties both apart:
  // an untied head adds cls.predictions.decoder.bias (cls.predictions.bias is then read by nothing).
  if (c.tie_embeddings || exporting) out.push_back({"cls.predictions.bias", "mlm_bias.bias"});
  if (!c.tie_embeddings) {
    out.push_back({"cls.predictions.decoder.weight", "lm_head.weight"});
    out.push_back({"cls.predictions.decoder.bias", "mlm_bias.bias"});
  }
  return out;
}

const char* hidden_act(Activation activation) {
  switch (activation) {
    case Activation::kGeluErf: return "gelu";
    case Activation::kGelu: return "gelu_new";  // the tanh approximation
    case Activation::kRelu: return "relu";
    default: return nullptr;
  }
}

}  // namespace

void check_bert_hf_names(const ModelConfig& c, const std::string& what) {
  auto refuse = [&](const std::string& key, const std::string& why) {
    throw ConfigError(what + ": " + key + ": " + why + "; BertForMaskedLM has no names for this BERT");
  };
  if (c.norm_position != NormPosition::kPost) refuse("model.norm_position", "BERT's blocks are post-norm");
  if (c.norm != NormKind::kLayerNorm) refuse("model.norm", "BERT's norms are layernorm");
  if (!c.bias) refuse("model.bias", "BERT's layers have biases");
  if (c.kv_heads() != c.n_heads || c.head_dim() * c.n_heads != c.d_model)
    refuse("model.n_kv_heads", "BERT's attention has n_heads key/value heads of d_model / n_heads");
  if (hidden_act(c.activation) == nullptr) refuse("model.activation", "BERT's MLP is ungated (gelu_erf, gelu, relu)");
}

void load_bert_weights(BertImpl& model, const std::filesystem::path& path) {
  const ModelConfig& c = model.config();
  check_bert_hf_names(c, "model.init_from");
  const auto file = hf_weights_file(path);
  std::map<std::string, torch::Tensor> stored;
  for (const auto& [name, tensor] : read_safetensors(file).tensors) stored[name] = tensor;
  // A classifier reads BertForSequenceClassification's file whole, or a pretrained BertForMaskedLM's encoder.
  const bool classifier = c.num_labels > 0;
  const BertHead head = !classifier ? BertHead::kMaskedLm
                        : stored.count("classifier.weight") ? BertHead::kClassifier
                                                            : BertHead::kNone;
  const char* label = head == BertHead::kClassifier ? "BertForSequenceClassification" : "BertForMaskedLM";
  import_pieces(model, model.tp_group(), bert_pieces(c, false, head), std::move(stored), file.string(), label,
                [&](const std::string& name) {
                  const bool masked_lm_head = name.rfind("cls.", 0) == 0;
                  if (head == BertHead::kNone)
                    return masked_lm_head || name.rfind("bert.pooler.", 0) == 0 || name == "bert.embeddings.position_ids";
                  // The decoder's tied copies (or untied, the unread bias), BertModel's pooler and position ids.
                  const bool tied_copy = name == "cls.predictions.decoder.weight" || name == "cls.predictions.decoder.bias";
                  return (c.tie_embeddings ? tied_copy : name == "cls.predictions.bias") ||
                         (head == BertHead::kMaskedLm && name.rfind("bert.pooler.", 0) == 0) ||
                         name == "bert.embeddings.position_ids";
                });
}

std::vector<std::pair<std::string, torch::Tensor>> export_bert_weights(BertImpl& model) {
  check_bert_hf_names(model.config(), "loom export");
  const bool classifier = model.config().num_labels > 0;
  return export_pieces(model, bert_pieces(model.config(), true, classifier ? BertHead::kClassifier : BertHead::kMaskedLm),
                       classifier ? "BertForSequenceClassification" : "BertForMaskedLM");
}

nlohmann::ordered_json bert_config_json(const ModelConfig& c, const SpecialTokenIds& tokens) {
  nlohmann::ordered_json config = {{"architectures", {c.num_labels > 0 ? "BertForSequenceClassification" : "BertForMaskedLM"}},
          {"model_type", "bert"},
          {"vocab_size", c.vocab_size},
          {"hidden_size", c.d_model},
          {"num_hidden_layers", c.n_layers},
          {"num_attention_heads", c.n_heads},
          {"intermediate_size", c.ffn_dim()},
          {"hidden_act", hidden_act(c.activation)},
          {"hidden_dropout_prob", c.dropout},
          {"attention_probs_dropout_prob", c.dropout},
          {"max_position_embeddings", c.max_seq_len},
          {"type_vocab_size", kBertTokenTypes},
          {"initializer_range", c.init_std},
          {"layer_norm_eps", c.norm_eps},
          {"pad_token_id", tokens.pad ? nlohmann::ordered_json(*tokens.pad) : nlohmann::ordered_json()},
          {"tie_word_embeddings", c.tie_embeddings},
          {"dtype", "float32"}};
  if (c.num_labels > 0) {  // transformers takes num_labels from id2label
    nlohmann::ordered_json names;
    for (int64_t i = 0; i < c.num_labels; ++i) names[std::to_string(i)] = "LABEL_" + std::to_string(i);
    config["id2label"] = names;
  }
  return config;
}

}  // namespace loom
