// The OpenAI-compatible API's bodies (serve/openai_api.h): a request's fields become the engine's request, each bad
// field an ApiError naming it; the chat template renders a conversation piece by piece; the response and stream
// objects carry the completion; and /metrics' Prometheus text (serve/serve_metrics.h) its histogram's buckets.
#include <catch2/catch.hpp>

#include "serve/openai_api.h"
#include "serve/serve_metrics.h"

namespace {

// The param of the ApiError a body raises ("" for none), or "ok".
std::string api_error_param(const std::string& body, bool chat = false) {
  try {
    loom::parse_api_request(body, chat);
  } catch (const loom::ApiError& e) {
    CHECK(e.status == 400);
    return e.param;
  }
  return "ok";
}

}  // namespace

TEST_CASE("openai api: a completion request's fields become the engine's request", "[serve]") {
  const auto api = loom::parse_api_request(
      R"({"model": "m", "prompt": "And God", "max_tokens": 7, "temperature": 0.5, "top_p": 0.9, "top_k": 5,
          "seed": 3, "stop": ["a", "b"], "stream": true, "stream_options": {"include_usage": true}, "n": 1,
          "logprobs": 1, "echo": false, "presence_penalty": 0, "user": "u", "suffix": null, "ignore_eos": true})",
      false);
  CHECK(api.model == "m");
  CHECK(api.prompt == "And God");
  CHECK(*api.max_tokens == 7);
  CHECK(api.request.sampling.temperature == 0.5);
  CHECK(api.request.sampling.top_p == 0.9);
  CHECK(api.request.sampling.top_k == 5);
  CHECK(api.request.sampling.seed == 3);
  CHECK(api.request.stop == std::vector<std::string>{"a", "b"});
  CHECK(api.request.stream);
  CHECK(api.request.logprobs);
  CHECK(api.include_usage);
  CHECK(api.ignore_eos);
  const auto defaults = loom::parse_api_request(R"({"prompt": ["x"], "stop": "s", "top_k": -1})", false);
  CHECK(defaults.prompt == "x");
  CHECK_FALSE(defaults.max_tokens);
  CHECK(defaults.request.sampling.temperature == 1.0);  // OpenAI's default
  CHECK(defaults.request.sampling.top_k == 0);
  CHECK(defaults.request.stop == std::vector<std::string>{"s"});
  CHECK_FALSE(defaults.request.stream);
}

TEST_CASE("openai api: each bad field is named", "[serve]") {
  CHECK(api_error_param("{not json") == "");
  CHECK(api_error_param("[1]") == "");
  CHECK(api_error_param(R"({"max_tokens": 3})") == "prompt");
  CHECK(api_error_param(R"({"prompt": 1})") == "prompt");
  CHECK(api_error_param(R"({"prompt": ["a", "b"]})") == "prompt");
  CHECK(api_error_param(R"({"prompt": "a", "max_tokens": "many"})") == "max_tokens");
  CHECK(api_error_param(R"({"prompt": "a", "max_tokens": -1})") == "max_tokens");
  CHECK(api_error_param(R"({"prompt": "a", "temperature": "hot"})") == "temperature");
  CHECK(api_error_param(R"({"prompt": "a", "temperature": -1})") == "temperature");
  CHECK(api_error_param(R"({"prompt": "a", "top_p": 0})") == "top_p");
  CHECK(api_error_param(R"({"prompt": "a", "top_k": 1.5})") == "top_k");
  CHECK(api_error_param(R"({"prompt": "a", "seed": "x"})") == "seed");
  CHECK(api_error_param(R"({"prompt": "a", "stop": [1]})") == "stop");
  CHECK(api_error_param(R"({"prompt": "a", "stream": "yes"})") == "stream");
  CHECK(api_error_param(R"({"prompt": "a", "stream_options": {"x": 1}})") == "stream_options.x");
  CHECK(api_error_param(R"({"prompt": "a", "n": 2})") == "n");
  CHECK(api_error_param(R"({"prompt": "a", "best_of": 3})") == "best_of");
  CHECK(api_error_param(R"({"prompt": "a", "echo": true})") == "echo");
  CHECK(api_error_param(R"({"prompt": "a", "logprobs": 5})") == "logprobs");
  CHECK(api_error_param(R"({"prompt": "a", "frequency_penalty": 0.5})") == "frequency_penalty");
  CHECK(api_error_param(R"({"prompt": "a", "logit_bias": {"1": 2}})") == "logit_bias");
  CHECK(api_error_param(R"({"prompt": "a", "temprature": 1})") == "temprature");
  CHECK(api_error_param(R"({"prompt": "a", "messages": []})") == "messages");  // a chat field in completions
  CHECK(api_error_param(R"({"messages": [{"role": "user"}]})", true) == "messages");
  CHECK(api_error_param(R"({"messages": []})", true) == "messages");
  CHECK(api_error_param(R"({"prompt": "a"})", true) == "messages");
  CHECK(api_error_param(R"({"messages": [{"role": "user", "content": "hi"}], "logprobs": true})", true) ==
        "logprobs");
  CHECK(api_error_param(R"({"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 3})",
                        true) == "ok");
  const loom::ApiError error(400, "\"n\" must be 1", "n");
  const auto body = loom::error_body(error);
  CHECK(body["error"]["message"] == "\"n\" must be 1");
  CHECK(body["error"]["type"] == "invalid_request_error");
  CHECK(body["error"]["param"] == "n");
  CHECK(loom::error_body(loom::ApiError(404, "no"))["error"]["param"].is_null());
}

