// The process set-up of train/runtime.h: runtime.deterministic and runtime.device.
#include <ATen/Context.h>

#include <cstdlib>

#include "core/error.h"
#include "test_util.h"
#include "train/runtime.h"

TEST_CASE("runtime.deterministic turns deterministic kernels on, and only when asked") {
  auto& context = at::globalContext();
  const bool was = context.deterministicAlgorithms();
  const bool was_warn_only = context.deterministicAlgorithmsWarnOnly();
  loom::RuntimeConfig runtime;
  context.setDeterministicAlgorithms(false, false);
  REQUIRE(loom::runtime_device(runtime) == torch::Device(torch::kCPU));
  CHECK_FALSE(context.deterministicAlgorithms());

  runtime.deterministic = true;
  REQUIRE(loom::runtime_device(runtime) == torch::Device(torch::kCPU));
  CHECK(context.deterministicAlgorithms());
  CHECK_FALSE(context.deterministicAlgorithmsWarnOnly());  // strict: what lets SDPA pick its deterministic backward
  CHECK(context.deterministicCuDNN());
  const char* workspace = std::getenv("CUBLAS_WORKSPACE_CONFIG");
  REQUIRE(workspace != nullptr);
  CHECK(std::string(workspace) == ":4096:8");
  context.setDeterministicAlgorithms(was, was_warn_only);
}

TEST_CASE("runtime.device=cuda: the rank's GPU, or a clear error where none is visible") {
  loom::RuntimeConfig runtime;
  runtime.device = loom::DeviceKind::kCuda;
  if (torch::cuda::is_available()) {
    const auto gpus = static_cast<int64_t>(torch::cuda::device_count());
    CHECK(loom::runtime_device(runtime, /*local_rank=*/gpus) == torch::Device(torch::kCUDA, 0));
  } else {
    CHECK_THROWS_WITH(loom::runtime_device(runtime), Catch::Contains("no CUDA device is visible") &&
                                                         Catch::Contains("runtime.device=cpu"));
  }
}
