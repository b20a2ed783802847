#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "models/gpt.h"

namespace loom::cli {

int info_command(const Argv& argv) {
  const auto args = parse_args(argv, {}, {"json"}, 1, "loom info CONFIG [--set key.path=value ...] [--json]");
  const Config config = load_config(args.positional[0], args.sets);
  if (config.model.vocab_size == 0)
    throw ConfigError(config.where("model.vocab_size") +
                      ": model.vocab_size: 0 (from the tokenizer) is only known at training time; pass --set "
                      "model.vocab_size=N to plan");
  const int64_t parameters = count_parameters(config.model);
  const double flops = training_flops_per_token(config.model, config.data.seq_len);
  if (args.flag("json")) {
    std::cout << nlohmann::json{{"parameters", parameters}, {"flops_per_token", flops}}.dump() << std::endl;
    return 0;
  }
  std::printf("model          %s, %ld layers, d_model %ld, %ld heads, d_ff %ld, vocab %ld, context %ld\n",
              config.model.arch.c_str(), static_cast<long>(config.model.n_layers), static_cast<long>(config.model.d_model),
              static_cast<long>(config.model.n_heads), static_cast<long>(config.model.ffn_dim()),
              static_cast<long>(config.model.vocab_size), static_cast<long>(config.model.max_seq_len));
  std::printf("parameters     %ld\n", static_cast<long>(parameters));
  std::printf("FLOPs/token    %.4g (training, seq_len %ld)\n", flops, static_cast<long>(config.data.seq_len));
  return 0;
}

}  // namespace loom::cli
