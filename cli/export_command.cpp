// `loom export RUN_DIR --format safetensors --out DIR [--step S]`: a run's trained weights as
// DIR/model.safetensors under Hugging Face's names, as its model family gives them (ModelFamily::export_hf: the
// gpt family's GPT-2 or LLaMA, other variants keeping loom's names) and DIR/config.json (GPT2Config / LlamaConfig fields), so that transformers'
// from_pretrained(DIR) loads it and `model.init_from: DIR/model.safetensors` starts a loom run from it.
// config.json's bos/eos/pad ids are those of the run's tokenizer (null without one). It writes no tokenizer:
// the run's tokenizer file stays where tokenizer.model points.
#include <spdlog/spdlog.h>

#include <iostream>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/file_io.h"
#include "data/tokenizers/tokenizer.h"
#include "models/hf_weights.h"
#include "train/inference.h"
#include "train/model_family.h"

namespace loom::cli {
namespace {

SpecialTokenIds special_token_ids(const Config& config) {
  if (config.tokenizer.model.empty()) return {};
  const auto tokenizer = load_tokenizer(config.tokenizer);
  const auto id = [](std::optional<int32_t> t) { return t ? std::optional<int64_t>(*t) : std::nullopt; };
  return {id(tokenizer->bos_id()), id(tokenizer->eos_id()), id(tokenizer->pad_id())};
}

}  // namespace

int export_command(const Argv& argv, const ProcessGroup&) {
  const auto args = parse_args(argv, {"format", "out", "step"}, {}, 1,
                               "loom export RUN_DIR --format safetensors --out DIR [--step S]");
  const std::string format = args.option_or("format", "safetensors");
  if (format != "safetensors") throw ConfigError("--format: '" + format + "' is not a format loom writes (safetensors)");
  const auto out = args.option("out");
  if (!out) throw ConfigError("--out DIR is required: the directory for model.safetensors and config.json");
  std::optional<int64_t> step;
  if (args.option("step")) step = args.int_option("step", 0);

  const auto loaded = load_trained_model(args.positional[0], step);
  const ModelFamily& family = model_family(loaded.config.model.arch);
  LOOM_CHECK(family.export_hf != nullptr, args.positional[0], " is a model.arch=", enum_name(loaded.config.model.arch),
             " run; export writes GPT-family weights only");
  const HfExport exported = family.export_hf(loaded.config.model, *loaded.model, special_token_ids(loaded.config));
  const std::filesystem::path dir = *out;
  std::filesystem::create_directories(dir);
  write_safetensors(dir / "model.safetensors", exported.weights,
                    {{"format", "pt"}, {"loom_names", exported.names}, {"loom_step", std::to_string(loaded.step)}});
  write_file_atomic(dir / "config.json", exported.config.dump(2) + "\n");
  spdlog::info("exported step {} of {}: {} tensors under {} names to {}", loaded.step, args.positional[0],
               exported.weights.size(), exported.names, (dir / "model.safetensors").string());
  return 0;
}

}  // namespace loom::cli
