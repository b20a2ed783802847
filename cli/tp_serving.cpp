#include "cli/tp_serving.h"

#include "core/error.h"

namespace loom::cli {

int64_t serving_tp(const Args& args, const ProcessGroup& processes, const std::string& command) {
  int64_t tp = 1;
  for (const auto& set : args.sets) {
    const auto eq = set.find('=');
    const std::string key = set.substr(0, eq), value = eq == std::string::npos ? "" : set.substr(eq + 1);
    if (key == "parallel.tp") {
      try {
        size_t used = 0;
        tp = std::stoll(value, &used);
        if (used != value.size() || tp < 1) throw std::invalid_argument(value);
      } catch (const std::exception&) {
        throw ConfigError("--set parallel.tp=" + value + ": give a whole number >= 1");
      }
    } else if (key == "parallel.pp" || key == "parallel.cp" || key == "parallel.dp") {
      if (value != "1")
        throw ConfigError("--set " + set + ": " + command +
                          " splits a model by tensor parallelism only (--set parallel.tp=N under mpirun -np N); "
                          "pipeline, context and data parallelism are not served (run one server per replica)");
    } else {
      throw ConfigError("--set " + set + ": " + command + " takes --set parallel.tp=N only (the model's config "
                        "comes from its checkpoint)");
    }
  }
  const int64_t world = processes.info().world_size;
  if (tp != world)
    throw ConfigError(command + ": parallel.tp=" + std::to_string(tp) + " but the job has " + std::to_string(world) +
                      " processes: run `mpirun -np N loom ... --set parallel.tp=N` (N ranks, one TP group)");
  return tp;
}

LoadedModel load_serving_model(const std::string& run_dir, std::optional<int64_t> step, int64_t tp,
                               const ProcessGroup& processes) {
  if (tp == 1) return load_trained_model(run_dir, step);
  const auto config = load_config((std::filesystem::path(run_dir) / "config.yaml").string());
  return load_trained_model_tp(run_dir, step, processes.world(config.parallel.timeout_s), processes.info().local_rank,
                               processes.info().local_size);
}

}  // namespace loom::cli
