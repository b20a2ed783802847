// One function per `loom` subcommand, each in its own file. They return the process exit code and
// may throw; main() turns exceptions into messages and exit codes.
#pragma once
#include <string>
#include <vector>

namespace loom::cli {

using Argv = std::vector<std::string>;

int train_command(const Argv& argv);
int generate_command(const Argv& argv);
int info_command(const Argv& argv);
int tokenize_command(const Argv& argv);
int config_command(const Argv& argv);

}  // namespace loom::cli
