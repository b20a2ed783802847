#include "core/fault_injection.h"

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <set>
#include <thread>

#include "core/error.h"
#include "core/parse_number.h"

namespace loom {
namespace {

const Fault& configured_fault() {
  static const Fault fault = parse_fault(std::getenv("LOOM_FAULT_INJECTION"));
  return fault;
}

}  // namespace

bool Fault::applies(int64_t step, int64_t at_rank) const {
  return !kind.empty() && step >= first && (last < 0 || step <= last) && (rank < 0 || at_rank == rank);
}

Fault parse_fault(const char* spec) {
  Fault fault;
  if (spec == nullptr || *spec == '\0') return fault;
  const std::string text = spec;
  const auto at = text.find('@');
  const auto colon = text.find(":rank");
  const std::string steps = at == std::string::npos ? "" : text.substr(at + 1, colon - at - 1);
  const auto dash = steps.find('-');
  const auto first = parse_int64(steps.substr(0, dash));
  const auto last = dash == std::string::npos        ? first
                    : dash + 1 == steps.size() ? std::optional<int64_t>(-1)
                                               : parse_int64(steps.substr(dash + 1));
  const auto rank = colon == std::string::npos ? std::optional<int64_t>(-1) : parse_int64(text.substr(colon + 5));
  fault.kind = text.substr(0, at);
  static const std::set<std::string> kinds = {"throw", "stall", "crash", "nan_loss", "nan_grad", "kill_in_save"};
  if (at == std::string::npos || !first || !last || !rank || kinds.count(fault.kind) == 0 || *first < 1 ||
      (*last >= 0 && *last < *first))
    throw Error("LOOM_FAULT_INJECTION='" + text +
                "': expected <throw|stall|crash|nan_loss|nan_grad|kill_in_save>@<step>[-[<last step>]][:rank<r>]");
  fault.first = *first;
  fault.last = *last;
  fault.rank = *rank;
  return fault;
}

StepFaults inject_step_faults(int64_t step, int64_t rank) {
  const Fault& fault = configured_fault();
  StepFaults out;
  if (!fault.applies(step, rank)) return out;
  if (fault.kind == "throw")
    throw Error("injected fault (LOOM_FAULT_INJECTION) on rank " + std::to_string(rank) + " at step " +
                std::to_string(step));
  if (fault.kind == "crash") std::_Exit(3);
  if (fault.kind == "stall")
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  out.nan_loss = fault.kind == "nan_loss";
  out.nan_grad = fault.kind == "nan_grad";
  return out;
}

void inject_save_faults(int64_t step, int64_t rank) {
  const Fault& fault = configured_fault();
  if (fault.kind == "kill_in_save" && fault.applies(step, rank)) std::raise(SIGKILL);
}

}  // namespace loom
