// The NCCL backend of Communicator, for CUDA tensors: the only CUDA-specific code in parallel/.
// Each group's NCCL communicator is created from the MPI group of the same ranks, which carries its
// unique id. Collectives run on a dedicated stream that first waits for the caller's stream; a Work
// waits with the group's timeout and aborts the NCCL communicator when a peer never arrives.
// NCCL has no message tags: sends and receives between two ranks match in order.
#pragma once
#include <memory>
#include <string>

#include "parallel/communicator.h"

namespace loom {

// Collective over `bootstrap` (an MPI communicator of exactly the ranks of the new group). Throws
// loom::Error if loom was built without CUDA.
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, int device, const std::string& name,
                                                     double timeout_s);

}  // namespace loom
