#include "data/tokenizers/hf_model.h"

#include "core/error.h"
#include "data/tokenizers/string_table.h"
#include "data/tokenizers/tokenizer.h"

namespace loom {

void read_hf_vocab(const nlohmann::json& model, const std::string& where, StringTable& vocab,
                   std::vector<std::string>& tokens) {
  const auto& entries = model.at("vocab");
  LOOM_CHECK(entries.is_object(), where, ": model.vocab is not a mapping of token to id");
  for (const auto& [text, id_json] : entries.items()) {
    const int64_t id = id_json.get<int64_t>();
    check_token_id(id, static_cast<int64_t>(entries.size()), where + ": model.vocab['" + text + "']");
    vocab.insert(text, static_cast<int32_t>(id));
    if (tokens.size() <= static_cast<size_t>(id)) tokens.resize(static_cast<size_t>(id) + 1);
    tokens[static_cast<size_t>(id)] = text;
  }
}

}  // namespace loom
