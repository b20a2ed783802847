// Catch2's main for the unit-test binary, with the built-in model families registered (train/model_family.h)
// and `--warn NoTests` always on: a run whose test spec (or any one of its filters) matches no test case
// exits 2 instead of 0. Every ctest entry names its cases (one name per
// discovered test, a tag per mpirun entry, a spec per scripts/test_isa.sh run), so a name that stops matching
// (Catch2's ctest discovery cuts a name at ';') fails its entry instead of passing without running anything.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "train/model_family.h"

int main(int argc, char* argv[]) {
  loom::register_builtin_model_families();
  Catch::Session session;
  if (const int status = session.applyCommandLine(argc, argv); status != 0) return status;
  auto& data = session.configData();
  data.warnings = static_cast<Catch::WarnAbout::What>(data.warnings | Catch::WarnAbout::NoTests);
  return session.run();
}
