// Rank 0's step messages to the other ranks of a tensor-parallel server (serve/step_broadcast.h), received without
// spinning. A blocking MPI receive or broadcast busy-polls inside Open MPI (with --oversubscribe it yields between
// polls: ~40% of a core each follower of an idle server); here a follower probes (MPI_Iprobe) for the next message,
// at once for about a millisecond after the last one, which keeps a busy server's steps back to back, then sleeping
// between probes, the sleep doubling from 50 us to 2 ms: an idle follower wakes 500 times a second and a new step
// reaches it within 2 ms. The one place above parallel/ that names MPI: the point-to-point messages go over a
// duplicate of the job's world communicator of their own, so they never meet the model's collectives.
#pragma once
#include <cstdint>
#include <vector>

namespace loom {

class StepChannel {
 public:
  // Collective: every rank of the MPI job makes it at the same point.
  StepChannel();
  ~StepChannel();
  StepChannel(const StepChannel&) = delete;
  StepChannel& operator=(const StepChannel&) = delete;
  int rank() const { return rank_; }
  int size() const { return size_; }
  // Rank 0: the message to every other rank, in order.
  void send(const std::vector<uint8_t>& bytes);
  // Another rank: rank 0's next message (waiting as the header says).
  std::vector<uint8_t> receive();

 private:
  void* comm_ = nullptr;  // the MPI_Comm (MPI's header stays in the .cpp)
  int rank_ = 0, size_ = 1;
};

}  // namespace loom
