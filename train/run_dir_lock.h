// One writer per run directory. Rank 0 of a training job (`loom train`) holds an flock on RUN/.lock for as
// long as the job trains; the kernel drops it when the process ends however it ends, so a SIGKILLed or crashed trainer
// never leaves a stale lock behind. The file records who holds it. A second trainer on the same run.dir (a
// requeued job whose old copy still runs, a double submission) stops at once, before any of its ranks has
// touched the directory, with a ConfigError on every rank: "run.dir R is in use by loom pid P on host H
// since T". It does not guard readers (eval, generate, export, status), which never write there.
#pragma once
#include <filesystem>

#include "parallel/communicator.h"

namespace loom {

class RunDirLock {
 public:
  // Collective over `world`: rank 0 creates run_dir if needed and takes the lock, then every rank learns
  // whether it got it.
  RunDirLock(const std::filesystem::path& run_dir, Communicator& world);
  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace loom
