// parse_hf_post_processor (a template: it takes the tokenizer's token-to-id lookup). Included by hf_decoder.h.
#pragma once
#include "core/error.h"

namespace loom {

template <class TokenId>
HfPostProcessor parse_hf_post_processor(const nlohmann::json& spec, const std::string& where, TokenId&& token_id) {
  HfPostProcessor out;
  if (spec.is_null()) return out;
  const std::string type = spec.value("type", "");
  if (type == "ByteLevel") return out;
  if (type == "Sequence") {
    for (const auto& p : spec.at("processors")) {
      const HfPostProcessor inner = parse_hf_post_processor(p, where, token_id);  // wraps what came before
      out.prefix.insert(out.prefix.begin(), inner.prefix.begin(), inner.prefix.end());
      out.suffix.insert(out.suffix.end(), inner.suffix.begin(), inner.suffix.end());
    }
    return out;
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    out.prefix.push_back(spec.at("cls").at(1).get<int32_t>());
    out.suffix.push_back(spec.at("sep").at(1).get<int32_t>());
    return out;
  }
  if (type == "TemplateProcessing") {
    bool after = false;
    for (const auto& piece : spec.at("single")) {
      if (piece.contains("Sequence")) {
        LOOM_CHECK(piece["Sequence"].value("id", "A") == "A", where, ": post_processor single template names sequence ",
                   piece["Sequence"].dump(), ", not A");
        after = true;
        continue;
      }
      const std::string name = piece.at("SpecialToken").at("id").get<std::string>();
      std::vector<int32_t> ids;
      const auto& table = spec.value("special_tokens", nlohmann::json::object());
      if (table.contains(name)) {
        for (const auto& id : table[name].at("ids")) ids.push_back(id.get<int32_t>());
      } else {
        const int32_t id = token_id(name);
        LOOM_CHECK(id >= 0, where, ": post_processor template token ", name, " is not in the vocabulary");
        ids.push_back(id);
      }
      auto& side = after ? out.suffix : out.prefix;
      side.insert(side.end(), ids.begin(), ids.end());
    }
    return out;
  }
  throw Error(where + ": post-processor '" + type +
              "' is not implemented by loom (it reads TemplateProcessing, RobertaProcessing, BertProcessing, ByteLevel "
              "and Sequence)");
}

}  // namespace loom
