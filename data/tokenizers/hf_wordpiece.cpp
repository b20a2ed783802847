#include "data/tokenizers/hf_wordpiece.h"

#include "core/error.h"
#include "data/tokenizers/tokenizer.h"
#include "data/tokenizers/utf8.h"

namespace loom {

HfWordPieceModel::HfWordPieceModel(const nlohmann::json& model, const std::string& where) {
  const auto& vocab = model.at("vocab");
  LOOM_CHECK(vocab.is_object(), where, ": model.vocab is not a mapping of token to id");
  for (const auto& [text, id_json] : vocab.items()) {
    const int64_t id = id_json.get<int64_t>();
    check_token_id(id, static_cast<int64_t>(vocab.size()), where + ": model.vocab['" + text + "']");
    vocab_.insert(text, static_cast<int32_t>(id));
    if (tokens_.size() <= static_cast<size_t>(id)) tokens_.resize(static_cast<size_t>(id) + 1);
    tokens_[static_cast<size_t>(id)] = text;
  }
  prefix_ = model.value("continuing_subword_prefix", std::string("##"));
  max_chars_ = model.value("max_input_chars_per_word", int64_t{100});
  const std::string unk = model.value("unk_token", std::string("[UNK]"));
  unk_ = vocab_.find(unk);
  LOOM_CHECK(unk_ >= 0, where, ": model.unk_token '", unk,
             "' is not in model.vocab (WordPiece needs it for words its pieces do not cover)");
}

void HfWordPieceModel::encode(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  // Character boundaries: the cuts are made between characters, never inside one.
  thread_local std::vector<size_t> bounds;
  bounds.clear();
  for (size_t i = 0; i < word.size();) {
    bounds.push_back(i);
    utf8::next(word, i);
  }
  const int64_t chars = static_cast<int64_t>(bounds.size());
  bounds.push_back(word.size());
  if (chars > max_chars_) {
    out.push_back(unk_);
    return;
  }
  thread_local std::string candidate;
  const size_t first = out.size();
  size_t start = 0;  // index into bounds
  while (start < static_cast<size_t>(chars)) {
    int32_t found = -1;
    size_t end = static_cast<size_t>(chars);
    for (; end > start; --end) {
      const std::string_view piece = word.substr(bounds[start], bounds[end] - bounds[start]);
      if (start == 0) {
        found = vocab_.find(piece);
      } else {
        candidate.assign(prefix_);
        candidate.append(piece);
        found = vocab_.find(candidate);
      }
      if (found >= 0) break;
    }
    if (found < 0) {  // a stretch no entry covers: the whole word is unknown
      out.resize(first);
      out.push_back(unk_);
      return;
    }
    out.push_back(found);
    start = end;
  }
}

}  // namespace loom
