// The loom executable: dispatches to a subcommand and is the only place that catches errors.
// Exit codes: 0 success, 1 runtime error, 2 bad configuration or usage.
#include <spdlog/spdlog.h>

#include <functional>
#include <iostream>
#include <map>

#include "cli/commands.h"
#include "core/error.h"
#include "core/logging.h"

namespace {

const char* kUsage = R"(usage: loom <command> [args]

commands:
  train CONFIG [--set key.path=value ...]     train (or resume) the run in the config's run.dir
  generate RUN_DIR --prompt TEXT [--max-new-tokens N] [--temperature T] [--top-k K] [--top-p P]
                   [--seed S] [--step S] [--no-cache]
  info CONFIG [--set ...] [--json]            parameters and training FLOPs per token
  tokenize --tokenizer MODEL --out FILE TEXT  text file (one line per document) -> token file
  config CONFIG [--set ...] [--get KEY]        print the resolved config (or one key)
  config --reference                          every config key with its default and meaning
)";

}  // namespace

int main(int argc, char** argv) {
  loom::init_logging();
  const std::map<std::string, std::function<int(const loom::cli::Argv&)>> commands = {
      {"train", loom::cli::train_command},       {"generate", loom::cli::generate_command},
      {"info", loom::cli::info_command},         {"tokenize", loom::cli::tokenize_command},
      {"config", loom::cli::config_command},
  };
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::cout << kUsage;
    return argc < 2 ? 2 : 0;
  }
  auto command = commands.find(argv[1]);
  if (command == commands.end()) {
    std::cerr << "loom: unknown command '" << argv[1] << "'\n" << kUsage;
    return 2;
  }
  try {
    return command->second(loom::cli::Argv(argv + 2, argv + argc));
  } catch (const loom::ConfigError& e) {
    spdlog::error("{}", e.what());
    return 2;
  } catch (const c10::Error& e) {
    spdlog::error("{}", e.what_without_backtrace());
    return 1;
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 1;
  }
}
