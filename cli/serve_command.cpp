// `loom serve RUN_DIR [--port N] [--host H]`: an OpenAI-compatible HTTP server over the inference engine
// (serve/http_server.h: POST /v1/completions, POST /v1/chat/completions, GET /v1/models, /health, /metrics). It
// loads the run's model and tokenizer, starts the engine's worker thread (serve/engine_worker.h) and serves until
// SIGINT/SIGTERM (core/signals.h), then refuses new requests, cancels the live ones and exits 0. It prints the
// address it listens on (with --port 0, the free port it picked) on stdout once it accepts connections.
// The chat endpoint renders conversations with a chat template: --chat-template FILE, else the one the run's
// training data was prepared with (loom prepare --sft --chat-template, recorded in the data's manifest.json).
// Under `mpirun -np N` with --set parallel.tp=N the model is split over the ranks: rank 0 serves HTTP and leads
// every engine step, the others follow it (serve/step_broadcast.h) and all end with rank 0's stop.
// --dry-run prints what the KV cache budget holds (bytes per token, blocks, tokens of context, full-context
// sequences) and exits without serving.
// An encoder-decoder (translation) run is served too (cli/served_model_options.h): a prompt is a source sentence,
// its completion the translation (greedy with temperature 0, as loom translate --beam 1); no chat completions.
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/served_model_options.h"
#include "cli/speculative_options.h"
#include "cli/tp_serving.h"
#include "core/cpu_allocator.h"
#include "core/error.h"
#include "core/signals.h"
#include "data/pairs/seq2seq_batch.h"
#include "data/prepare/sft_record.h"
#include "data/tokenizers/tokenizer.h"
#include "models/beam_search.h"
#include "serve/engine.h"
#include "serve/engine_worker.h"
#include "serve/http_server.h"
#include "serve/step_broadcast.h"
#include "train/inference.h"

namespace loom::cli {
namespace {

ChatFormat chat_format(const ChatTemplate& t) {
  ChatFormat format;
  for (const auto& [role, r] : t.roles) format.roles[role] = {r.prefix, r.suffix};
  return format;
}

// The chat template the run's training data was prepared with, if any: (format, where it came from).
std::optional<ChatFormat> data_chat_format(const Config& config, std::string& source) {
  namespace fs = std::filesystem;
  for (const auto& data : config.data.train) {
    const fs::path path(data.path);
    const auto manifest = (fs::is_directory(path) ? path : path.parent_path()) / "manifest.json";
    std::ifstream in(manifest);
    if (!in) continue;
    const auto json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!json.is_object() || !json.contains("options")) continue;
    const auto& options = json["options"];
    if (!options.contains("sft") || !options["sft"].is_object()) continue;
    const auto& chat = options["sft"].value("chat_template", nlohmann::json(nullptr));
    if (!chat.is_object() || !chat.contains("roles")) continue;
    ChatFormat format;
    for (const auto& [role, r] : chat["roles"].items())
      format.roles[role] = {r.value("prefix", ""), r.value("suffix", "")};
    source = manifest.string();
    return format;
  }
  return std::nullopt;
}

}  // namespace

