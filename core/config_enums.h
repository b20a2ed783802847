// The enum-like config values (model.arch, model.norm, precision.dtype, ...): each an enum class with the
// one table of its names and what each means. Parsing and dumping the config, its error messages
// ("'x' is not one of a, b") and the config reference (docs/config.md) are all made from these tables; code past
// core/ holds the enums, never the strings (a layer compares NormKind::kRmsNorm, not "rmsnorm").
// Adding a value is one line in its table, plus the code that acts on it.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

namespace loom {

enum class ModelArch { kGpt, kTransformer, kBert };
enum class NormKind { kLayerNorm, kRmsNorm };
enum class NormPosition { kPre, kPost };
enum class PositionKind { kLearned, kSinusoidal, kRope, kAlibi, kRelative };
enum class RopeScaling { kNone, kLinear, kNtk };
// How an MoE router turns its logits into each token's experts and weights (models/moe_router.h).
enum class MoeRouter { kTopkSoftmax, kSoftmaxTopk, kSigmoid };
enum class Activation { kGelu, kRelu, kSwiglu, kGeglu, kGeluErf };
enum class SyntheticTask { kNone, kReverse, kCopy };
enum class ScheduleKind { kWarmupCosine, kInverseSqrt, kConstant, kLinear, kWsd };
enum class ActivationCheckpointing { kNone, kFull, kSelective };
enum class Dtype { kFp32, kBf16, kFp16 };
enum class ParamDtype { kFp32, kBf16 };
enum class PipelineSchedule { kGPipe, k1F1B };
// ZeRO's stages: what data-parallel ranks shard between them, each stage also what the one before does
// (parallel/sharding.h: one strategy per stage).
enum class ZeroStage { kNone, kOptimizer, kGradients, kParameters };
enum class DeviceKind { kCpu, kCuda };
enum class CpuAllocatorKind { kCaching, kSystem };
// A loaded tokenizer's type is never kAuto (data/tokenizers/tokenizer.h reads it from the file).
enum class TokenizerType { kAuto, kSentencePiece, kHuggingFace, kTiktoken };

// One value of a config enum: its name in YAML and, for the reference, what it means (may be empty).
template <class E>
struct EnumValue {
  E value;
  const char* name;
  const char* meaning;
};

// EnumTable<E>::values: every value of E, in the order the reference lists them.
template <class E>
struct EnumTable;

template <>
struct EnumTable<ModelArch> {
  static constexpr EnumValue<ModelArch> values[] = {
      {ModelArch::kGpt, "gpt",
       "the decoder-only pre-norm stack: GPT-2, LLaMA and the others are its options below, presets in configs/"},
      {ModelArch::kTransformer, "transformer",
       "the encoder-decoder of Vaswani et al. with one source/target embedding, configs/transformer-*.yaml"},
      {ModelArch::kBert, "bert",
       "the encoder-only BERT trained by masked language modelling, configs/bert-*.yaml; docs/models.md"}};
};
template <>
struct EnumTable<NormKind> {
  static constexpr EnumValue<NormKind> values[] = {{NormKind::kLayerNorm, "layernorm", "weight and bias"},
                                                   {NormKind::kRmsNorm, "rmsnorm", "weight only"}};
};
template <>
struct EnumTable<NormPosition> {
  static constexpr EnumValue<NormPosition> values[] = {
      {NormPosition::kPre, "pre", "x + f(norm(x)) with a final norm after the stack"},
      {NormPosition::kPost, "post",
       "norm(x + f(x)) as in the original Transformer and BERT, no final norm; model.arch=transformer or bert"}};
};
template <>
struct EnumTable<PositionKind> {
  static constexpr EnumValue<PositionKind> values[] = {
      {PositionKind::kLearned, "learned", "a table"},
      {PositionKind::kSinusoidal, "sinusoidal", "fixed, added to the embeddings"},
      {PositionKind::kRope, "rope", "rotary, half-split as Hugging Face LLaMA"},
      {PositionKind::kAlibi, "alibi", "linear attention biases"},
      {PositionKind::kRelative, "relative",
       "T5's learned attention bias per head and log-bucketed relative distance (model.relative_buckets, "
       "model.relative_max_distance; model.arch=transformer), computed once per stack and shared by its layers"}};
};
template <>
struct EnumTable<RopeScaling> {
  static constexpr EnumValue<RopeScaling> values[] = {
      {RopeScaling::kNone, "none", ""},
      {RopeScaling::kLinear, "linear", "positions / factor"},
      {RopeScaling::kNtk, "ntk", "theta * factor^(d/(d-2)), d = head_dim"}};
};
template <>
struct EnumTable<MoeRouter> {
  static constexpr EnumValue<MoeRouter> values[] = {
      {MoeRouter::kTopkSoftmax, "topk_softmax", "the top-k logits, then a softmax over them (Mixtral)"},
      {MoeRouter::kSoftmaxTopk, "softmax_topk", "a softmax over all experts, then the top-k probabilities (Qwen-MoE; renormalised with model.moe.normalize)"},
      {MoeRouter::kSigmoid, "sigmoid", "sigmoid scores, the top-k of them (DeepSeek-V3; renormalised with model.moe.normalize)"}};
};
template <>
struct EnumTable<Activation> {
  static constexpr EnumValue<Activation> values[] = {
      {Activation::kGelu, "gelu", "tanh approximation"},
      {Activation::kRelu, "relu", ""},
      {Activation::kSwiglu, "swiglu", "gated, three matrices: down(silu(gate x) * up x)"},
      {Activation::kGeglu, "geglu", "gated, three matrices: down(gelu(gate x) * up x)"},
      {Activation::kGeluErf, "gelu_erf", "the exact erf GELU, as BERT has it"}};
};
template <>
struct EnumTable<SyntheticTask> {
  static constexpr EnumValue<SyntheticTask> values[] = {{SyntheticTask::kNone, "", "none: the pair files"},
                                                        {SyntheticTask::kReverse, "reverse", "target = source reversed"},
                                                        {SyntheticTask::kCopy, "copy", "target = source"}};
};
template <>
struct EnumTable<ScheduleKind> {
  static constexpr EnumValue<ScheduleKind> values[] = {{ScheduleKind::kWarmupCosine, "warmup_cosine", ""},
                                                       {ScheduleKind::kInverseSqrt, "inverse_sqrt", ""},
                                                       {ScheduleKind::kConstant, "constant", ""},
                                                       {ScheduleKind::kLinear, "linear", ""},
                                                       {ScheduleKind::kWsd, "wsd", "warmup-stable-decay"}};
};
template <>
struct EnumTable<ActivationCheckpointing> {
  static constexpr EnumValue<ActivationCheckpointing> values[] = {
      {ActivationCheckpointing::kNone, "none", ""},
      {ActivationCheckpointing::kFull, "full",
       "each block keeps only its input and is recomputed one residual sub-layer at a time"},
      {ActivationCheckpointing::kSelective, "selective", "each block's MLP is recomputed, attention kept"}};
};
template <>
struct EnumTable<Dtype> {
  static constexpr EnumValue<Dtype> values[] = {{Dtype::kFp32, "fp32", ""},
                                                {Dtype::kBf16, "bf16", "autocast"},
                                                {Dtype::kFp16, "fp16", "autocast with dynamic loss scaling"}};
};
template <>
struct EnumTable<ParamDtype> {
  static constexpr EnumValue<ParamDtype> values[] = {{ParamDtype::kFp32, "fp32", ""},
                                                     {ParamDtype::kBf16, "bf16", "needs precision.dtype=bf16"}};
};
template <>
struct EnumTable<PipelineSchedule> {
  static constexpr EnumValue<PipelineSchedule> values[] = {
      {PipelineSchedule::kGPipe, "gpipe", "all forwards, then all backwards: keeps every micro-batch's activations"},
      {PipelineSchedule::k1F1B, "1f1b",
       "after a warm-up each stage alternates one forward and one backward: at most pp micro-batches in flight"}};
};
template <>
struct EnumTable<ZeroStage> {
  static constexpr EnumValue<ZeroStage> values[] = {
      {ZeroStage::kNone, "0", "every rank keeps everything; gradients all-reduced in buckets"},
      {ZeroStage::kOptimizer, "1",
       "AdamW state (and bf16 parameters' fp32 master) sharded: gradients reduce-scattered, parameters all-gathered"},
      {ZeroStage::kGradients, "2",
       "gradients sharded too: each bucket reduce-scattered in every micro-batch's backward and freed"},
      {ZeroStage::kParameters, "3",
       "parameters sharded too: each block, and the embeddings with the final norms and head, is a unit all-gathered "
       "before its forward and its backward (the next one prefetched) and freed after"}};
};
template <>
struct EnumTable<DeviceKind> {
  static constexpr EnumValue<DeviceKind> values[] = {{DeviceKind::kCpu, "cpu", ""}, {DeviceKind::kCuda, "cuda", ""}};
};
template <>
struct EnumTable<CpuAllocatorKind> {
  static constexpr EnumValue<CpuAllocatorKind> values[] = {
      {CpuAllocatorKind::kCaching, "caching",
       "large blocks kept and reused across steps: no page faults, no heap fragmentation"},
      {CpuAllocatorKind::kSystem, "system", "malloc"}};
};
template <>
struct EnumTable<TokenizerType> {
  static constexpr EnumValue<TokenizerType> values[] = {
      {TokenizerType::kAuto, "auto", "from the file's content"},
      {TokenizerType::kSentencePiece, "sentencepiece", "a SentencePiece .model"},
      {TokenizerType::kHuggingFace, "huggingface", "a Hugging Face tokenizer.json (byte-level BPE)"},
      {TokenizerType::kTiktoken, "tiktoken", "a tiktoken rank file"}};
};

// Whether E is a config enum (has a table).
template <class E, class = void>
struct is_config_enum : std::false_type {};
template <class E>
struct is_config_enum<E, std::void_t<decltype(EnumTable<E>::values)>> : std::true_type {};
template <class E>
inline constexpr bool is_config_enum_v = is_config_enum<E>::value;

// The name of a value ("rmsnorm").
template <class E>
const char* enum_name(E value) {
  for (const auto& v : EnumTable<E>::values)
    if (v.value == value) return v.name;
  return "?";
}

// The value a name stands for; nothing for a name not in the table.
template <class E>
std::optional<E> parse_enum(std::string_view name) {
  for (const auto& v : EnumTable<E>::values)
    if (name == v.name) return v.value;
  return std::nullopt;
}

// "layernorm, rmsnorm": what an error message offers ("reverse, copy (or empty)" where the empty name is one).
template <class E>
std::string enum_choices() {
  std::string out;
  bool empty_allowed = false;
  for (const auto& v : EnumTable<E>::values) {
    if (*v.name == '\0') {
      empty_allowed = true;
      continue;
    }
    out += (out.empty() ? "" : ", ") + std::string(v.name);
  }
  return empty_allowed ? out + " (or empty)" : out;
}

// "`layernorm` (weight and bias), `rmsnorm` (weight only)": the values as the config reference lists them.
template <class E>
std::string enum_reference() {
  std::string out;
  for (const auto& v : EnumTable<E>::values) {
    out += out.empty() ? "" : ", ";
    out += *v.name == '\0' ? std::string("empty") : "`" + std::string(v.name) + "`";
    if (*v.meaning != '\0') out += " (" + std::string(v.meaning) + ")";
  }
  return out;
}

}  // namespace loom
