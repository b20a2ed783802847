// loom's error types. Library code throws; only cli/ catches, logs and chooses the exit code.
#pragma once
#include <stdexcept>
#include <string>

namespace loom {

// Something the user can act on: bad input, a missing file, a corrupt checkpoint.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A bad configuration (YAML or --set): reported before any work, exit code 2.
class ConfigError : public Error {
 public:
  using Error::Error;
};

}  // namespace loom

// Throws loom::Error with the message when cond is false; the message is only built on failure.
#define LOOM_CHECK(cond, ...)                                   \
  do {                                                          \
    if (!(cond)) throw ::loom::Error(::loom::detail::concat(__VA_ARGS__)); \
  } while (0)

#include <sstream>
namespace loom::detail {
template <class... Args>
std::string concat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}
}  // namespace loom::detail