int serve_command(const Argv& argv, const ProcessGroup& processes) {
  const std::string usage =
      "loom serve RUN_DIR [--port N] [--host 127.0.0.1] [--step S] [--max-batch N] [--kv-mb MB] [--block-size N] "
      "[--max-prefill-tokens N] [--threads N] [--model-name NAME] [--chat-template FILE] [--ignore-eos] "
      "[--prefix-caching] [--dry-run] [--set parallel.tp=N under mpirun -np N] " + std::string(kSpeculativeUsage);
  const auto args = parse_args(argv,
                               with_speculative_options({"port", "host", "step", "max-batch", "kv-mb", "block-size",
                                                         "max-prefill-tokens", "threads", "model-name",
                                                         "chat-template"}),
                               with_speculative_flags({"ignore-eos", "dry-run", "prefix-caching"}), 1, usage);
  const int port = static_cast<int>(args.int_option("port", 8000, 0, 65535));
  const std::string run_dir = args.positional[0];
  EngineOptions engine_options;
  engine_options.max_batch = args.int_option("max-batch", 64, 1, 4096);
  engine_options.block_size = args.int_option("block-size", 16, 1, 4096);
  engine_options.kv_bytes = args.int_option("kv-mb", 256, 1, int64_t{1} << 20) << 20;
  engine_options.max_prefill_tokens = args.int_option("max-prefill-tokens", 512, 1, int64_t{1} << 20);
  engine_options.prefix_caching = args.flag("prefix-caching");
  std::optional<int64_t> step;
  if (args.option("step")) step = args.int_option("step", 0);

  const int64_t tp = serving_tp(args, processes, "loom serve");
  const auto loaded = load_serving_model(run_dir, step, tp, processes);
  const auto model = served_model(loaded, args, tp, "loom serve");
  LOOM_CHECK(!loaded.config.tokenizer.model.empty(), "the run has no tokenizer.model to turn prompts into tokens");
  if (args.flag("dry-run")) {
    int64_t blocks = 0, per_sequence = 0;
    const auto lines = kv_budget_lines(*model, engine_options.block_size, engine_options.kv_bytes, tp, &blocks,
                                       &per_sequence);
    if (processes.info().rank == 0) std::cout << lines << std::flush;
    if (blocks < per_sequence)
      throw ConfigError("--kv-mb " + std::to_string(engine_options.kv_bytes >> 20) +
                        " cannot hold one sequence of the full context: raise it");
    return 0;
  }
  const auto tokenizer = load_tokenizer(loaded.config.tokenizer);
  engine_options.detokenize = [&tokenizer](const std::vector<int64_t>& ids) { return decode_lines(*tokenizer, ids); };

  HttpServerOptions options;
  options.host = args.option_or("host", "127.0.0.1");
  options.port = port;
  options.model_name =
      args.option_or("model-name", std::filesystem::path(run_dir).lexically_normal().filename().string());
  if (options.model_name.empty()) options.model_name = "loom";
  options.context = model->config().max_seq_len;
  const auto eos = model->encodes() ? std::optional<int32_t>(static_cast<int32_t>(kEosId)) : tokenizer->eos_id();
  options.stop_token = args.flag("ignore-eos") || !eos ? -1 : *eos;
  if (model->encodes()) {  // a prompt is a source sentence; its translation ends as loom translate's would
    const DecodeConfig decode = loaded.config.decode;
    const int64_t context = loaded.config.model.max_seq_len;
    options.target_room = [decode, context](int64_t source_tokens) {
      return translation_max_length(decode, source_tokens, context);
    };
  }
  // An empty prompt starts a fresh line, as loom generate's; an empty source is refused (400).
  options.empty_prompt_token = eos && !model->encodes() ? *eos : -1;
  options.threads = static_cast<int>(args.int_option("threads", 64, 1, 4096));
  options.encode = [&tokenizer](const std::string& text, bool special) {
    EncodeOptions encode;
    encode.special_in_text = special;
    const auto ids = tokenizer->encode(text, encode);
    return std::vector<int64_t>(ids.begin(), ids.end());
  };
  std::string chat_source;
  if (const auto path = args.option("chat-template")) {
    options.chat = chat_format(read_chat_template(*path));
    chat_source = *path;
  } else {
    options.chat = data_chat_format(loaded.config, chat_source);
  }
  if (model->encodes()) {
    if (args.option("chat-template"))
      throw ConfigError("--chat-template: " + run_dir + " is an encoder-decoder (translation) run, served through "
                        "/v1/completions only: leave it out");
    options.chat.reset();
    options.no_chat_reason = "this server translates (an encoder-decoder run): POST the source sentence as the "
                             "\"prompt\" of /v1/completions; it has no chat completions";
  } else if (!options.chat)
    options.no_chat_reason =
        "this server has no chat template: the run's training data was not prepared with one (loom prepare --sft "
        "--chat-template FILE); start loom serve with --chat-template FILE, or use /v1/completions";
  else if (!options.chat->roles.count(options.chat->assistant))
    throw ConfigError("the chat template " + chat_source + " has no \"assistant\" role for the replies");

  const std::string speculation = configure_speculation(args, loaded, run_dir, engine_options);
  retain_freed_malloc_memory();
  Engine engine(model, engine_options);
  // Tensor parallelism: the other ranks step their engines as rank 0's says (serve/step_broadcast.h), over a
  // channel with no timeout (an idle server sends nothing; its followers sleep between probes).
  const auto steps = tp > 1 ? std::make_unique<StepChannel>() : nullptr;
  install_stop_signal_handlers();  // every rank: a follower stopped by mpirun's SIGTERM waits for rank 0's stop
  if (tp > 1 && processes.info().rank != 0) {
    std::cout << "loom serve: rank " << processes.info().rank << " of " << tp << " (pid " << getpid()
              << ") follows rank 0's steps" << std::endl;
    run_step_follower(engine, *steps);
    return 0;
  }
  StepLeader leader(engine, steps.get());
  auto worker_owner = std::make_unique<EngineWorker>(engine, &leader);
  auto& worker = *worker_owner;
  HttpServer server(worker, options);
  const int bound = server.bind();
  std::signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is a failed write, not the end of the server
  std::thread watcher([&] {
    while (!stop_requested()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    worker.close();  // live requests end (cancelled), new ones are refused
    server.stop();
  });
  if (!speculation.empty()) std::cout << "loom serve: " << speculation << std::endl;
  std::cout << "loom serve: " << options.model_name << " (step " << loaded.step << ", context "
            << options.context << ", " << engine.pool().blocks() << " KV blocks of " << engine_options.block_size
            << " positions" << (tp > 1 ? ", tensor-parallel over " + std::to_string(tp) + " ranks" : "")
            << (options.chat ? ", chat template from " + chat_source : "") << ") listening on http://"
            << options.host << ":" << bound << std::endl;
  server.listen();
  request_stop();  // listen() also returns when the socket fails: the watcher then ends too
  watcher.join();
  worker_owner.reset();  // its last steps (the cancellations) reach the other ranks too
  leader.finish();       // then their loops end
  std::cout << "loom serve: stopped" << std::endl;
  return 0;
}

}  // namespace loom::cli
