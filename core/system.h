// What this process may use of the machine, as the kernel says (not the machine's size: a job's cgroup or
// mpirun's binding may give a rank fewer cores than the machine has).
#pragma once
#include <cstdint>

namespace loom {

// CPU cores in this process's affinity mask (sched_getaffinity), at least 1.
int64_t usable_cpu_cores();

}  // namespace loom
