#include <spdlog/spdlog.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/signals.h"
#include "train/run_dir_lock.h"
#include "train/trainer.h"

namespace loom::cli {

int train_command(const Argv& argv, const ProcessGroup& processes) {
  const auto args = parse_args(argv, {}, {}, 1, "loom train CONFIG [--set key.path=value ...]");
  Config config = load_config(args.positional[0], args.sets);
  // One writer per run.dir, checked before any rank reads or writes it; held until training ends.
  const RunDirLock lock(config.run.dir, *processes.world(config.parallel.timeout_s));
  install_stop_signal_handlers();
  Trainer trainer(RunPlan(std::move(config), processes.info().world_size), processes);
  const auto state = trainer.run();
  spdlog::info("done: step {}, {} tokens, run dir {}", state.step, state.tokens, trainer.config().run.dir);
  return 0;
}

}  // namespace loom::cli
