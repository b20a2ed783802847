#include "serve/http_server.h"

#include <httplib.h>

#include <sys/socket.h>

#include <atomic>
#include <ctime>

#include "core/error.h"
#include "serve/connection_watch.h"

namespace loom {
namespace {

constexpr auto kHttpWaitSlice = std::chrono::milliseconds(200);

void http_json(httplib::Response& res, int status, const nlohmann::json& body) {
  res.status = status;
  res.set_content(body.dump(), "application/json");
}

std::string http_event(const nlohmann::json& body) { return "data: " + body.dump() + "\n\n"; }

std::string http_trim(std::string s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t\r\n") - first + 1);
}

}  // namespace

// httplib's server with its listening socket in reach: Debian's build listens with a backlog of 5
// (CPPHTTPLIB_LISTEN_BACKLOG, compiled into the library), so a burst of connections would wait on SYN
// retransmissions (seconds); listen() again on the bound socket raises the backlog.
class HttpListener : public httplib::Server {
 public:
  bool raise_backlog() { return ::listen(svr_sock_, SOMAXCONN) == 0; }
};

struct HttpServer::Impl {
  EngineWorker& worker;
  HttpServerOptions options;
  HttpListener server;
  std::atomic<int64_t> next_id{0};
  int64_t started = static_cast<int64_t>(std::time(nullptr));

  Impl(EngineWorker& w, HttpServerOptions o) : worker(w), options(std::move(o)) {}

  // A checked request with its prompt's tokens, max_tokens and stop token filled in.
  GenerationRequest prepare(ApiRequest& api) {
    const char* prompt_field = api.chat ? "messages" : "prompt";
    GenerationRequest request = api.request;
    if (api.chat) {
      for (const auto& piece : render_chat(*options.chat, api.messages)) {
        const auto ids = options.encode(piece.text, piece.template_text);
        request.prompt.insert(request.prompt.end(), ids.begin(), ids.end());
      }
      const auto end = http_trim(options.chat->roles.at(options.chat->assistant).second);
      if (!end.empty()) request.stop.push_back(end);
    } else {
      request.prompt = options.encode(api.prompt, true);
    }
    if (request.prompt.empty()) {
      if (options.empty_prompt_token < 0) throw ApiError(400, "the prompt is empty", prompt_field);
      request.prompt.push_back(options.empty_prompt_token);
    }
    const int64_t n = static_cast<int64_t>(request.prompt.size());
    const int64_t context = options.context;
    if (n > context)
      throw ApiError(400,
                     "the prompt is " + std::to_string(n) + " tokens, more than the model's context of " +
                         std::to_string(context) + " tokens (model.max_seq_len): shorten it",
                     prompt_field);
    const int64_t room = options.target_room ? options.target_room(n) : context - n;
    request.max_tokens =
        api.max_tokens.value_or(api.chat || options.target_room ? room : std::min<int64_t>(16, room));
    if (request.max_tokens > room)
      throw ApiError(400,
                     options.target_room
                         ? "max_tokens=" + std::to_string(request.max_tokens) + " is more than a translation of the " +
                               std::to_string(n) + " source tokens may have (decode.max_len_a / max_len_b, the " +
                               "context): ask for at most " + std::to_string(room)
                         : "max_tokens=" + std::to_string(request.max_tokens) + " and the prompt's " +
                               std::to_string(n) + " tokens exceed the model's context of " +
                               std::to_string(context) + " tokens: ask for at most " + std::to_string(room),
                     api.max_tokens ? "max_tokens" : prompt_field);
    request.stop_token = api.ignore_eos ? -1 : options.stop_token;
    return request;
  }

