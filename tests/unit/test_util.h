// Helpers shared by the unit tests: a scratch directory per test and golden values from PyTorch.
#pragma once
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

namespace loom::test {

inline std::filesystem::path source_dir() {
  const char* dir = std::getenv("LOOM_SOURCE_DIR");
  return dir != nullptr ? dir : ".";
}

// A fresh, empty directory under the system temp dir, named after the test.
inline std::filesystem::path scratch_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("loom-test-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// Runs `python3 tests/golden/<script> <args>` and parses the JSON it prints on stdout.
inline nlohmann::json python_golden(const std::string& script, const std::string& args = "") {
  const std::string command = "python3 " + (source_dir() / "tests" / "golden" / script).string() + " " + args;
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string out;
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) out.append(buffer, n);
  REQUIRE(::pclose(pipe) == 0);
  return nlohmann::json::parse(out);
}

}  // namespace loom::test
