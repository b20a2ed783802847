// FOR TESTS ONLY, off unless the environment variable LOOM_FAULT_INJECTION is set:
//   LOOM_FAULT_INJECTION=<kind>@<step>[:rank<r>]     kind: throw | stall | crash
// makes rank r (every rank if omitted) throw a loom::Error, sleep forever, or exit abruptly when it
// reaches optimizer step <step>. The fault-tolerance tests use it to prove that a failing or stalled
// rank ends the whole job with its message instead of hanging it.
#pragma once
#include <cstdint>

namespace loom {

void maybe_inject_fault(int64_t step, int64_t rank);

}  // namespace loom
