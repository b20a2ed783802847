#include <iostream>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/config.h"

namespace loom::cli {

int config_command(const Argv& argv) {
  const char* usage = "loom config CONFIG [--set key.path=value ...] | loom config --reference";
  const bool reference = std::find(argv.begin(), argv.end(), "--reference") != argv.end();
  if (reference) {
    parse_args(argv, {}, {"reference"}, 0, usage);
    std::cout << config_reference_markdown();
    return 0;
  }
  const auto args = parse_args(argv, {}, {}, 1, usage);
  std::cout << to_yaml(load_config(args.positional[0], args.sets));
  return 0;
}

}  // namespace loom::cli
