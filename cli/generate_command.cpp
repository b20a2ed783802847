// `loom generate RUN_DIR --prompt TEXT`: samples a continuation of the prompt from a trained GPT and
// prints it as it is sampled, a token at a time (flushed), ending at the tokenizer's end-of-sequence token
// unless --ignore-eos; --json prints one object at the end instead.
// `loom generate RUN_DIR --input prompts.jsonl --output out.jsonl`: every prompt of the file (serve/request_file.h)
// through the inference engine (serve/engine.h: continuous batching over a paged KV cache), one output line per
// prompt in file order; --sequential decodes them one at a time with the single-prompt path instead (the
// benchmark's baseline: scripts/bench_serve.sh). Both print their throughput to stderr.
// Under `mpirun -np N` with --set parallel.tp=N, --input runs the model split over the ranks (cli/tp_serving.h).
// An encoder-decoder (translation) run takes --input only: each prompt is a source sentence and its text the
// translation (cli/served_model_options.h; --temperature 0 decodes greedily, as loom translate --beam 1).
// A run without a tokenizer.model (the synthetic tasks) reads --input prompts and writes texts as token ids.
#include <chrono>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/served_model_options.h"
#include "cli/tp_serving.h"
#include "cli/speculative_options.h"
#include "cli/tokenizer_args.h"
#include "core/cpu_allocator.h"
#include "core/error.h"
#include "data/pairs/seq2seq_batch.h"
#include "data/tokenizers/incremental_decoder.h"
#include "data/tokenizers/tokenizer.h"
#include "models/beam_search.h"
#include "models/generate.h"
#include "serve/engine.h"
#include "serve/request_file.h"
#include "train/inference.h"

