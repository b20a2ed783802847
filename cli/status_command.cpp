// `loom status RUN_DIR [--json]`: where a run stands, read from its directory without loading a model:
// the last step and losses from metrics.jsonl, elapsed time and throughput, and every checkpoint with
// the result of its integrity check (sizes and CRC-32s against its manifest).
#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/config.h"
#include "core/error.h"
#include "core/file_io.h"
#include "train/checkpoint.h"
#include "train/metrics.h"

namespace loom::cli {
namespace fs = std::filesystem;
namespace {

// The last train and valid rows of metrics.jsonl; a line cut short by a crash is ignored.
struct LastRows {
  nlohmann::json train, valid;
};

LastRows last_rows(const fs::path& path) {
  LastRows last;
  if (!fs::exists(path)) return last;
  std::istringstream lines(read_file(path));
  for (std::string line; std::getline(lines, line);) {
    const auto row = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!row.is_object()) continue;
    (row.value("split", "") == "valid" ? last.valid : last.train) = row;
  }
  return last;
}

}  // namespace

int status_command(const Argv& argv, const ProcessGroup&) {
  const auto args = parse_args(argv, {}, {"json"}, 1, "loom status RUN_DIR [--json]");
  const fs::path run_dir = args.positional[0];
  if (!fs::is_regular_file(run_dir / "config.yaml"))
    throw ConfigError(run_dir.string() + " is not a run directory (it has no config.yaml): give the run.dir of a "
                      "`loom train` run");
  const Config config = load_config((run_dir / "config.yaml").string());
  const auto rows = last_rows(run_dir / "metrics.jsonl");

  nlohmann::json checkpoints = nlohmann::json::array();
  for (int64_t step : checkpoint_steps(run_dir)) {
    const auto problem = checkpoint_problem(checkpoint_dir(run_dir, step));
    checkpoints.push_back({{"step", step}, {"ok", !problem}, {"problem", problem.value_or("")}});
  }
  const auto& train = rows.train;
  nlohmann::json out = {{"run_dir", run_dir.string()},
                        {"max_steps", config.train.max_steps},
                        {"step", train.value("step", int64_t{0})},
                        {"tokens", train.value("tokens", int64_t{0})},
                        {"elapsed_s", train.value("elapsed_s", 0.0)},
                        {"checkpoints", checkpoints}};
  if (train.contains("loss")) out["train_loss"] = train["loss"];
  if (train.contains("tokens_per_s")) out["tokens_per_s"] = train["tokens_per_s"];
  if (rows.valid.contains("loss")) out["valid"] = {{"step", rows.valid["step"]}, {"loss", rows.valid["loss"]}};
  if (args.flag("json")) {
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::printf("run %s: step %lld of %lld, %lld tokens, %s elapsed\n", run_dir.c_str(),
              static_cast<long long>(out["step"].get<int64_t>()), static_cast<long long>(config.train.max_steps),
              static_cast<long long>(out["tokens"].get<int64_t>()), format_duration(out["elapsed_s"]).c_str());
  if (out.contains("train_loss"))
    std::printf("train loss %.4f at step %lld, %.0f tokens/s\n", out["train_loss"].get<double>(),
                static_cast<long long>(out["step"].get<int64_t>()), out.value("tokens_per_s", 0.0));
  if (out.contains("valid"))
    std::printf("valid loss %.4f (ppl %.2f) at step %lld\n", out["valid"]["loss"].get<double>(),
                std::exp(out["valid"]["loss"].get<double>()), static_cast<long long>(out["valid"]["step"].get<int64_t>()));
  if (checkpoints.empty()) std::printf("no checkpoints\n");
  for (const auto& c : checkpoints)
    std::printf("checkpoint %lld: %s\n", static_cast<long long>(c["step"].get<int64_t>()),
                c["ok"].get<bool>() ? "complete, checksums match" : ("BROKEN: " + c["problem"].get<std::string>()).c_str());
  return 0;
}

}  // namespace loom::cli
