// The checks of a parsed Config: core/config_validate.cpp's, and each model family's own (FamilyRules::validate,
// core/family_rules.h). Every problem is collected, its message naming the key and where it was set; finish()
// throws them together as one ConfigError.
#pragma once
#include <sstream>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/error.h"

namespace loom {

class ConfigChecks {
 public:
  explicit ConfigChecks(const Config& c) : c_(c) {}

  template <class... Args>
  void require(bool ok, const std::string& key, const Args&... what) {
    if (ok) return;
    std::ostringstream line;
    line << c_.where(key) << ": " << key << ": ";
    (line << ... << what);
    problems_.push_back(line.str());
  }

  void finish() const {
    if (problems_.empty()) return;
    std::string all;
    for (const auto& p : problems_) all += (all.empty() ? "" : "\n") + p;
    throw ConfigError(all);
  }

 private:
  const Config& c_;
  std::vector<std::string> problems_;
};

}  // namespace loom
