#include "cli/served_model_options.h"

#include <sstream>

#include "cli/speculative_options.h"
#include "core/error.h"
#include "data/pairs/seq2seq_batch.h"
#include "models/paged_kv_cache.h"

namespace loom::cli {

std::shared_ptr<ServedModel> served_model(const LoadedModel& loaded, const Args& args, int64_t tp,
                                          const std::string& command) {
  if (auto gpt = loaded.as<Gpt>()) return served_gpt(gpt);
  auto model = loaded.as<EncoderDecoder>();
  if (!model)
    throw ConfigError(command + " serves decoder-only (GPT-family) and encoder-decoder (model.arch transformer) "
                      "runs, not model.arch=" + std::string(enum_name(loaded.config.model.arch)));
  const std::string why = ": an encoder-decoder (translation) run decodes without it; leave it out";
  for (const auto& name : kSpeculativeOptions)
    if (args.option(name)) throw ConfigError("--" + name + " (speculative decoding) is for decoder-only runs" + why);
  for (const char* flag : {"speculate-adaptive", "prefix-caching", "sequential"})
    if (args.flag(flag)) throw ConfigError(std::string("--") + flag + " is for decoder-only runs" + why);
  if (tp > 1)
    throw ConfigError("--set parallel.tp=" + std::to_string(tp) + ": " + command +
                      " serves an encoder-decoder run whole, in one process" );
  return served_encoder_decoder(model, kBosId);
}

std::string kv_budget_lines(const ServedModel& model, int64_t block_size, int64_t kv_bytes, int64_t tp,
                            int64_t* blocks, int64_t* per_sequence) {
  const auto& c = model.config();
  const auto dtype = model.options().dtype().toScalarType();
  const int64_t layers = model.kv_layers(), heads = model.kv_heads();  // under TP: a rank's share of the heads
  const int64_t block = KVBlockPool::block_bytes(layers, block_size, heads, c.head_dim(), dtype);
  *blocks = kv_bytes / block;
  *per_sequence = (c.max_seq_len + block_size - 1) / block_size;
  std::ostringstream out;
  out << "KV cache: " << block / block_size << " bytes per token (" << layers
      << (model.encodes() ? " decoder self-attention layers" : " layers") << " x keys and values x " << heads
      << " heads x " << c.head_dim() << " x " << c10::elementSize(dtype) << " bytes"
      << (tp > 1 ? ", per rank of " + std::to_string(tp) : "") << ")\n"
      << "budget --kv-mb " << (kv_bytes >> 20) << ": " << *blocks << " blocks of " << block_size << " positions ("
      << block << " bytes each) = " << *blocks * block_size << " tokens of context, " << *blocks / *per_sequence
      << " sequences of the full context (" << c.max_seq_len << " positions, model.max_seq_len)\n";
  if (model.encodes())
    out << "encoded sources (outside the KV budget, one a sequence from admission to its end): "
        << model.encoded_bytes_per_token() << " bytes per source token (" << layers
        << " decoder layers' cross-attention keys and values x " << heads << " heads x " << c.head_dim()
        << ", and the encoder output's " << c.d_model << ", x " << c10::elementSize(dtype) << " bytes)\n";
  return out.str();
}

}  // namespace loom::cli
