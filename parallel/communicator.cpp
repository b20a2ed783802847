// What every Communicator backend shares.
#include "parallel/communicator.h"

namespace loom {

std::string collective_timeout_message(const std::string& what, double timeout_s) {
  return what + " did not finish within parallel.timeout_s=" + std::to_string(static_cast<int>(timeout_s)) +
         "s: a rank of the group has failed or stalled";
}

}  // namespace loom
