#include <iostream>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/config.h"

namespace loom::cli {

int config_command(const Argv& argv, const ProcessGroup&) {
  const char* usage = "loom config CONFIG [--set key.path=value ...] [--get key.path] | loom config --reference";
  const bool reference = std::find(argv.begin(), argv.end(), "--reference") != argv.end();
  if (reference) {
    parse_args(argv, {}, {"reference"}, 0, usage);
    std::cout << config_reference_markdown();
    return 0;
  }
  const auto args = parse_args(argv, {"get"}, {}, 1, usage);
  const Config config = load_config(args.positional[0], args.sets);
  if (auto key = args.option("get")) {
    std::cout << config_value_text(config, *key) << "\n";
    return 0;
  }
  std::cout << to_yaml(config);
  return 0;
}

}  // namespace loom::cli
