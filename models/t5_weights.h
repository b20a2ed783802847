// T5's weights under Hugging Face's T5ForConditionalGeneration names (models/hf_weights.h reads and writes
// them), for the encoder-decoder with T5's options (models/encoder_decoder.h): shared (the token embedding),
// {encoder,decoder}.block.N.layer.0.{SelfAttention.{q,k,v,o}, layer_norm}, the decoder's
// layer.1.{EncDecAttention.{q,k,v,o}, layer_norm}, the MLP's layer.{1 encoder, 2 decoder}.{DenseReluDense.
// {wi, wo} (ReLU) or {wi_0, wi_1, wo} (gated GELU), layer_norm}, block.0.layer.0.SelfAttention.
// relative_attention_bias (loom's {encoder,decoder}_relative_bias), {encoder,decoder}.final_layer_norm and,
// untied, lm_head. loom's fused qkv rows [q | k | v] are q, k and v; the gated MLP's gate is wi_0 (the
// GELU'd one), its up wi_1.
// transformers 5 always ties T5's lm_head to `shared` (scale_decoder_outputs says whether the decoder's
// output is scaled): a tied loom T5 is either (model.scale_head true: T5; false: a v1.1 shape saved by it,
// exported untied with lm_head a copy of the embedding, which transformers 4 and 5 read alike);
// an untied one (v1.1 / Flan-T5 files of transformers 4) reads and writes lm_head.weight.
#pragma once
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/encoder_decoder.h"
#include "models/hf_weights.h"

namespace loom {

// The first key (and why) that keeps the config's model from being a T5ForConditionalGeneration; empty: none.
std::pair<std::string, std::string> t5_hf_names_problem(const ModelConfig& config);
// Throws ConfigError naming the key when the config's model has no T5ForConditionalGeneration names; `what`
// names the use ("model.init_from", "loom export").
void check_t5_hf_names(const ModelConfig& config, const std::string& what);
// model.init_from: a T5ForConditionalGeneration .safetensors file or model directory into `model` (its
// stage, its TP shard). A relative bias table (or the directory's config.json) whose bucket count or max
// distance differs from model.relative_buckets / relative_max_distance is refused naming both.
void load_t5_weights(EncoderDecoderImpl& model, const std::filesystem::path& path);
std::vector<std::pair<std::string, torch::Tensor>> export_t5_weights(EncoderDecoderImpl& model);
// config.json of a T5ForConditionalGeneration (T5Config's fields) with the ids loom's translation uses: the
// decoder starts with the tokenizer's bos (loom's pair batches: 1), ends at its eos (2), pads with 0.
nlohmann::ordered_json t5_config_json(const ModelConfig& config, const SpecialTokenIds& tokens);

}  // namespace loom
