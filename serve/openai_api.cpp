#include "serve/openai_api.h"

#include <set>

namespace loom {
namespace {

[[noreturn]] void api_fail(const std::string& field, const std::string& what) {
  throw ApiError(400, "\"" + field + "\" " + what, field);
}

int64_t api_integer(const nlohmann::json& value, const std::string& field, int64_t min) {
  if (!value.is_number_integer() || value.get<int64_t>() < min)
    api_fail(field, "must be an integer >= " + std::to_string(min) + ", not " + value.dump());
  return value.get<int64_t>();
}

double api_number(const nlohmann::json& value, const std::string& field) {
  if (!value.is_number()) api_fail(field, "must be a number, not " + value.dump());
  return value.get<double>();
}

bool api_bool(const nlohmann::json& value, const std::string& field) {
  if (!value.is_boolean()) api_fail(field, "must be true or false, not " + value.dump());
  return value.get<bool>();
}

std::string api_string(const nlohmann::json& value, const std::string& field) {
  if (!value.is_string()) api_fail(field, "must be a string, not " + value.dump());
  return value.get<std::string>();
}

// A field loom accepts only with the value that changes nothing.
void api_only(const nlohmann::json& value, const std::string& field, const nlohmann::json& accepted,
              const std::string& why) {
  if (value != accepted) api_fail(field, "must be " + accepted.dump() + " (" + why + "), not " + value.dump());
}

std::vector<ChatMessage> api_messages(const nlohmann::json& value) {
  if (!value.is_array() || value.empty()) api_fail("messages", "must be a non-empty list of {role, content}");
  std::vector<ChatMessage> out;
  for (const auto& m : value) {
    if (!m.is_object() || !m.contains("role") || !m.contains("content") || !m["role"].is_string() ||
        !m["content"].is_string())
      api_fail("messages", "must be a list of {\"role\": string, \"content\": string}, not " + m.dump());
    out.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  }
  return out;
}

nlohmann::json api_usage(int64_t prompt_tokens, int64_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

nlohmann::json api_logprobs(const std::vector<int64_t>& tokens, const std::vector<double>& logprobs) {
  return {{"tokens", tokens}, {"token_logprobs", logprobs}, {"top_logprobs", nullptr}, {"text_offset", nullptr}};
}

}  // namespace

ApiError::ApiError(int status_, std::string message, std::string param_, std::string type_)
    : std::runtime_error(std::move(message)), status(status_), type(std::move(type_)), param(std::move(param_)) {}

nlohmann::json error_body(const ApiError& error) {
  return {{"error",
           {{"message", error.what()},
            {"type", error.type},
            {"param", error.param.empty() ? nlohmann::json(nullptr) : nlohmann::json(error.param)},
            {"code", nullptr}}}};
}

std::vector<ChatPiece> render_chat(const ChatFormat& format, const std::vector<ChatMessage>& messages) {
  std::vector<ChatPiece> pieces;
  for (const auto& m : messages) {
    const auto role = format.roles.find(m.role);
    if (role == format.roles.end()) {
      std::string known;
      for (const auto& [name, _] : format.roles) known += (known.empty() ? "" : ", ") + name;
      api_fail("messages", "has a message of role \"" + m.role + "\", which the chat template lacks (" + known + ")");
    }
    pieces.push_back({role->second.first, true});
    pieces.push_back({m.content, false});
    pieces.push_back({role->second.second, true});
  }
  pieces.push_back({format.roles.at(format.assistant).first, true});
  std::vector<ChatPiece> out;
  for (auto& p : pieces)
    if (!p.text.empty()) out.push_back(std::move(p));
  return out;
}

ApiRequest parse_api_request(const std::string& body, bool chat) {
  nlohmann::json object;
  try {
    object = nlohmann::json::parse(body);
  } catch (const nlohmann::json::parse_error& e) {
    throw ApiError(400, std::string("the body is not JSON: ") + e.what());
  }
  if (!object.is_object()) throw ApiError(400, "the body must be a JSON object");
  ApiRequest out;
  out.chat = chat;
  auto& r = out.request;
  r.sampling.temperature = 1.0;  // OpenAI's defaults
  const char* required = chat ? "messages" : "prompt";
  if (!object.contains(required)) api_fail(required, "is missing");
  for (const auto& [field, value] : object.items()) {
    if (value.is_null() && field != required) continue;  // an optional field left at its default
    if (field == "model") {
      out.model = api_string(value, field);
    } else if (!chat && field == "prompt") {
      if (value.is_array() && value.size() == 1 && value[0].is_string())
        out.prompt = value[0].get<std::string>();
      else if (value.is_string())
        out.prompt = value.get<std::string>();
      else
        api_fail(field, "must be a string (or a list of one string), not " + value.dump().substr(0, 200));
    } else if (chat && field == "messages") {
      out.messages = api_messages(value);
    } else if (field == "max_tokens" || (chat && field == "max_completion_tokens")) {
      out.max_tokens = api_integer(value, field, 0);
    } else if (field == "temperature") {
      r.sampling.temperature = api_number(value, field);
      if (r.sampling.temperature < 0) api_fail(field, "must be >= 0 (0: greedy), not " + value.dump());
    } else if (field == "top_p") {
      r.sampling.top_p = api_number(value, field);
      if (r.sampling.top_p <= 0 || r.sampling.top_p > 1) api_fail(field, "must be in (0, 1], not " + value.dump());
    } else if (field == "top_k") {  // an extension (vLLM's): -1 or 0 is off
      r.sampling.top_k = std::max<int64_t>(0, api_integer(value, field, -1));
    } else if (field == "seed") {
      if (!value.is_number_integer()) api_fail(field, "must be an integer, not " + value.dump());
      r.sampling.seed = value.get<uint64_t>();
    } else if (field == "stop") {
      if (value.is_string()) {
        r.stop.push_back(value.get<std::string>());
      } else if (value.is_array()) {
        for (const auto& s : value) {
          if (!s.is_string()) api_fail(field, "must be a string or a list of strings, not " + value.dump());
          r.stop.push_back(s.get<std::string>());
        }
      } else {
        api_fail(field, "must be a string or a list of strings, not " + value.dump());
      }
    } else if (field == "ignore_eos") {
      out.ignore_eos = api_bool(value, field);
    } else if (field == "stream") {
      r.stream = api_bool(value, field);
    } else if (field == "stream_options") {
      if (!value.is_object()) api_fail(field, "must be an object like {\"include_usage\": true}");
      for (const auto& [key, v] : value.items()) {
        if (key != "include_usage") api_fail(field + "." + key, "is not a field (include_usage)");
        out.include_usage = api_bool(v, field + "." + key);
      }
    } else if (!chat && field == "logprobs") {  // the sampled token's log-probability; no alternatives
      if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > 1)
        api_fail(field, "must be 0 or 1 (loom gives the sampled token's log-probability, no alternatives), not " +
                            value.dump());
      r.logprobs = true;
    } else if (chat && field == "logprobs") {
      api_only(value, field, false, "loom's chat replies carry no log-probabilities");
    } else if (field == "n") {
      api_only(value, field, 1, "one completion a request");
    } else if (field == "best_of") {
      api_only(value, field, 1, "one completion a request");
    } else if (field == "echo") {
      api_only(value, field, false, "the prompt is not repeated");
    } else if (field == "presence_penalty" || field == "frequency_penalty") {
      if (api_number(value, field) != 0) api_fail(field, "must be 0 (loom applies no penalties), not " + value.dump());
    } else if (field == "logit_bias") {
      api_only(value, field, nlohmann::json::object(), "loom applies no biases");
    } else if (field == "user") {
      api_string(value, field);
    } else {
      api_fail(field, std::string("is not a field of ") + (chat ? "/v1/chat/completions" : "/v1/completions"));
    }
  }
  return out;
}

nlohmann::json speculative_metrics(const Completion& c) {
  if (c.speculate_k <= 0) return nullptr;
  const auto ratio = [](int64_t a, int64_t b) { return b > 0 ? static_cast<double>(a) / static_cast<double>(b) : 0.0; };
  return {{"speculative_decoding",
           {{"num_spec_steps", c.spec_steps},
            {"num_draft_tokens", c.drafted},
            {"num_accepted_draft_tokens", c.accepted},
            {"draft_acceptance_rate", ratio(c.accepted, c.drafted)},
            {"mean_acceptance_length", 1.0 + ratio(c.accepted, c.spec_steps)},
            {"num_spec_tokens", c.speculate_k}}}};
}

nlohmann::json completion_response(const ApiRequest& request, const std::string& id, int64_t created,
                                   int64_t prompt_tokens, const Completion& c) {
  nlohmann::json choice = {{"index", 0}, {"finish_reason", finish_reason_name(c.finish)}};
  if (request.chat) {
    choice["message"] = {{"role", "assistant"}, {"content", c.text}};
    choice["logprobs"] = nullptr;
  } else {
    choice["text"] = c.text;
    choice["logprobs"] = request.request.logprobs ? api_logprobs(c.tokens, c.logprobs) : nlohmann::json(nullptr);
  }
  nlohmann::json out = {{"id", id},
                        {"object", request.chat ? "chat.completion" : "text_completion"},
                        {"created", created},
                        {"model", request.model},
                        {"choices", nlohmann::json::array({choice})},
                        {"usage", api_usage(prompt_tokens, static_cast<int64_t>(c.tokens.size()))}};
  if (c.speculate_k > 0) out["metrics"] = speculative_metrics(c);
  return out;
}

nlohmann::json stream_chunk(const ApiRequest& request, const std::string& id, int64_t created, const TextDelta& delta,
                            const std::string& finish) {
  nlohmann::json choice = {{"index", 0},
                           {"finish_reason", finish.empty() ? nlohmann::json(nullptr) : nlohmann::json(finish)}};
  if (request.chat) {
    choice["delta"] = {{"role", "assistant"}, {"content", delta.text}};
    choice["logprobs"] = nullptr;
  } else {
    choice["text"] = delta.text;
    choice["logprobs"] =
        request.request.logprobs ? api_logprobs(delta.tokens, delta.logprobs) : nlohmann::json(nullptr);
  }
  return {{"id", id},
          {"object", request.chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created},
          {"model", request.model},
          {"choices", nlohmann::json::array({choice})}};
}

nlohmann::json usage_chunk(const ApiRequest& request, const std::string& id, int64_t created, int64_t prompt_tokens,
                           int64_t completion_tokens, const Completion& completion) {
  nlohmann::json out = {{"id", id},
                        {"object", request.chat ? "chat.completion.chunk" : "text_completion"},
                        {"created", created},
                        {"model", request.model},
                        {"choices", nlohmann::json::array()},
                        {"usage", api_usage(prompt_tokens, completion_tokens)}};
  if (completion.speculate_k > 0) out["metrics"] = speculative_metrics(completion);
  return out;
}

}  // namespace loom
