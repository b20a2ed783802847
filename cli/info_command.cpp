// `loom info CONFIG`: what the configured model costs, from closed forms and without building it: the
// exact parameter count, training FLOPs per token, and memory per rank (weights, gradients, AdamW state,
// activations of the micro-batches a rank keeps) for the config's precision and parallel layout (ZeRO
// stage and hybrid sharding's shard size included), per pipeline stage when parallel.pp > 1, and the bytes a
// rank hands to the data-parallel collectives per step; for decoder-only models the KV cache's bytes per token (what
// loom serve's budget holds). --json for scripts.
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/family_rules.h"
#include "models/paged_kv_cache.h"
#include "models/estimates.h"
#include "models/moe_dispatch.h"
#include "train/run_plan.h"

namespace loom::cli {
namespace {

// 124439808 -> "124,439,808"
std::string grouped(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string gib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return text;
}

// Blocks by the stacks of the family's model (core/family_rules.h): "4", or with an encoder "6 encoder + 6 decoder".
std::string stacks(const ModelShape& shape, int64_t encoder, int64_t decoder) {
  if (shape.encoder_layers == 0) return std::to_string(decoder);
  return std::to_string(encoder) + " encoder + " + std::to_string(decoder) + " decoder";
}

std::string describe_variant(const ModelConfig& m) {
  std::string out = std::string(enum_name(m.norm)) + (m.norm_position == NormPosition::kPost ? " (post-norm)" : "") +
                    ", " + enum_name(m.position) + " positions";
  if (m.scale_embeddings) out += ", embeddings x sqrt(d_model)";
  if (m.position == PositionKind::kRope) {
    char rope[96];
    if (m.rope_scaling == RopeScaling::kNone) {
      std::snprintf(rope, sizeof rope, " (theta %g)", m.rope_theta);
    } else {
      std::snprintf(rope, sizeof rope, " (theta %g, %s scaling x%g)", m.rope_theta, enum_name(m.rope_scaling),
                    m.rope_scaling_factor);
    }
    out += rope;
  }
  if (m.position == PositionKind::kRelative)
    out += " (" + std::to_string(m.relative_buckets) + " buckets to " + std::to_string(m.relative_max_distance) + ")";
  if (m.head_size > 0) out += ", head_dim " + std::to_string(m.head_size);
  if (!m.scale_attention) out += ", unscaled attention";
  out += ", " + std::string(enum_name(m.activation)) + (m.bias ? ", biases" : ", no biases") + (m.tie_embeddings ? ", tied head" : ", untied head") +
         (m.scale_head ? " x d_model^-0.5" : "");
  if (m.attention_window > 0) out += ", window " + std::to_string(m.attention_window);
  return out;
}

int64_t moe_layer_count(const ModelConfig& m) {
  int64_t n = 0;
  for (int64_t i = 0; i < m.n_layers; ++i) n += m.moe.layer_is_moe(i) ? 1 : 0;
  return n;
}

}  // namespace

int info_command(const Argv& argv, const ProcessGroup&) {
  const auto args = parse_args(argv, {}, {"json"}, 1, "loom info CONFIG [--set key.path=value ...] [--json]");
  const RunPlan plan(load_config(args.positional[0], args.sets), 0);  // dp -1: whatever the world leaves
  const Config& config = plan.config();
  const ModelConfig& m = config.model;
  const int64_t parameters = plan.parameters();
  const double flops = plan.flops_per_token();
  const auto& p = config.parallel;
  // Per pipeline stage; the headline figures are the busiest stage's.
  const MemoryEstimate& memory = plan.stage(plan.busiest_stage()).memory;
  auto memory_json = [](const MemoryEstimate& e) {
    return nlohmann::json{{"weights", e.weights},
                          {"gradients", e.gradients},
                          {"optimizer", e.optimizer},
                          {"gathered", e.gathered},
                          {"activations", e.activations},
                          {"pipeline_sends", e.pipeline_sends},
                          {"total", e.total()}};
  };
  // The busiest stage's: the one with the most parameters moves the most.
  CommunicationEstimate communication;
  for (const StagePlan& stage : plan.stages()) {
    const auto& c = stage.communication;
    if (c.all_reduced + c.reduce_scattered + c.all_gathered >
        communication.all_reduced + communication.reduce_scattered + communication.all_gathered)
      communication = c;
  }
  const int64_t micro_batch = plan.micro_batch_size();
  // parallel.ep: the bytes a rank sends by all-to-all per step (every MoE block of its stage, micro-batch, forward
  // and backward; the stage with the most MoE blocks; every TP rank dispatches the same tokens in its ep group;
  // under CP a rank routes its 1 / cp of each sequence, whatever ranks of dp x cp its ep group folds).
  int64_t moe_blocks = 0;
  for (const StagePlan& stage : plan.stages()) moe_blocks = std::max(moe_blocks, stage.blocks.moe);
  const int64_t all_to_all =
      m.moe.enabled() ? moe_blocks * plan.accumulation_steps() *
                            expert_all_to_all_bytes(micro_batch * config.data.seq_len / p.cp, m.moe.top_k, m.d_model,
                                                    config.precision.dtype == Dtype::kFp32 ? 4 : 2, p.ep)
                      : 0;
  const MeshShape& layout = plan.layout();
  // Decoder-only runs: the KV cache of `loom serve` / `loom generate --input` (the pool's own arithmetic), in the
  // weights' dtype, and what the engine's default budget (--kv-mb 256) holds.
  const bool has_kv = m.arch == ModelArch::kGpt;
  const auto kv_dtype = config.precision.param_dtype == ParamDtype::kBf16 ? torch::kBFloat16 : torch::kFloat;
  const int64_t kv_per_token = has_kv ? KVBlockPool::block_bytes(m.n_layers, 1, m.kv_heads(), m.head_dim(), kv_dtype)
                                      : 0;
  constexpr int64_t kDefaultKvBytes = int64_t{256} << 20;
  if (args.flag("json")) {
    nlohmann::json layout_json = nlohmann::json::object();
    for (const auto& [axis, size] : layout.named_sizes()) layout_json[axis] = size;
    nlohmann::json out = {
        {"parameters", parameters},
        {"active_parameters", count_active_parameters(m)},
        {"flops_per_token", flops},
        {"kv_bytes_per_token", has_kv ? nlohmann::json(kv_per_token) : nlohmann::json(nullptr)},
        {"seq_len", config.data.seq_len},
        {"micro_batch_size", micro_batch},
        {"precision", enum_name(config.precision.dtype)},
        {"param_dtype", enum_name(config.precision.param_dtype)},
        {"layout", layout_json},
        {"memory", memory_json(memory)},
        {"communication",
         {{"all_reduced", communication.all_reduced},
          {"reduce_scattered", communication.reduce_scattered},
          {"all_gathered", communication.all_gathered},
          {"all_to_all", all_to_all}}}};
    out["layout"]["zero"] = static_cast<int>(p.zero);
    if (p.pp > 1) {
      out["layout"]["pp_schedule"] = enum_name(p.pp_schedule);
      out["layout"]["microbatches"] = plan.accumulation_steps();
      for (int64_t s = 0; s < p.pp; ++s)
        out["stages"].push_back(
            {{"stage", s}, {"parameters", plan.stage(s).parameters}, {"memory", memory_json(plan.stage(s).memory)}});
    }
    std::cout << out.dump() << std::endl;
    return 0;
  }
  const ModelShape shape = model_shape(m);
  const std::string layers = stacks(shape, shape.encoder_layers, shape.decoder_layers);
  std::printf("model          %s, %s layers, d_model %ld, %ld heads (%ld kv), d_ff %ld, vocab %ld, context %ld\n",
              enum_name(m.arch), layers.c_str(), static_cast<long>(m.d_model), static_cast<long>(m.n_heads),
              static_cast<long>(m.kv_heads()), static_cast<long>(m.ffn_dim()), static_cast<long>(m.vocab_size),
              static_cast<long>(m.max_seq_len));
  std::printf("variant        %s\n", describe_variant(m).c_str());
  if (m.moe.enabled())
    std::printf("parameters     %s (%s active per token: %ld of %ld experts in %ld MoE layers)\n",
                grouped(parameters).c_str(), grouped(count_active_parameters(m)).c_str(),
                static_cast<long>(m.moe.top_k), static_cast<long>(m.moe.num_experts),
                static_cast<long>(moe_layer_count(m)));
  else
    std::printf("parameters     %s\n", grouped(parameters).c_str());
  std::printf("FLOPs/token    %.4g (training, seq_len %ld)\n", flops, static_cast<long>(config.data.seq_len));
  if (has_kv)
    std::printf("KV cache       %s bytes per token (%s); loom serve's default --kv-mb 256 holds %s tokens, %s of the "
                "full context\n",
                grouped(kv_per_token).c_str(), kv_dtype == torch::kBFloat16 ? "bf16" : "fp32",
                grouped(kDefaultKvBytes / kv_per_token).c_str(),
                grouped(kDefaultKvBytes / kv_per_token / m.max_seq_len).c_str());
  const std::string zero = p.zero != ZeroStage::kNone ? std::string(" with ZeRO-") + enum_name(p.zero) : "";
  std::printf("memory/rank    %s, %s%s, micro-batch %ld x %ld tokens\n", config.precision.label().c_str(),
              layout.describe(" x ", " ").c_str(), zero.c_str(), static_cast<long>(micro_batch),
              static_cast<long>(config.data.seq_len));
  const std::pair<const char*, int64_t> rows[] = {{"weights", memory.weights},
                                                  {"gradients", memory.gradients},
                                                  {"optimizer", memory.optimizer},
                                                  {"gathered", memory.gathered},
                                                  {"activations", memory.activations},
                                                  {"pipeline sends", memory.pipeline_sends},
                                                  {"total", memory.total()}};
  for (const auto& [name, bytes] : rows)
    std::printf("  %-14s %10s  (%s bytes)\n", name, gib(bytes).c_str(), grouped(bytes).c_str());
  if (const int64_t dp = plan.dp(); dp * p.cp > 1) {
    const int64_t shard_dp = p.zero_shard_dp(dp);
    // Hybrid sharding: the reduce-scatters and all-gathers within the shard group, the all-reduce over replicas.
    const std::string groups = shard_dp == dp ? ""
                               : "; reduce-scattered and all-gathered within " + std::to_string(shard_dp) +
                                     (p.cp > 1 ? " x cp " + std::to_string(p.cp) : "") + " ranks, all-reduced over " +
                                     std::to_string(dp / shard_dp) + " replicas";
    std::printf("%s collectives per step and rank (buffer bytes%s)\n", p.cp > 1 ? "dp x cp" : "dp", groups.c_str());
    const std::pair<const char*, int64_t> moved[] = {{"all-reduced", communication.all_reduced},
                                                     {"reduce-scattered", communication.reduce_scattered},
                                                     {"all-gathered", communication.all_gathered}};
    for (const auto& [name, bytes] : moved)
      std::printf("  %-16s %8s  (%s bytes)\n", name, gib(bytes).c_str(), grouped(bytes).c_str());
  }
  if (all_to_all > 0)
    std::printf("ep all-to-all   %8s per step and rank (%s bytes: ep %ld, each routed slot out and back, forward and backward)\n",
                gib(all_to_all).c_str(), grouped(all_to_all).c_str(), static_cast<long>(p.ep));
  if (p.pp > 1) {
    std::printf("pipeline       %ld stages, %s, %ld micro-batches per step (the rows above: the busiest stage)\n",
                static_cast<long>(p.pp), enum_name(p.pp_schedule),
                static_cast<long>(plan.accumulation_steps()));
    for (int64_t s = 0; s < p.pp; ++s) {
      const auto& e = plan.stage(s).memory;
      const auto& blocks = plan.stage(s).blocks;
      const std::string held = stacks(shape, blocks.encoder, blocks.decoder) + " blocks";
      std::printf("  stage %-6ld %10s  %s, %s parameters, activations %s\n", static_cast<long>(s),
                  gib(e.total()).c_str(), held.c_str(), grouped(plan.stage(s).parameters).c_str(),
                  gib(e.activations).c_str());
    }
  }
  return 0;
}

}  // namespace loom::cli
