// OpTimeCounter (train/op_time.h): the time in matrix products is counted once, also under autocast, where
// an mm passes the dispatcher twice (autocast kernel, then CPU kernel), so it never exceeds the time spent.
#include <ATen/autocast_mode.h>

#include <chrono>

#include "train/op_time.h"
#include "test_util.h"

TEST_CASE("matrix products under bf16 autocast are timed once", "[bench]") {
  const auto a = torch::randn({384, 384}), b = torch::randn({384, 384});
  torch::NoGradGuard no_grad;
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  at::autocast::set_autocast_enabled(at::kCPU, true);
  (void)torch::mm(a, b);  // oneDNN picks its kernel outside the timing
  double elapsed_s = 0;
  loom::OpTimes times;
  {
    loom::OpTimeCounter counter;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 30; ++i) (void)torch::mm(a, b);
    elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    times = counter.times();
  }
  at::autocast::set_autocast_enabled(at::kCPU, false);
  at::autocast::clear_cache();
  CHECK(times.gemm_s <= elapsed_s);
  CHECK(times.gemm_s >= 0.3 * elapsed_s);  // the loop is nothing but matrix products (and their input casts)
  CHECK(times.attention_s == 0);
}
