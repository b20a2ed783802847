#include "data/tokenizers/hf_wordpiece.h"

#include "core/error.h"
#include "data/tokenizers/utf8.h"

namespace loom {

HfWordPieceModel::HfWordPieceModel(const nlohmann::json& model, const std::string& where) {
  read_hf_vocab(model, where, vocab_, tokens_);
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
