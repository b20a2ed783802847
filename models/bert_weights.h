// BERT's weights under Hugging Face's BertForMaskedLM names (models/hf_weights.h reads and writes them):
// bert.embeddings.{word,position,token_type}_embeddings, bert.embeddings.LayerNorm,
// bert.encoder.layer.N.{attention.self.{query,key,value}, attention.output.{dense,LayerNorm},
// intermediate.dense, output.{dense,LayerNorm}}, cls.predictions.{transform.dense, transform.LayerNorm, bias}
// and, untied, cls.predictions.decoder.{weight, bias} (transformers then adds the decoder's bias). loom's fused qkv rows [q | k | v] are query, key and value;
// ln1 / ln2 are the post-norm block's attention.output.LayerNorm / output.LayerNorm. Only the post-norm
// model with biases, LayerNorm and learned positions has these names (a pre-norm BERT is refused). A classifier
// (model.num_labels > 0) is BertForSequenceClassification: the encoder's names, bert.pooler.dense and classifier;
// its model.init_from may also be a BertForMaskedLM, whose encoder it takes (pooler and classifier stay fresh).
#pragma once
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/bert.h"
#include "models/hf_weights.h"

namespace loom {

// Throws ConfigError naming the key when the config's BERT has no BertForMaskedLM names; `what` names the
// use ("model.init_from", "loom export").
void check_bert_hf_names(const ModelConfig& config, const std::string& what);
// model.init_from: a BertForMaskedLM .safetensors file or model directory into `model` (its stage, its TP shard).
void load_bert_weights(BertImpl& model, const std::filesystem::path& path);
std::vector<std::pair<std::string, torch::Tensor>> export_bert_weights(BertImpl& model);
// config.json of a BertForMaskedLM (BertConfig's fields), with the run's pad id.
nlohmann::ordered_json bert_config_json(const ModelConfig& config, const SpecialTokenIds& tokens);

}  // namespace loom
