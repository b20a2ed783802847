#include "serve/step_broadcast.h"

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace loom {
std::vector<uint8_t> encode_engine_ops(const std::vector<EngineOp>& ops, bool finish) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& op : ops) {
    if (op.cancel) {
      list.push_back({{"cancel", op.id}});
      continue;
    }
    const auto& r = op.request;
    list.push_back({{"prompt", r.prompt},
                    {"max_tokens", r.max_tokens},
                    {"temperature", r.sampling.temperature},
                    {"top_k", r.sampling.top_k},
                    {"top_p", r.sampling.top_p},
                    {"seed", r.sampling.seed},
                    {"stop", r.stop},
                    {"stop_token", r.stop_token},
                    {"stream", r.stream},
                    {"logprobs", r.logprobs}});
  }
  const std::string text = nlohmann::json{{"ops", list}, {"finish", finish}}.dump();
  return std::vector<uint8_t>(text.begin(), text.end());
}

std::vector<EngineOp> decode_engine_ops(const std::vector<uint8_t>& bytes, bool& finish) {
  const auto json = nlohmann::json::parse(bytes.begin(), bytes.end());
  finish = json.at("finish").get<bool>();
  std::vector<EngineOp> ops;
  for (const auto& item : json.at("ops")) {
    EngineOp op;
    if (item.contains("cancel")) {
      op.cancel = true;
      op.id = item["cancel"].get<int64_t>();
    } else {
      auto& r = op.request;
      r.prompt = item.at("prompt").get<std::vector<int64_t>>();
      r.max_tokens = item.at("max_tokens").get<int64_t>();
      r.sampling.temperature = item.at("temperature").get<double>();
      r.sampling.top_k = item.at("top_k").get<int64_t>();
      r.sampling.top_p = item.at("top_p").get<double>();
      r.sampling.seed = item.at("seed").get<uint64_t>();
      r.stop = item.at("stop").get<std::vector<std::string>>();
      r.stop_token = item.at("stop_token").get<int64_t>();
      r.stream = item.at("stream").get<bool>();
      r.logprobs = item.at("logprobs").get<bool>();
    }
    ops.push_back(std::move(op));
  }
  return ops;
}

StepLeader::StepLeader(Engine& engine, StepChannel* group)
    : engine_(engine), group_(group != nullptr && group->size() > 1 ? group : nullptr) {
  LOOM_CHECK(group_ == nullptr || group_->rank() == 0, "the step leader is rank 0 of its group");
}

int64_t StepLeader::add(GenerationRequest request) {
  if (group_) ops_.push_back({false, request, -1});
  return engine_.add(std::move(request));  // a refusal throws here and on every follower alike
}

bool StepLeader::cancel(int64_t id) {
  if (group_) ops_.push_back({true, {}, id});
  return engine_.cancel(id);
}

std::vector<Completion> StepLeader::step() {
  if (group_) {
    LOOM_CHECK(!finished_, "the step leader has finished: its followers are gone");
    group_->send(encode_engine_ops(ops_, false));
    ops_.clear();
  }
  return engine_.step();
}

void StepLeader::finish() {
  if (!group_ || finished_) return;
  finished_ = true;
  group_->send(encode_engine_ops({}, true));
}

void run_step_follower(Engine& engine, StepChannel& group) {
  LOOM_CHECK(group.rank() != 0, "rank 0 leads the steps");
  while (true) {
    bool finish = false;
    const auto ops = decode_engine_ops(group.receive(), finish);
    if (finish) return;
    for (const auto& op : ops) {
      if (op.cancel) {
        engine.cancel(op.id);
        continue;
      }
      try {
        engine.add(op.request);
      } catch (const Error&) {  // refused on rank 0 too: its client has the message
      }
    }
    engine.step();
    engine.take_deltas();
  }
}

}  // namespace loom
