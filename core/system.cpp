#include "core/system.h"

#include <sched.h>

#include <algorithm>
#include <thread>

namespace loom {

int64_t usable_cpu_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max<int64_t>(1, std::thread::hardware_concurrency());
}

}  // namespace loom
