// The loom executable: dispatches to a subcommand and is the only place that catches errors.
// Exit codes: 0 success, 1 runtime error, 2 bad configuration or usage. Under mpirun, an error on any
// rank is logged with that rank's coordinates and ends every rank of the job with its exit code.
#include <spdlog/spdlog.h>

#include <functional>
#include <iostream>
#include <map>

#include "cli/commands.h"
#include "core/error.h"
#include "core/logging.h"
#include "train/model_family.h"

namespace {

const char* kUsage = R"(usage: loom <command> [args]

commands:
  train CONFIG [--set key.path=value ...]     train (or resume) the run in the config's run.dir
  generate RUN_DIR --prompt TEXT [--max-new-tokens N] [--temperature T] [--top-k K] [--top-p P]
                   [--seed S] [--step S] [--no-cache] [--ignore-eos] [--json]
                                              sample a continuation, printed as it is sampled; ends at
                                              the tokenizer's end of sequence unless --ignore-eos
  generate RUN_DIR --input PROMPTS.jsonl --output OUT.jsonl [--max-batch N] [--kv-mb MB | --kv-blocks N]
                   [--block-size N]
                   [--draft RUN_DIR | --speculate ngram] [--speculate-k K] [--speculate-adaptive]
                                              every prompt of a file through the batching engine
                                              (speculative decoding with a draft model or n-grams);
                                              of a transformer run: each prompt a source, translated
  serve RUN_DIR [--port N] [--host 127.0.0.1] [--max-batch N] [--kv-mb MB] [--block-size N]
        [--chat-template FILE] [--draft RUN_DIR | --speculate ngram] [--speculate-k K]
                                              an OpenAI-compatible HTTP server (/v1/completions,
                                              /v1/chat/completions, /v1/models, /health, /metrics);
                                              a transformer run translates each prompt
  info CONFIG [--set ...] [--json]            parameters and training FLOPs per token
  prepare INPUT... --tokenizer FILE --out DIR [--field KEY] [--valid-fraction F] [--threads N]
          [--doc-per-file | --blank-line-docs] [--on-error fail|skip] [--shard-tokens N]
          [--train-tokenizer sentencepiece --vocab N]
          [--sft [--prompt-field K] [--response-field K] [--messages-field K] [--chat-template FILE]]
                                              text / JSONL corpora (.gz, .zst; files, directories,
                                              globs) -> a directory data.train / data.valid read
  tokenize --tokenizer FILE --out FILE TEXT   text file (one line per document) -> token file
           [--target TARGET_TEXT]             ... or line-aligned source/target files -> pair file
  encode --tokenizer FILE [--pattern P] [--add-special-tokens] [--no-special-in-text] [--info] [--stats]
         < TEXT                               text lines -> space-separated token ids per line
  decode --tokenizer FILE [--pattern P] < IDS  token id lines -> text lines
           (every --tokenizer FILE, prepare's and tokenize's too: SentencePiece .model, Hugging Face
            tokenizer.json, .tiktoken with --pattern P; also --type T, --special-tokens PRESET_OR_MAP,
            as the tokenizer.* config keys)
  config CONFIG [--set ...] [--get KEY]        print the resolved config (or one key)
  config --reference                          every config key with its default and meaning
  eval CONFIG_OR_RUN_DIR [--set ...] [--split valid|test] [--step S] [--beam N] [--json]
                                              mean loss and perplexity on data.valid (translation
                                              runs: also the quality of their translations)
  translate RUN_DIR [--beam N] [--step S] [--set decode.*=...] < SOURCE
                                              translate stdin lines with a transformer run
  classify RUN_DIR [--step S] < TEXTS         the label a BERT classifier run predicts for each stdin
                                              line (a text, or TEXT<TAB>TEXT_PAIR)
  export RUN_DIR --format safetensors --out DIR [--step S]
                                              weights + config.json for Hugging Face transformers
  status RUN_DIR [--json]                      last step, losses, elapsed time, checkpoints and their integrity
  comm-bench [--mb 1,4,16,64] [--bucket-mb B] [--iterations N] [--json]
                                              under mpirun: all-reduce bandwidth, MPI vs loom's buckets
  bleu REF_FILE [--json] < HYP_FILE           corpus BLEU of the lines on stdin, as sacreBLEU computes it
  bench CONFIG [--set ...] [--steps N] [--warmup N] [--profile-steps N] [--json]
                                              tokens/s, MFU, peak memory and step phases on synthetic tokens
)";

int run_command(const loom::cli::Argv& args, const loom::ProcessGroup& processes) {
  using Command = std::function<int(const loom::cli::Argv&, const loom::ProcessGroup&)>;
  const std::map<std::string, Command> commands = {
      {"train", loom::cli::train_command},       {"generate", loom::cli::generate_command},
      {"serve", loom::cli::serve_command},
      {"info", loom::cli::info_command},         {"tokenize", loom::cli::tokenize_command},
      {"encode", loom::cli::encode_command},     {"decode", loom::cli::decode_command},
      {"prepare", loom::cli::prepare_command},
      {"config", loom::cli::config_command},     {"eval", loom::cli::eval_command},
      {"export", loom::cli::export_command},     {"comm-bench", loom::cli::comm_bench_command},
      {"status", loom::cli::status_command},
      {"bleu", loom::cli::bleu_command},
      {"translate", loom::cli::translate_command},
      {"classify", loom::cli::classify_command},
      {"bench", loom::cli::bench_command},
  };
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::cout << kUsage;
    return args.empty() ? 2 : 0;
  }
  auto command = commands.find(args[0]);
  if (command == commands.end()) {
    std::cerr << "loom: unknown command '" << args[0] << "'\n" << kUsage;
    return 2;
  }
  try {
    return command->second(loom::cli::Argv(args.begin() + 1, args.end()), processes);
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

}  // namespace

int main(int argc, char** argv) {
  loom::init_logging();
  loom::register_builtin_model_families();
  std::unique_ptr<loom::ProcessGroup> processes;
  try {
    processes = std::make_unique<loom::ProcessGroup>();
  } catch (const std::exception& e) {
    spdlog::error("cannot start MPI: {}", e.what());
    return 1;
  }
  loom::init_logging(processes->info().rank, processes->info().world_size);
  const int code = run_command(loom::cli::Argv(argv + 1, argv + argc), *processes);
  if (code != 0 && processes->distributed()) processes->abort(code);
  return code;
}
