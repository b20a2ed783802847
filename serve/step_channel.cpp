#include "serve/step_channel.h"

// MPI's C API only (as parallel/mpi_communicator.cpp): its C++ bindings are not linked.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "core/error.h"

namespace loom {
namespace {

constexpr int kStepTag = 7;

void step_mpi_check(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw Error(std::string("the step channel's ") + what + " failed: " + std::string(text, static_cast<size_t>(length)));
}

MPI_Comm& step_comm(void* comm) { return *static_cast<MPI_Comm*>(comm); }

}  // namespace

StepChannel::StepChannel() {
  auto* comm = new MPI_Comm(MPI_COMM_NULL);
  comm_ = comm;
  step_mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, comm), "MPI_Comm_dup");
  step_mpi_check(MPI_Comm_set_errhandler(*comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  step_mpi_check(MPI_Comm_rank(*comm, &rank_), "MPI_Comm_rank");
  step_mpi_check(MPI_Comm_size(*comm, &size_), "MPI_Comm_size");
}

StepChannel::~StepChannel() {
  auto* comm = static_cast<MPI_Comm*>(comm_);
  if (*comm != MPI_COMM_NULL) MPI_Comm_free(comm);
  delete comm;
}

void StepChannel::send(const std::vector<uint8_t>& bytes) {
  LOOM_CHECK(rank_ == 0, "rank 0 sends the steps");
  for (int peer = 1; peer < size_; ++peer)
    step_mpi_check(MPI_Send(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, peer, kStepTag,
                            step_comm(comm_)),
                   "send");
}

std::vector<uint8_t> StepChannel::receive() {
  LOOM_CHECK(rank_ != 0, "rank 0 sends the steps");
  using Clock = std::chrono::steady_clock;
  const auto since = Clock::now();
  auto sleep = std::chrono::microseconds(50);
  int arrived = 0;
  MPI_Status status;
  while (true) {
    step_mpi_check(MPI_Iprobe(0, kStepTag, step_comm(comm_), &arrived, &status), "probe");
    if (arrived) break;
    if (Clock::now() - since < std::chrono::milliseconds(1)) continue;  // a busy server's next step is near
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::microseconds(2000));
  }
  int count = 0;
  step_mpi_check(MPI_Get_count(&status, MPI_BYTE, &count), "MPI_Get_count");
  std::vector<uint8_t> bytes(static_cast<size_t>(count));
  step_mpi_check(MPI_Recv(bytes.data(), count, MPI_BYTE, 0, kStepTag, step_comm(comm_), MPI_STATUS_IGNORE), "receive");
  return bytes;
}

}  // namespace loom
