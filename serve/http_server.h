// `loom serve`'s HTTP layer: cpp-httplib (Debian's libcpp-httplib-dev) routes the OpenAI-compatible endpoints to the
// EngineWorker (serve/engine_worker.h). Each connection is served by a thread of httplib's pool, which parses the
// body (serve/openai_api.h), tokenizes the prompt, submits it and waits for the output; `stream: true` answers
// with server-sent events (`data: {chunk}` ... `data: [DONE]`) written as the pieces arrive, and a client that
// goes away mid-stream (a write fails) has its request cancelled, so its KV blocks go back to the pool at once.
//   POST /v1/completions        POST /v1/chat/completions (with a chat template; else 404 saying why)
//   GET  /v1/models             GET /health              GET /metrics (Prometheus text, serve/serve_metrics.h)
// Every error is a JSON {"error": {"message", "type", "param"}} with its 4xx/5xx status; the server keeps serving.
// The tokenizer is reached through functions (serve/ does not depend on data/), thread-safe
// (data/tokenizers/tokenizer.h).
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "serve/engine_worker.h"
#include "serve/openai_api.h"

namespace loom {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;               // 0: a free port (bind() says which)
  std::string model_name;        // what GET /v1/models lists
  int64_t context = 0;           // model.max_seq_len: prompt + max_tokens at most
  // An encoder-decoder's (the prompt is a source sentence): the target tokens a source of n tokens may have, which
  // is also max_tokens' default and bound (the source itself: context tokens at most). Unset: prompt + max_tokens
  // within the context, max_tokens 16 by default.
  std::function<int64_t(int64_t n)> target_room;
  int64_t stop_token = -1;       // end of sequence (>= 0), not part of the output
  int threads = 64;              // connections served at once (more wait in httplib's queue)
  // text -> tokens; special: special tokens written in the text become their ids (template text only)
  std::function<std::vector<int64_t>(const std::string&, bool special)> encode;
  int64_t empty_prompt_token = -1;  // the prompt of an empty text (loom generate's: end of sequence)
  std::optional<ChatFormat> chat;  // the chat template, if the server has one
  std::string no_chat_reason;      // why not, for the 404 of /v1/chat/completions
};

class HttpServer {
 public:
  HttpServer(EngineWorker& worker, HttpServerOptions options);
  ~HttpServer();
  // Binds options.host:options.port; the port bound. Throws loom::Error when it cannot.
  int bind();
  // Serves until stop() (from another thread or a signal watcher).
  void listen();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom
