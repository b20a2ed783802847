// The MPI backend of Communicator (CPU tensors), and the process set-up that goes with it.
// Each communicator owns worker threads that run its MPI calls in order (collectives on one, sends and
// receives on one each), so an async collective
// really proceeds while the caller computes (backward overlaps gradient all-reduce), and waiting on it
// can time out. MPI is initialised with MPI_THREAD_MULTIPLE: several groups (dp, tp, pp) talk at once.
#pragma once
#include <memory>
#include <string>

#include "parallel/communicator.h"

namespace loom {

struct ProcessInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;  // among the ranks on this node
  int local_size = 1;
};

// Initialises MPI when the process was started by mpirun (or LOOM_MPI=1), finalises it at the end.
// Without mpirun the world is this process alone and no MPI call is made.
class ProcessGroup {
 public:
  ProcessGroup();
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  const ProcessInfo& info() const { return info_; }
  bool distributed() const { return info_.world_size > 1; }
  // A fresh communicator over all ranks; collectives wait at most timeout_s.
  std::unique_ptr<Communicator> world(double timeout_s) const;
  // Ends every rank of the job (MPI_Abort) with this exit code; a plain exit when not distributed.
  [[noreturn]] void abort(int exit_code) const;

 private:
  ProcessInfo info_;
  bool mpi_ = false;
};

}  // namespace loom
