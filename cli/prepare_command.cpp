// `loom prepare INPUT... --tokenizer FILE --out DIR`: text and JSON Lines corpora (gzip, zstd) -> a prepared
// directory of token shards, document indexes and a manifest (data/prepare/prepare.h), which `data.train: DIR` and
// `data.valid: DIR` train on. Draws a progress bar (bytes, MB/s, ETA) on a terminal. --sft: JSONL records
// of prompt/response or chat messages, with a loss mask per shard (data/prepare/sft_record.h).
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/tokenizer_args.h"
#include "core/error.h"
#include "core/system.h"
#include "data/prepare/prepare.h"
#include "train/metrics.h"
#include "train/progress.h"

namespace loom::cli {
namespace {

const char* kUsage =
    "loom prepare INPUT... (--tokenizer FILE | --train-tokenizer sentencepiece --vocab N) --out DIR\n"
    "             [--type T] [--pattern NAME_OR_REGEX] [--special-tokens PRESET_OR_YAML_MAP]\n"
    "             [--field KEY] [--valid-fraction F] [--threads N] [--doc-per-file | --blank-line-docs]\n"
    "             [--on-error fail|skip] [--shard-tokens N] [--max-document-mb N] [--tokenizer-sample-mb N]\n"
    "             [--sft [--prompt-field KEY] [--response-field KEY] [--messages-field KEY] [--chat-template FILE]]";

std::string megabytes(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, bytes >= 1e9 ? "%.2f GB" : "%.1f MB", bytes >= 1e9 ? bytes / 1e9 : bytes / 1e6);
  return text;
}

// "prepare 1.21/4.60 GB [#####.....]  26% | 45.6 MB/s | 12.3M tokens | 1m02s elapsed | ETA 2m40s"
std::string progress_text(const StreamProgress& p, double seconds) {
  const double rate = seconds > 0 ? static_cast<double>(p.bytes_read) / seconds : 0;
  const auto total = static_cast<int64_t>(p.bytes_total), done = static_cast<int64_t>(p.bytes_read);
  char numbers[160];
  std::snprintf(numbers, sizeof numbers, " %3d%% | %.1f MB/s | %.1fM tokens | %s elapsed | ETA %s",
                total > 0 ? static_cast<int>(100 * done / total) : 100, rate / 1e6, static_cast<double>(p.tokens) / 1e6,
                format_duration(seconds).c_str(),
                format_duration(rate > 0 ? static_cast<double>(total - done) / rate : 0).c_str());
  return "prepare " + megabytes(static_cast<double>(done)) + " of " + megabytes(static_cast<double>(total)) + " " +
         progress_bar(done, total, 30) + numbers;
}

PrepareOptions parse_options(const Args& args) {
  PrepareOptions o;
  o.inputs = args.positional;
  o.out = args.option_or("out", "");
  if (o.out.empty()) throw ConfigError(std::string("--out DIR is missing\nusage: ") + kUsage);
  o.tokenizer = tokenizer_config_from_args(args);  // --tokenizer FILE, --type, --pattern, --special-tokens
  if (const auto type = args.option("train-tokenizer")) {
    if (*type != "sentencepiece")
      throw ConfigError("--train-tokenizer " + *type + ": loom trains sentencepiece tokenizers only");
    if (!o.tokenizer.model.empty()) throw ConfigError("give either --tokenizer or --train-tokenizer, not both");
    for (const char* option : {"type", "pattern", "special-tokens"})
      if (args.option(option))
        throw ConfigError(std::string("--") + option + " goes with --tokenizer FILE, not --train-tokenizer");
    if (!args.option("vocab")) throw ConfigError("--train-tokenizer sentencepiece needs --vocab N");
    o.train_tokenizer = true;
    o.tokenizer_training.vocab_size = args.int_option("vocab", 0, 16, int64_t{1} << 24);
    o.tokenizer_training.sample_bytes = static_cast<uint64_t>(args.int_option("tokenizer-sample-mb", 64, 1, 1 << 20)) << 20;
  } else if (o.tokenizer.model.empty()) {
    throw ConfigError(std::string("--tokenizer FILE (or --train-tokenizer sentencepiece --vocab N) is missing\nusage: ") +
                      kUsage);
  } else if (args.option("vocab") || args.option("tokenizer-sample-mb")) {
    throw ConfigError("--vocab and --tokenizer-sample-mb go with --train-tokenizer");
  }
  auto& s = o.stream;
  s.encode.field = args.option_or("field", "text");
  s.encode.valid_fraction = args.double_option("valid-fraction", 0.01);
  if (!(s.encode.valid_fraction >= 0 && s.encode.valid_fraction < 1))
    throw ConfigError("--valid-fraction " + args.option_or("valid-fraction", "") + " must be in [0, 1)");
  const std::string on_error = args.option_or("on-error", "fail");
  if (on_error != "fail" && on_error != "skip") throw ConfigError("--on-error " + on_error + ": expected fail or skip");
  s.encode.stop_at_problem = on_error == "fail";
  if (args.flag("doc-per-file") && args.flag("blank-line-docs"))
    throw ConfigError("--doc-per-file and --blank-line-docs exclude each other");
  s.text_split = args.flag("doc-per-file")      ? DocumentSplit::kWholeFile
                 : args.flag("blank-line-docs") ? DocumentSplit::kBlankLines
                                                : DocumentSplit::kLines;
  s.threads = static_cast<size_t>(args.int_option("threads", usable_cpu_cores(), 1, 1024));
  s.shard_tokens = args.int_option("shard-tokens", int64_t{1} << 28, 1, int64_t{1} << 32);
  s.max_document_bytes = static_cast<size_t>(args.int_option("max-document-mb", 64, 1, 4096)) << 20;
  auto& sft = s.encode.sft;
  sft.enabled = args.flag("sft");
  for (const char* option : {"prompt-field", "response-field", "messages-field", "chat-template"})
    if (args.option(option) && !sft.enabled) throw ConfigError(std::string("--") + option + " goes with --sft");
  if (sft.enabled) {
    if (o.train_tokenizer)
      throw ConfigError("--sft records are not plain text to train a tokenizer on: give --tokenizer FILE");
    if (args.option("field")) throw ConfigError("--field names a text field; --sft reads --prompt-field, "
                                                "--response-field or --messages-field");
    sft.prompt_field = args.option_or("prompt-field", sft.prompt_field);
    sft.response_field = args.option_or("response-field", sft.response_field);
    sft.messages_field = args.option_or("messages-field", sft.messages_field);
    if (const auto path = args.option("chat-template")) sft.chat_template = read_chat_template(*path);
  }
  o.tokenizer_training.threads = s.threads;
  o.tokenizer_training.field = s.encode.field;
  o.tokenizer_training.text_split = s.text_split;
  o.tokenizer_training.max_document_bytes = s.max_document_bytes;
  return o;
}

void report(const PrepareResult& result, const std::string& dir, double seconds) {
  const auto& m = result.manifest;
  uint64_t bytes = 0;
  for (const auto& input : m.inputs) bytes += input.bytes;
  for (int s : {kTrainSplit, kValidSplit}) {
    const auto& split = m.splits[static_cast<size_t>(s)];
    int64_t loss_tokens = 0;
    for (const auto& shard : split.shards) loss_tokens += shard.loss_tokens;
    const bool sft = !split.shards.empty() && !split.shards.front().mask_file.empty();
    spdlog::info("{}: {} documents, {} tokens in {} shard(s){}", split_name(s), split.documents, split.tokens,
                 split.shards.size(), sft ? " (" + std::to_string(loss_tokens) + " counted by the loss)" : "");
  }
  std::string skipped;
  for (const auto& [reason, count] : m.skipped)
    if (count > 0) skipped += (skipped.empty() ? "" : ", ") + std::to_string(count) + " " + reason;
  if (!skipped.empty()) spdlog::info("skipped: {}", skipped);
  if (!result.up_to_date)
    spdlog::info("{} inputs ({}) -> {} in {} ({:.1f} MB/s)", m.inputs.size(), megabytes(static_cast<double>(bytes)),
                 dir, format_duration(seconds), seconds > 0 ? static_cast<double>(bytes) / seconds / 1e6 : 0.0);
}

}  // namespace

int prepare_command(const Argv& argv, const ProcessGroup&) {
  auto option_names = tokenizer_options();
  option_names.insert({"out", "field", "valid-fraction", "threads", "on-error", "train-tokenizer", "vocab",
                       "shard-tokens", "max-document-mb", "tokenizer-sample-mb", "prompt-field", "response-field",
                       "messages-field", "chat-template"});
  const auto args = parse_args(argv, option_names, {"doc-per-file", "blank-line-docs", "sft"}, kOneOrMore, kUsage);
  if (!args.sets.empty()) throw ConfigError(std::string("loom prepare takes no --set\nusage: ") + kUsage);
  const PrepareOptions options = parse_options(args);
  const auto start = std::chrono::steady_clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  ProgressBar bar(stderr_is_terminal());
  double drawn_at = -1;
  const PrepareResult result = prepare(options, [&](const StreamProgress& p) {
    const double now = seconds();
    if (now - drawn_at < 0.2 && p.bytes_read < p.bytes_total) return;  // a few redraws a second
    drawn_at = now;
    bar.show(progress_text(p, now));
  });
  report(result, options.out.string(), seconds());
  return 0;
}

}  // namespace loom::cli
