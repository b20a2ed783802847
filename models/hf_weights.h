// Model weights under Hugging Face's names, in and out of safetensors files. The names follow from the
// config: learned positions + layernorm + gelu (+ biases, full attention) is the GPT-2 family
// (GPT2LMHeadModel); rope + rmsnorm + swiglu (no window, no NTK scaling) is the LLaMA family
// (LlamaForCausalLM, GQA included); anything else keeps loom's own parameter names.
//
// GPT-2: transformer.{wte,wpe,ln_f}, transformer.h.N.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc,
//   mlp.c_proj}. Its Conv1D layers store (in, out) matrices, so those weights are loom's transposed; c_attn is
//   loom's fused qkv as is ([q | k | v] rows become columns). The tied head is absent (lm_head.weight is
//   written only for an untied head). Reading also accepts names without "transformer." (the original
//   OpenAI-converted files) and ignores their attn.bias / attn.masked_bias mask buffers.
// LLaMA: model.embed_tokens, model.layers.N.{input_layernorm, self_attn.{q,k,v,o}_proj,
//   post_attention_layernorm, mlp.{gate,up,down}_proj}, model.norm, lm_head. loom's fused qkv rows
//   [q: H*D | k: K*D | v: K*D] are q_proj, k_proj and v_proj. No q/k row permutation: loom's RoPE already
//   pairs feature i with i + D/2 (rotate_half, models/positions.h), the convention of Hugging Face's files;
//   the permutation HF's conversion script applies maps Meta's interleaved pairs to it.
#pragma once
#include <torch/torch.h>

#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/gpt.h"
#include "models/safetensors.h"

namespace loom {

// One stored tensor: rows [row_begin, row_begin + rows) of a loom parameter (rows < 0: all of it),
// transposed on disk when `transpose`. A family's Hugging Face names are a list of these (the GPT's here,
// BERT's in models/bert_weights.h), which the two functions below read and write for any model.
struct HfPiece {
  std::string name;
  std::string param;
  bool transpose = false;
  int64_t row_begin = 0;
  int64_t rows = -1;
  int64_t index = -1;  // >= 0: the parameter's slice [index] along its first axis (one expert of stacked experts)
};
// Every parameter of `model` under the pieces' names, CPU tensors in the stored layout; `label` names the
// mapping in the internal error of a parameter no piece covers.
std::vector<std::pair<std::string, torch::Tensor>> export_pieces(torch::nn::Module& model,
                                                                 const std::vector<HfPiece>& pieces,
                                                                 const std::string& label);
// Copies every parameter of `model` from the file's tensors `stored` (by the pieces' names; any float dtype,
// converted). The file holds the whole model: a pipeline stage (a model without a piece's parameter) takes
// its own part, a TP rank (tp) its shard of each split parameter. A missing tensor, a shape that differs or a
// stored tensor neither used nor `ignorable` is a loom::Error naming `source`, the tensor and `label`.
void import_pieces(torch::nn::Module& model, Communicator* tp, const std::vector<HfPiece>& pieces,
                   std::map<std::string, torch::Tensor> stored, const std::string& source, const std::string& label,
                   const std::function<bool(const std::string&)>& ignorable);
// path: a .safetensors file, or a Hugging Face model directory -> the file (its model.safetensors).
std::filesystem::path hf_weights_file(const std::filesystem::path& path);

// Mixtral: LLaMA's names with model.layers.N.block_sparse_moe.{gate, experts.E.{w1, w3, w2}} (gate, up, down)
// for every block an MoE (model.moe every 1, first_dense 0, topk_softmax, no shared experts).
// Qwen3-MoE: LLaMA's with self_attn.{q_norm, k_norm} (model.qk_norm) and, in the MoE blocks,
// mlp.{gate, experts.E.{gate_proj, up_proj, down_proj}} (softmax_topk, no shared experts); dense blocks keep
// mlp.{gate,up,down}_proj (config.json lists them as mlp_only_layers).
enum class WeightNames { kLoom, kGpt2, kLlama, kMixtral, kQwen3Moe };
WeightNames weight_names(const ModelConfig& config);
std::string weight_names_label(WeightNames names);  // "loom", "gpt2", "llama", "mixtral", "qwen3_moe"

// The model's parameters under its family's names, as CPU tensors in the stored layout.
std::vector<std::pair<std::string, torch::Tensor>> export_weights(GptImpl& model);

// Copies every parameter of the model from the file's tensors (any float dtype, converted). A missing
// tensor, a shape that differs from the config's, or a tensor the model has no place for is a loom::Error
// naming the file and the tensor. `source` names the file in messages. The file holds the whole model:
// a pipeline stage (ModelStage) loads its own part, a tensor-parallel model its rank's shard of each split
// parameter (model.init_from under any layout starts where one process starts).
void import_weights(GptImpl& model, const SafetensorsFile& file, const std::string& source);
// path: a .safetensors file, or a Hugging Face model directory (its model.safetensors).
void load_weights_file(GptImpl& model, const std::filesystem::path& path);

// The special token ids a config.json names; nullopt writes null (transformers' GPT2Config would otherwise
// assume GPT-2's 50256, outside a smaller vocabulary).
struct SpecialTokenIds {
  std::optional<int64_t> bos, eos, pad;
};

// config.json for the family (GPT2Config / LlamaConfig fields, with the run's tokenizer's special ids); for
// loom names, the model.* keys.
nlohmann::ordered_json hf_config_json(const ModelConfig& config, const SpecialTokenIds& tokens);

}  // namespace loom