  void completions(const httplib::Request& req, httplib::Response& res, bool chat) {
    if (chat && !options.chat) throw ApiError(404, options.no_chat_reason, "", "not_found_error");
    auto api = parse_api_request(req.body, chat);
    if (api.model.empty()) api.model = options.model_name;
    auto request = prepare(api);
    const int64_t prompt_tokens = static_cast<int64_t>(request.prompt.size());
    const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id++);
    const int64_t created = static_cast<int64_t>(std::time(nullptr));
    auto job = worker.submit(std::move(request), api.request.stream);
    if (!api.request.stream) {
      std::vector<TextDelta> deltas;
      std::optional<Completion> done;
      std::string error;
      // The client may go away while it waits: then the request is cancelled and its blocks freed.
      const ConnectionWatch client(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
      do {
        deltas.clear();
        if (client.gone()) worker.cancel(job);  // answered cancelled at once; nobody reads the response
      } while (!worker.wait(*job, deltas, done, error, kHttpWaitSlice));
      if (!error.empty()) throw ApiError(503, error, "", "server_error");
      if (done->finish == FinishReason::kCancelled)
        throw ApiError(503, "the request was cancelled (the client went away or the server is shutting down)", "",
                     "server_error");
      http_json(res, 200, completion_response(api, id, created, prompt_tokens, *done));
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    auto* worker_ptr = &worker;
    res.set_chunked_content_provider(
        "text/event-stream",
        [worker_ptr, job, api, id, created, prompt_tokens](size_t, httplib::DataSink& sink) {
          const auto send = [&](const std::string& event) { return sink.write(event.data(), event.size()); };
          int64_t generated = 0;
          while (true) {
            std::vector<TextDelta> deltas;
            std::optional<Completion> done;
            std::string error;
            const bool over = worker_ptr->wait(*job, deltas, done, error, kHttpWaitSlice);
            TextDelta last;
            for (auto& d : deltas) {
              generated += static_cast<int64_t>(d.tokens.size());
              if (d.final) {
                last = std::move(d);
              } else if ((!d.text.empty() || api.request.logprobs) &&  // held-back text: its tokens' logprobs
                         !send(http_event(stream_chunk(api, id, created, d, "")))) {
                worker_ptr->cancel(job);  // the client is gone: its blocks go back to the pool
                return false;
              }
            }
            if (!over) continue;
            if (error.empty() && done->finish == FinishReason::kCancelled)
              error = "the request was cancelled: the server is shutting down";
            if (!error.empty()) {
              send(http_event(error_body(ApiError(503, error, "", "server_error"))));
            } else {
              send(http_event(stream_chunk(api, id, created, last, finish_reason_name(done->finish))));
              if (api.include_usage) send(http_event(usage_chunk(api, id, created, prompt_tokens, generated, *done)));
            }
            send("data: [DONE]\n\n");
            sink.done();
            return true;
          }
        },
        [worker_ptr, job](bool success) {
          if (!success) worker_ptr->cancel(job);
        });
  }

  // Runs a handler; an ApiError becomes its JSON error, anything else a 500 naming it.
  void guarded(const httplib::Request& req, httplib::Response& res,
               const std::function<void(const httplib::Request&, httplib::Response&)>& handler) {
    try {
      handler(req, res);
    } catch (const ApiError& e) {
      http_json(res, e.status, error_body(e));
    } catch (const std::exception& e) {
      http_json(res, 500, error_body(ApiError(500, e.what(), "", "server_error")));
    }
  }

  void routes() {
    server.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      guarded(req, res, [this](const auto& q, auto& r) { completions(q, r, false); });
    });
    server.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      guarded(req, res, [this](const auto& q, auto& r) { completions(q, r, true); });
    });
    server.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      http_json(res, 200,
                {{"object", "list"},
                 {"data",
                  {{{"id", options.model_name},
                    {"object", "model"},
                    {"created", started},
                    {"owned_by", "loom"},
                    {"max_model_len", options.context}}}}});
    });
    server.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      http_json(res, 200, {{"status", "ok"}});
    });
    server.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(worker.metrics().prometheus(), "text/plain; version=0.0.4");
    });
    // What no route answered (an unknown path, the wrong method, a request httplib could not parse): a JSON error.
    server.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req,
                                                                     httplib::Response& res) {
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;  // a handler's own error
      static const std::map<std::string, std::string> kMethods{{"/v1/completions", "POST"},
                                                               {"/v1/chat/completions", "POST"},
                                                               {"/v1/models", "GET"},
                                                               {"/health", "GET"},
                                                               {"/metrics", "GET"}};
      const auto known = kMethods.find(req.path);
      if (res.status == 404 && known != kMethods.end()) {
        http_json(res, 405,
                  error_body(ApiError(405, req.method + " " + req.path + " is not served: use " + known->second)));
        res.set_header("Allow", known->second);
      } else if (res.status == 404) {
        http_json(res, 404,
                  error_body(ApiError(404,
                                      "no endpoint " + req.method + " " + req.path +
                                          " (POST /v1/completions, POST /v1/chat/completions, GET /v1/models, "
                                          "GET /health, GET /metrics)",
                                      "", "not_found_error")));
      } else if (res.status == 413) {
        http_json(res, 413, error_body(ApiError(413, "the body is larger than 16 MiB")));
      } else {
        http_json(res, res.status, error_body(ApiError(res.status, "a malformed HTTP request")));
      }
      return httplib::Server::HandlerResponse::Handled;
    }));
    server.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "an unknown error";
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      http_json(res, 500, error_body(ApiError(500, what, "", "server_error")));
    });
    const int threads = options.threads;
    server.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
    server.set_payload_max_length(size_t{16} << 20);
    // A stream's pieces are small writes: without TCP_NODELAY, Nagle's algorithm holds each until the client's
    // delayed ACK of the last (~40 ms on Linux), which would be every stream's time to first token.
    server.set_tcp_nodelay(true);
  }
};

HttpServer::HttpServer(EngineWorker& worker, HttpServerOptions options)
    : impl_(std::make_unique<Impl>(worker, std::move(options))) {
  LOOM_CHECK(impl_->options.encode, "the HTTP server needs the tokenizer's encode");
  LOOM_CHECK(!impl_->options.chat || impl_->options.chat->roles.count(impl_->options.chat->assistant),
             "the chat template has no role \"", impl_->options.chat ? impl_->options.chat->assistant : "", "\"");
  impl_->routes();
}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
  auto& o = impl_->options;
  int port = o.port;
  if (port == 0)
    port = impl_->server.bind_to_any_port(o.host);
  else if (!impl_->server.bind_to_port(o.host, port))
    port = -1;
  if (port < 0)
    throw Error("cannot listen on " + o.host + ":" + std::to_string(o.port) +
                ": the port is taken or the address is not this machine's (--port 0 picks a free port)");
  if (!impl_->server.raise_backlog()) throw Error("cannot listen on " + o.host + ":" + std::to_string(port));
  return port;
}

void HttpServer::listen() { impl_->server.listen_after_bind(); }

void HttpServer::stop() { impl_->server.stop(); }

}  // namespace loom
