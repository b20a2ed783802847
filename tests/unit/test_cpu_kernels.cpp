// Which build of loom's CPU kernels runs (core/cpu_kernels.h): the AVX-512 one exactly where ATen runs its own
// AVX-512 kernels, so that ATEN_CPU_CAPABILITY=avx2 or =default (scripts/test_isa.sh) puts loom's kernels on the
// portable path of a CPU without AVX-512 too. The choice is made once per process: child processes of this binary
// show it under each setting.
#include <ATen/Version.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "core/cpu_kernels.h"
#include "test_util.h"

namespace {

// The line the [.isa_probe] case prints, from a child process of this binary with ATEN_CPU_CAPABILITY=capability.
// The binary's path is resolved here: popen's shell would read its own /proc/self/exe.
std::string probe(const std::string& capability) {
  static const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string command = "ATEN_CPU_CAPABILITY=" + capability + " '" + self + "' '[.isa_probe]' 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string out;
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) out.append(buffer, n);
  CHECK(::pclose(pipe) == 0);
  const auto at = out.find("isa probe:");
  REQUIRE(at != std::string::npos);
  return out.substr(at, out.find('\n', at) - at);
}

bool cpu_supports_avx512() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}

}  // namespace

TEST_CASE("cpu kernels: the AVX-512 build runs where ATen runs AVX-512, ATEN_CPU_CAPABILITY lowers both", "[isa]") {
  CHECK(loom::cpu_has_avx512() == (cpu_supports_avx512() && at::get_cpu_capability() == "AVX512"));
  for (const std::string lowered : {"avx2", "default"}) {
    INFO("ATEN_CPU_CAPABILITY=" << lowered);
    const auto line = probe(lowered);
    CHECK_THAT(line, !Catch::Contains("aten AVX512") && Catch::Contains("loom avx512 0"));
  }
  // ATen takes =avx512 at its word; loom still needs the CPU to have it.
  CHECK_THAT(probe("avx512"), Catch::Contains(std::string("loom avx512 ") + (cpu_supports_avx512() ? "1" : "0")));
}

TEST_CASE("cpu kernels: probe, run by the case above", "[.isa_probe]") {
  std::printf("isa probe: loom avx512 %d, aten %s\n", loom::cpu_has_avx512() ? 1 : 0, at::get_cpu_capability().c_str());
  std::fflush(stdout);
}