TEST_CASE("openai api: a chat renders as the template's pieces, the assistant's prefix last", "[serve]") {
  loom::ChatFormat format;
  format.roles["system"] = {"<|system|>\n", "<|end|>\n"};
  format.roles["user"] = {"<|user|>\n", "<|end|>\n"};
  format.roles["assistant"] = {"<|assistant|>\n", "<|end|>\n"};
  const auto pieces = loom::render_chat(format, {{"system", "Be brief."}, {"user", "<|end|> hi"}});
  std::vector<std::pair<std::string, bool>> got;
  for (const auto& p : pieces) got.emplace_back(p.text, p.template_text);
  const std::vector<std::pair<std::string, bool>> want{
      {"<|system|>\n", true}, {"Be brief.", false},  {"<|end|>\n", true},       {"<|user|>\n", true},
      {"<|end|> hi", false},  {"<|end|>\n", true},   {"<|assistant|>\n", true}};
  CHECK(got == want);
  CHECK_THROWS_AS(loom::render_chat(format, {{"tool", "x"}}), loom::ApiError);
}

TEST_CASE("openai api: responses and stream chunks carry the completion and its speculative acceptance, metrics' "
          "histogram is cumulative",
          "[serve]") {
  auto api = loom::parse_api_request(R"({"prompt": "a", "model": "m", "logprobs": 1})", false);
  loom::Completion c;
  c.tokens = {4, 5, 6};
  c.text = "xyz";
  c.logprobs = {-0.5, -1.0, -2.0};
  c.finish = loom::FinishReason::kStop;
  const auto r = loom::completion_response(api, "cmpl-1", 100, 2, c);
  CHECK(r["object"] == "text_completion");
  CHECK(r["choices"][0]["text"] == "xyz");
  CHECK(r["choices"][0]["finish_reason"] == "stop");
  CHECK(r["choices"][0]["logprobs"]["token_logprobs"] == nlohmann::json({-0.5, -1.0, -2.0}));
  CHECK(r["usage"] == nlohmann::json({{"prompt_tokens", 2}, {"completion_tokens", 3}, {"total_tokens", 5}}));
  loom::TextDelta d;
  d.text = "xy";
  const auto chunk = loom::stream_chunk(api, "cmpl-1", 100, d, "");
  CHECK(chunk["choices"][0]["text"] == "xy");
  CHECK(chunk["choices"][0]["finish_reason"].is_null());
  api.chat = true;
  CHECK(loom::completion_response(api, "c", 1, 2, c)["choices"][0]["message"]["content"] == "xyz");
  CHECK(loom::stream_chunk(api, "c", 1, d, "length")["choices"][0]["delta"]["content"] == "xy");
  CHECK(loom::usage_chunk(api, "c", 1, 2, 3, c)["choices"].empty());
  CHECK_FALSE(r.contains("metrics"));  // no speculation: no per-request metrics
  // A speculating server's request: vLLM's metrics.speculative_decoding, in the response and the usage chunk.
  c.drafted = 12;
  c.accepted = 9;
  c.spec_steps = 4;
  c.speculate_k = 3;
  const nlohmann::json spec = {{"num_spec_steps", 4},          {"num_draft_tokens", 12},
                               {"num_accepted_draft_tokens", 9}, {"draft_acceptance_rate", 0.75},
                               {"mean_acceptance_length", 3.25}, {"num_spec_tokens", 3}};
  CHECK(loom::completion_response(api, "c", 1, 2, c)["metrics"]["speculative_decoding"] == spec);
  CHECK(loom::usage_chunk(api, "c", 1, 2, 3, c)["metrics"]["speculative_decoding"] == spec);

  loom::ServeMetrics m;
  m.ttft.observe(0.003);
  m.ttft.observe(0.2);
  m.ttft.observe(100);
  const auto text = m.prometheus();
  CHECK(text.find("loom_time_to_first_token_seconds_bucket{le=\"0.005\"} 1\n") != std::string::npos);
  CHECK(text.find("loom_time_to_first_token_seconds_bucket{le=\"0.25\"} 2\n") != std::string::npos);
  CHECK(text.find("loom_time_to_first_token_seconds_bucket{le=\"30\"} 2\n") != std::string::npos);
  CHECK(text.find("loom_time_to_first_token_seconds_bucket{le=\"+Inf\"} 3\n") != std::string::npos);
  CHECK(text.find("loom_time_to_first_token_seconds_count 3\n") != std::string::npos);
  loom::RateWindow rate(std::chrono::seconds(10));
  const auto t0 = std::chrono::steady_clock::now();
  rate.add(50, t0);
  rate.add(30, t0 + std::chrono::seconds(5));
  CHECK(rate.per_second(t0 + std::chrono::seconds(6)) == Approx(8.0));
  CHECK(rate.per_second(t0 + std::chrono::seconds(12)) == Approx(3.0));
  CHECK(rate.per_second(t0 + std::chrono::seconds(30)) == 0.0);
}
