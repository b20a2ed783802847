// The layout `loom serve` and `loom generate --input` run in: one process, or under `mpirun -np N` with
// `--set parallel.tp=N` the model split by tensor parallelism over the N ranks (serve/step_broadcast.h). Only
// parallel.tp may be set; pipeline, context and data parallelism are refused, saying so.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "cli/args.h"
#include "parallel/process_group.h"
#include "train/inference.h"

namespace loom::cli {

// parallel.tp from the --set options (1 when not set), checked against the job's world (`command` names the
// command in the messages).
int64_t serving_tp(const Args& args, const ProcessGroup& processes, const std::string& command);

// The run's model: whole, or this rank's TP shard when tp > 1.
LoadedModel load_serving_model(const std::string& run_dir, std::optional<int64_t> step, int64_t tp,
                               const ProcessGroup& processes);

}  // namespace loom::cli
