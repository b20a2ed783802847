// FOR TESTS ONLY, off unless the environment variable LOOM_FAULT_INJECTION is set:
//   LOOM_FAULT_INJECTION=<kind>@<steps>[:rank<r>]
//     kind:  throw | stall | crash            rank r (every rank if omitted) throws a loom::Error, sleeps
//                                            forever, or exits abruptly when it reaches optimizer step <step>
//            nan_loss | nan_grad             rank r's loss (before backward), or its first gradient after
//                                            the data-parallel sync, is made NaN at those steps
//            kill_in_save                    rank r SIGKILLs itself once it has written its shard of the
//                                            checkpoint of step <step>, before that checkpoint is complete
//     steps: <n> (that step), <a>-<b> (a through b), <a>- (a and every later step)
// The fault-tolerance tests use it to prove that a failing or stalled rank ends the whole job with its
// message instead of hanging it, and that non-finite steps are skipped, counted and, persisting, stop the
// run (train.max_bad_steps).
#pragma once
#include <cstdint>
#include <string>

namespace loom {

// The one seam between a training step and LOOM_FAULT_INJECTION, asked once as optimizer step `step`
// starts on `rank`: throw, stall and crash happen right here; what the step must do itself comes back.
struct StepFaults {
  bool nan_loss = false;  // make each micro-batch's loss NaN before its backward
  bool nan_grad = false;  // make the first gradient NaN after the data-parallel sync
};
StepFaults inject_step_faults(int64_t step, int64_t rank);
// The seam in a checkpoint's save, asked by every rank once its shard (if it writes one) of the checkpoint
// of step `step` is written: kill_in_save happens here.
void inject_save_faults(int64_t step, int64_t rank);

// The parsed form of a LOOM_FAULT_INJECTION value, exposed for the unit test of its syntax.
struct Fault {
  std::string kind;  // empty: none
  int64_t first = -1, last = -1;  // the steps it applies to; last -1: no end
  int64_t rank = -1;              // -1: every rank
  bool applies(int64_t step, int64_t at_rank) const;
};
Fault parse_fault(const char* spec);

}  // namespace loom
