// The OpenAI-compatible API's bodies (POST /v1/completions and /v1/chat/completions): a request's JSON -> a
// checked ApiRequest, or an ApiError naming the field that is wrong (what the client gets as
// {"error": {"message", "type", "param"}} with a 4xx); the engine's output -> the response and stream-chunk objects.
// Fields loom does not implement are refused unless they have their no-op value (n: 1, echo: false, penalties: 0,
// ...), so a client never gets silently different behaviour; unknown fields are refused by name.
#pragma once
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve/engine.h"

namespace loom {

struct ApiError : std::runtime_error {
  ApiError(int status, std::string message, std::string param = "", std::string type = "invalid_request_error");
  int status;
  std::string type, param;
};
// {"error": {"message": ..., "type": ..., "param": <field or null>, "code": null}}
nlohmann::json error_body(const ApiError& error);

struct ChatMessage {
  std::string role, content;
};

// A chat template: the text around each role's message (data/prepare/sft_record.h's ChatTemplate, as the server
// needs it). A conversation renders as its messages' prefix + content + suffix, then the assistant's prefix: the
// pieces are tokenized one at a time, as `loom prepare --sft` did for training, template text with its special
// tokens ("<|end|>"), message text as plain text. The assistant's suffix (trimmed) ends the reply as a stop string.
struct ChatFormat {
  std::map<std::string, std::pair<std::string, std::string>> roles;  // role -> (prefix, suffix)
  std::string assistant = "assistant";
};
struct ChatPiece {
  std::string text;
  bool template_text = false;
};
// Throws ApiError (400, "messages") for a role the template lacks.
std::vector<ChatPiece> render_chat(const ChatFormat& format, const std::vector<ChatMessage>& messages);

struct ApiRequest {
  bool chat = false;
  std::string model;                  // as the client named it (echoed back)
  std::string prompt;                 // completions: the prompt text
  std::vector<ChatMessage> messages;  // chat
  GenerationRequest request;          // everything but the prompt's tokens
  std::optional<int64_t> max_tokens;  // absent: completions 16, chat the rest of the context
  bool include_usage = false;         // stream_options.include_usage: a last chunk with the token counts
  bool ignore_eos = false;            // an extension (vLLM's): generate past the end-of-sequence token
};

// Parses and checks a body; throws ApiError (400) naming the field. The stop token and the prompt's tokens are the
// server's to fill in.
ApiRequest parse_api_request(const std::string& body, bool chat);

// The response of a finished request; `created` in seconds since the epoch.
nlohmann::json completion_response(const ApiRequest& request, const std::string& id, int64_t created,
                                   int64_t prompt_tokens, const Completion& completion);
// One server-sent event's object: a piece of text (finish empty) or the last piece (finish "stop"/"length").
nlohmann::json stream_chunk(const ApiRequest& request, const std::string& id, int64_t created, const TextDelta& delta,
                            const std::string& finish);
// The usage chunk of stream_options.include_usage (no choices), with the finished request's speculative metrics.
nlohmann::json usage_chunk(const ApiRequest& request, const std::string& id, int64_t created, int64_t prompt_tokens,
                           int64_t completion_tokens, const Completion& completion);
// A server that speculates (completion.speculate_k > 0) reports each request's acceptance as vLLM does
// (--per-request-spec-decode-metrics summary), a top-level "metrics" object beside "usage" of the response (or of
// the stream's usage chunk): {"speculative_decoding": {"num_spec_steps", "num_draft_tokens",
// "num_accepted_draft_tokens", "draft_acceptance_rate", "mean_acceptance_length", "num_spec_tokens"}}; without
// speculation the responses have no "metrics" (this function gives null).
nlohmann::json speculative_metrics(const Completion& completion);

}  // namespace loom
