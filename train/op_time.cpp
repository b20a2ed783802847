#include "train/op_time.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>

#include "core/error.h"

namespace loom {
namespace {

enum class OpKind { kOther, kGemm, kAttention };

// RecordFunction callbacks are plain function pointers, so the totals they add to cannot live in the
// counter object: these are the only ones, and OpTimeCounter allows a single live instance.
std::atomic<int64_t> gemm_ns{0}, attention_ns{0};
std::atomic<bool> counting{false};

OpKind kind_of(const char* name) {
  static const char* const gemms[] = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addbmm",
                                      "aten::_addmm_activation"};
  for (const char* g : gemms)
    if (std::strcmp(name, g) == 0) return OpKind::kGemm;
  static const char* const attentions[] = {"aten::_scaled_dot_product_", "aten::_flash_attention",
                                           "aten::_efficient_attention", "loom::blocked_attention"};
  for (const char* a : attentions)
    if (std::strncmp(name, a, std::strlen(a)) == 0) return OpKind::kAttention;
  return OpKind::kOther;
}

// Counted operators open on this thread. Only the outermost one is timed: under autocast an mm passes the
// dispatcher twice (the autocast kernel, then the CPU one), and an attention kernel may call matrix products.
thread_local int open_counted = 0;

struct Started : at::ObserverContext {
  OpKind kind;
  bool outermost;
  std::chrono::steady_clock::time_point at;
};

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  const OpKind kind = kind_of(fn.name());
  if (kind == OpKind::kOther) return nullptr;
  auto started = std::make_unique<Started>();
  started->kind = kind;
  started->outermost = open_counted++ == 0;
  started->at = std::chrono::steady_clock::now();
  return started;
}

void on_end(const at::RecordFunction&, at::ObserverContext* context) {
  if (context == nullptr) return;
  open_counted -= 1;
  const auto* started = static_cast<const Started*>(context);
  if (!started->outermost) return;
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - started->at);
  (started->kind == OpKind::kGemm ? gemm_ns : attention_ns) += ns.count();
}

}  // namespace

OpTimeCounter::OpTimeCounter() {
  LOOM_CHECK(!counting.exchange(true), "only one OpTimeCounter may be alive at a time");
  gemm_ns = 0;
  attention_ns = 0;
  handle_ = at::addGlobalCallback(at::RecordFunctionCallback(on_start, on_end)
                                      .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
}

OpTimeCounter::~OpTimeCounter() {
  at::removeCallback(handle_);
  counting = false;
}

OpTimes OpTimeCounter::times() const {
  return {static_cast<double>(gemm_ns.load()) * 1e-9, static_cast<double>(attention_ns.load()) * 1e-9};
}

}  // namespace loom
