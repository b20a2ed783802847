// The job's processes: how many there are, which one this is, and the communicator over all of them,
// from which the Mesh (parallel/mesh.h) splits every group. MPI is set up when mpirun (or srun) started
// the job, with MPI_THREAD_MULTIPLE since several groups (dp, tp, pp) talk at once; a process started on
// its own is a world of one and makes no MPI call. Implemented with the MPI backend in
// mpi_communicator.cpp, the one file that calls MPI.
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
