// One function per `loom` subcommand, each in its own file. They return the process exit code and
// may throw; main() turns exceptions into messages and exit codes.
#pragma once
#include <string>
#include <vector>

#include "parallel/process_group.h"

namespace loom::cli {

using Argv = std::vector<std::string>;

// Every command gets the process group (MPI under mpirun, else this process alone).
int train_command(const Argv& argv, const ProcessGroup& processes);
int generate_command(const Argv& argv, const ProcessGroup& processes);
int info_command(const Argv& argv, const ProcessGroup& processes);
int tokenize_command(const Argv& argv, const ProcessGroup& processes);
int prepare_command(const Argv& argv, const ProcessGroup& processes);
int encode_command(const Argv& argv, const ProcessGroup& processes);
int decode_command(const Argv& argv, const ProcessGroup& processes);
int config_command(const Argv& argv, const ProcessGroup& processes);
int eval_command(const Argv& argv, const ProcessGroup& processes);
int export_command(const Argv& argv, const ProcessGroup& processes);
int comm_bench_command(const Argv& argv, const ProcessGroup& processes);
int status_command(const Argv& argv, const ProcessGroup& processes);
int bleu_command(const Argv& argv, const ProcessGroup& processes);
int translate_command(const Argv& argv, const ProcessGroup& processes);
int classify_command(const Argv& argv, const ProcessGroup& processes);
int bench_command(const Argv& argv, const ProcessGroup& processes);

}  // namespace loom::cli
