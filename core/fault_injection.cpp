#include "core/fault_injection.h"

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "core/error.h"
#include "core/parse_number.h"

namespace loom {
namespace {

struct Fault {
  std::string kind;  // empty: none
  int64_t step = -1;
  int64_t rank = -1;  // -1: every rank
};

Fault parse_fault(const char* spec) {
  Fault fault;
  if (spec == nullptr || *spec == '\0') return fault;
  const std::string text = spec;
  const auto at = text.find('@');
  const auto colon = text.find(":rank");
  const auto step = at == std::string::npos ? std::nullopt : parse_int64(text.substr(at + 1, colon - at - 1));
  const auto rank = colon == std::string::npos ? std::optional<int64_t>(-1) : parse_int64(text.substr(colon + 5));
  fault.kind = text.substr(0, at);
  if (!step || !rank || (fault.kind != "throw" && fault.kind != "stall" && fault.kind != "crash"))
    throw Error("LOOM_FAULT_INJECTION='" + text + "': expected <throw|stall|crash>@<step>[:rank<r>]");
  fault.step = *step;
  fault.rank = *rank;
  return fault;
}

}  // namespace

void maybe_inject_fault(int64_t step, int64_t rank) {
  static const Fault fault = parse_fault(std::getenv("LOOM_FAULT_INJECTION"));
  if (fault.kind.empty() || step != fault.step || (fault.rank >= 0 && rank != fault.rank)) return;
  if (fault.kind == "throw")
    throw Error("injected fault (LOOM_FAULT_INJECTION) on rank " + std::to_string(rank) + " at step " +
                std::to_string(step));
  if (fault.kind == "crash") std::_Exit(3);
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

}  // namespace loom