namespace loom::cli {
namespace {

// Far more than any sampling session wants, and few enough that a typo cannot run for days.
constexpr int64_t kMaxNewTokens = int64_t{1} << 20;

// Without a tokenizer (a run on token ids: the synthetic tasks) text is token ids separated by spaces, as
// loom translate reads and writes it.
std::string generated_text(const Tokenizer* tokenizer, const std::vector<int64_t>& ids) {
  if (tokenizer) return decode_lines(*tokenizer, ids);
  std::string out;
  for (const int64_t id : ids) out += (out.empty() ? "" : " ") + std::to_string(id);
  return out;
}


// --input/--output: every prompt of the file through the engine (or, --sequential, one at a time).
// Under tensor parallelism every rank reads the same file and runs the same engine steps (the engine agrees on
// rank 0's logits), each with its shard of the model; rank 0 writes the output.
// An encoder-decoder run (served->encodes()) translates: each prompt is a source sentence, its text the
// translation, at most loom translate's decode.* length (an empty source: an empty translation).
int generate_file(const Args& args, const LoadedModel& loaded, const std::shared_ptr<ServedModel>& served, Gpt model,
                  const Tokenizer* tokenizer, const GenerationRequest& defaults, bool writes) {
  const std::string input = *args.option("input");
  const auto output = args.option("output");
  if (!output) throw ConfigError("--input needs --output FILE for the completions");
  auto lines = read_prompt_file(input, defaults);
  const int64_t context = served->config().max_seq_len;
  for (auto& line : lines) {
    const std::string where = input + ":" + std::to_string(line.line);
    if (tokenizer) {
      const auto ids = tokenizer->encode(line.prompt);
      line.request.prompt.assign(ids.begin(), ids.end());
    } else {
      line.request.prompt = parse_token_ids(line.prompt, where + ": \"prompt\"", loaded.config.model.vocab_size);
    }
    if (served->encodes()) {
      const auto n = static_cast<int64_t>(line.request.prompt.size());
      line.request.max_tokens = std::min(line.request.max_tokens, translation_max_length(loaded.config.decode, n, context));
      if (n == 0) {  // nothing to translate: done at once (the engine never encodes it)
        line.request.prompt.push_back(kEosId);
        line.request.max_tokens = 0;
      }
    }
    if (line.request.prompt.empty() && !tokenizer)
      throw ConfigError(where + ": \"prompt\" is empty, and this run has no tokenizer.model for its end of sequence");
    if (line.request.prompt.empty()) line.request.prompt.push_back(tokenizer->require_eos());
    if (static_cast<int64_t>(line.request.prompt.size()) > context)
      throw ConfigError(input + ":" + std::to_string(line.line) + ": \"prompt\" is " +
                        std::to_string(line.request.prompt.size()) + " tokens, more than model.max_seq_len=" +
                        std::to_string(context));
  }
  const auto detokenize = [&](const std::vector<int64_t>& ids) { return generated_text(tokenizer, ids); };
  std::vector<Completion> completions;
  const auto start = std::chrono::steady_clock::now();
  std::string detail;
  if (args.flag("sequential") && (args.option("draft") || args.option("speculate")))
    throw ConfigError("--sequential decodes without speculation: leave out --draft / --speculate");
  if (args.flag("sequential")) {
    for (size_t i = 0; i < lines.size(); ++i) {
      const auto& r = lines[i].request;
      Completion c;
      c.id = static_cast<int64_t>(i);
      bool cut = false;  // by a stop string: c.text is the text before it
      generate(model, r.prompt, r.max_tokens, r.sampling, [&](int64_t id) {
        c.tokens.push_back(id);
        if (id == r.stop_token) {
          c.tokens.pop_back();
          c.finish = FinishReason::kStop;
          return false;
        }
        if (r.stop.empty()) return true;
        c.text = detokenize(c.tokens);
        const size_t at = first_stop_string(c.text, r.stop);
        if (at == std::string::npos) return true;
        c.text.resize(at);
        c.finish = FinishReason::kStop;
        cut = true;
        return false;
      }, r.stop_token);
      if (!cut) c.text = detokenize(c.tokens);
      completions.push_back(std::move(c));
    }
  } else {
    EngineOptions options;
    options.max_batch = args.int_option("max-batch", 64, 1, 4096);
    options.block_size = args.int_option("block-size", 16, 1, 4096);
    options.kv_bytes = args.int_option("kv-mb", 256, 1, int64_t{1} << 20) << 20;
    options.kv_blocks = args.int_option("kv-blocks", 0, 0, int64_t{1} << 30);  // 0: as many as --kv-mb holds
    options.prefix_caching = args.flag("prefix-caching");
    options.detokenize = detokenize;
    const std::string speculation = configure_speculation(args, loaded, args.positional[0], options);
    if (!speculation.empty()) std::cerr << speculation << std::endl;
    retain_freed_malloc_memory();
    Engine engine(served, options);
    for (auto& line : lines) engine.add(std::move(line.request));
    completions = engine.run();
    const auto& stats = engine.stats();
    detail = ", " + std::to_string(stats.forwards) + " forwards, " +
             (served->encodes() ? std::to_string(stats.encoded_sources) + " sources encoded, " : "") +
             std::to_string(stats.preemptions) +
             " preemptions, peak " + std::to_string(stats.peak_used_blocks) + " of " +
             std::to_string(engine.pool().blocks()) + " KV blocks";
    if (options.prefix_caching)
      detail += ", " + std::to_string(stats.prefix_hit_tokens) + " prompt tokens from the prefix cache";
    if (options.drafter)
      detail += ", " + std::to_string(stats.accepted_tokens) + " of " + std::to_string(stats.drafted_tokens) +
                " drafted tokens accepted (" +
                std::to_string(stats.drafted_tokens > 0 ? 100.0 * static_cast<double>(stats.accepted_tokens) /
                                                              static_cast<double>(stats.drafted_tokens)
                                                        : 0.0) +
                "%)";
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!writes) return 0;
  std::ofstream out(*output);
  if (!out) throw ConfigError("cannot write --output " + *output);
  int64_t tokens = 0;
  for (const auto& c : completions) {
    tokens += static_cast<int64_t>(c.tokens.size());
    nlohmann::json line{{"index", c.id},
                        {"text", c.text},
                        {"tokens", c.tokens.size()},
                        {"finish_reason", finish_reason_name(c.finish)}};
    if (c.drafted > 0 || args.option("draft") || args.option("speculate")) {
      line["drafted_tokens"] = c.drafted;
      line["accepted_tokens"] = c.accepted;
      line["spec_steps"] = c.spec_steps;  // steps that verified proposals of it
    }
    out << line.dump() << "\n";
  }
  out.close();
  if (!out) throw Error("writing " + *output + " failed");
  std::cerr << completions.size() << " prompts, " << tokens << " tokens in " << seconds << " s: "
            << (seconds > 0 ? static_cast<double>(tokens) / seconds : 0.0) << " tokens/s" << detail << std::endl;
  return 0;
}

}  // namespace

int generate_command(const Argv& argv, const ProcessGroup& processes) {
  const std::string usage =
      "loom generate RUN_DIR --prompt TEXT [--max-new-tokens N] [--temperature T] [--top-k K] [--top-p P] "
      "[--seed S] [--step S] [--no-cache] [--ignore-eos] [--json]\n"
      "       loom generate RUN_DIR --input PROMPTS.jsonl --output OUT.jsonl [--max-new-tokens N] [--temperature T] "
      "[--top-k K] [--top-p P] [--seed S] [--step S] [--ignore-eos] [--max-batch N] [--kv-mb MB] [--kv-blocks N] "
      "[--block-size N] "
      "[--prefix-caching] [--sequential] [--set parallel.tp=N under mpirun -np N] " + std::string(kSpeculativeUsage);
  const auto args = parse_args(argv,
                               with_speculative_options({"prompt", "max-new-tokens", "temperature", "top-k", "top-p",
                                                         "seed", "step", "input", "output", "max-batch", "kv-mb",
                                                         "kv-blocks", "block-size"}),
                               with_speculative_flags(
                                   {"no-cache", "ignore-eos", "json", "sequential", "prefix-caching"}),
                               1, usage);
  SamplingOptions sampling;
  sampling.temperature = args.double_option("temperature", 0.8);
  sampling.top_k = args.int_option("top-k", 0);
  sampling.top_p = args.double_option("top-p", 1.0);
  sampling.seed = static_cast<uint64_t>(args.int_option("seed", 0));
  sampling.use_cache = !args.flag("no-cache");
  const int64_t max_new = args.int_option("max-new-tokens", 64, 0, kMaxNewTokens);
  if (sampling.temperature < 0) throw ConfigError("--temperature must be >= 0 (0: greedy)");
  if (sampling.top_k < 0) throw ConfigError("--top-k must be >= 0 (0: off)");
  if (sampling.top_p <= 0 || sampling.top_p > 1) throw ConfigError("--top-p must be in (0, 1]");

  std::optional<int64_t> step;
  if (args.option("step")) step = args.int_option("step", 0);
  const int64_t tp = serving_tp(args, processes, "loom generate");
  if (tp > 1 && (!args.option("input") || args.flag("sequential")))
    throw ConfigError("loom generate: --set parallel.tp splits the model for --input files through the engine only "
                      "(not --prompt, not --sequential)");
  const auto loaded = load_serving_model(args.positional[0], step, tp, processes);
  auto model = loaded.as<Gpt>();
  const bool translates = !model && loaded.as<EncoderDecoder>();
  if (!model && !(translates && args.option("input")))
    throw ConfigError(args.positional[0] + " is a model.arch=" + enum_name(loaded.config.model.arch) + " run: " +
                      (translates ? "loom generate translates with it through the engine with --input FILE (each "
                                    "prompt a source sentence), not --prompt; or loom translate decodes it"
                                  : "loom generate samples GPT-family runs and translates encoder-decoder ones"));
  std::unique_ptr<Tokenizer> tokenizer;
  if (!loaded.config.tokenizer.model.empty()) {
    tokenizer = load_tokenizer(loaded.config.tokenizer);
  } else if (!args.option("input")) {
    throw ConfigError("the run has no tokenizer.model to turn the prompt into tokens (--input FILE reads prompts "
                      "of token ids then)");
  }
  const auto eos = translates ? std::optional<int32_t>(static_cast<int32_t>(kEosId))
                   : tokenizer ? tokenizer->eos_id()
                               : std::nullopt;
  const int64_t stop = args.flag("ignore-eos") || !eos ? -1 : *eos;
  if (args.option("input")) {
    if (args.option("prompt")) throw ConfigError("give --prompt or --input, not both");
    const auto served = served_model(loaded, args, tp, "loom generate");
    GenerationRequest defaults;
    // A translation ends at its end of sequence or loom translate's length limit, unless --max-new-tokens is less.
    defaults.max_tokens = translates && !args.option("max-new-tokens") ? kMaxNewTokens : max_new;
    defaults.sampling = sampling;
    defaults.stop_token = stop;
    return generate_file(args, loaded, served, model, tokenizer.get(), defaults, processes.info().rank == 0);
  }
  for (const auto& name : kSpeculativeOptions)
    if (args.option(name)) throw ConfigError("--" + name + " is for --input: the engine decodes speculatively");
  if (args.flag("speculate-adaptive")) throw ConfigError("--speculate-adaptive is for --input");
  const std::string prompt_text = args.option_or("prompt", "");
  const auto ids = tokenizer->encode(prompt_text);
  // An empty prompt starts a fresh line, as after the end of a verse.
  std::vector<int64_t> prompt(ids.begin(), ids.end());
  if (prompt.empty()) prompt.push_back(tokenizer->require_eos());

  const bool json = args.flag("json");
  const std::vector<int32_t> context(prompt.begin(), prompt.end());
  IncrementalDecoder text(*tokenizer, context);
  std::vector<int32_t> generated;
  if (!json) std::cout << decode_lines(*tokenizer, context) << std::flush;
  generate(model, prompt, max_new, sampling, [&](int64_t id) {
    generated.push_back(static_cast<int32_t>(id));
    if (!json && id != stop) std::cout << text.add(static_cast<int32_t>(id)) << std::flush;
    return true;
  }, stop);
  const bool stopped = !generated.empty() && generated.back() == stop;
  if (stopped) generated.pop_back();
  if (json) {
    std::vector<int32_t> all = context;
    all.insert(all.end(), generated.begin(), generated.end());
    std::cout << nlohmann::json{{"prompt", prompt_text},
                                {"tokens", generated},
                                {"text", decode_lines(*tokenizer, all)},
                                {"stop", stopped ? "eos" : "length"}}
                     .dump()
              << std::endl;
  } else {
    std::cout << text.finish() << std::endl;
  }
  return 0;
}

}  // namespace loom::cli
