#include "data/tokenizers/hf_bpe.h"

#include <cstdio>

#include "core/error.h"
#include "data/tokenizers/bpe_merge.h"
#include "data/tokenizers/byte_level.h"
#include "data/tokenizers/tokenizer.h"
#include "data/tokenizers/utf8.h"

namespace loom {
namespace {

// A merge as its two parts, in either format.
std::pair<std::string, std::string> merge_parts(const nlohmann::json& merge, size_t index, const std::string& where) {
  if (merge.is_string()) {
    const std::string text = merge.get<std::string>();
    const size_t space = text.find(' ');
    if (space != std::string::npos && text.find(' ', space + 1) == std::string::npos)
      return {text.substr(0, space), text.substr(space + 1)};
  } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
    return {merge[0].get<std::string>(), merge[1].get<std::string>()};
  }
  throw Error(where + ": model.merges[" + std::to_string(index) + "] is neither \"a b\" nor [\"a\", \"b\"]: " +
              merge.dump());
}

thread_local std::vector<BpeSymbol> t_symbols;

}  // namespace

HfBpeModel::HfBpeModel(const nlohmann::json& model, bool byte_level, const std::string& where)
    : byte_level_(byte_level), instance_(next_tokenizer_instance()) {
  if (model.contains("dropout") && !model["dropout"].is_null() && model["dropout"].get<double>() > 0)
    throw Error(where + ": model.dropout (BPE dropout) is not implemented by loom: set it to null");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (model.contains(key) && !model[key].is_null() && !model[key].get<std::string>().empty())
      throw Error(where + ": model." + key + " is not implemented by loom (byte-level BPE has none): set it to null");
  read_hf_vocab(model, where, vocab_, tokens_);
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const std::string& text = tokens_[i];
    if (text.empty()) continue;
    const auto id = static_cast<int32_t>(i);
    // A byte-level entry outside the byte alphabet can never come out of bytes: BPE leaves it out.
    if (!byte_level) {
      pieces_.insert(text, static_cast<int32_t>(id));
    } else if (const auto bytes = byte_level::to_bytes(text)) {
      pieces_.insert(*bytes, static_cast<int32_t>(id));
    }
  }
  const auto& merges = model.at("merges");
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto [left, right] = merge_parts(merges[rank], rank, where);
    const int32_t a = vocab_.find(left), b = vocab_.find(right), merged = vocab_.find(left + right);
    if (a < 0 || b < 0 || merged < 0)
      throw Error(where + ": model.merges[" + std::to_string(rank) + "] (" + left + " " + right + "): " +
                  (a < 0 ? left : b < 0 ? right : left + right) + " is not in model.vocab");
    merges_.insert(a, b, {static_cast<int32_t>(rank), merged});  // a repeated merge: the last rank, as Hugging Face
  }
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    unk_ = vocab_.find(model["unk_token"].get<std::string>());
    LOOM_CHECK(unk_ >= 0, where, ": model.unk_token ", model["unk_token"].dump(), " is not in model.vocab");
  }
  fuse_unk_ = model.value("fuse_unk", false);
  byte_fallback_ = model.value("byte_fallback", false);
  ignore_merges_ = model.value("ignore_merges", false);
  for (int b = 0; b < 256; ++b) {
    byte_ids_[b] = byte_level ? pieces_.find(std::string(1, static_cast<char>(b))) : -1;
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    byte_fallback_ids_[b] = byte_fallback_ ? vocab_.find(name) : -1;
  }
}

void HfBpeModel::add_symbol(std::string_view piece, uint32_t start, uint32_t end) const {
  const std::string_view text = piece.substr(start, end - start);
  int32_t id = byte_level_ ? byte_ids_[static_cast<unsigned char>(text[0])] : pieces_.find(text);
  if (id >= 0) {
    t_symbols.push_back({start, end, id});
    return;
  }
  // The character's UTF-8 bytes as <0xXX> tokens when all exist (a byte-level piece is written as its
  // alphabet character), else unk, else nothing: what Hugging Face's BPE does with an unknown character.
  const std::string written = byte_level_ ? byte_level::from_bytes(text) : std::string(text);
  bool fallback = byte_fallback_;
  for (unsigned char b : written) fallback = fallback && byte_fallback_ids_[b] >= 0;
  if (fallback) {
    for (unsigned char b : written) t_symbols.push_back({start, end, byte_fallback_ids_[b]});
    return;
  }
  if (unk_ < 0) return;
  if (fuse_unk_ && !t_symbols.empty() && t_symbols.back().id == unk_) {
    t_symbols.back().end = end;
    return;
  }
  t_symbols.push_back({start, end, unk_});
}

void HfBpeModel::encode(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    const int32_t whole = pieces_.find(piece);
    if (whole >= 0) {
      out.push_back(whole);
      return;
    }
  }
  PieceCache& cache = PieceCache::for_this_thread();
  if (cache.find(instance_, piece, out)) return;
  t_symbols.clear();
  if (byte_level_) {
    for (uint32_t i = 0; i < piece.size(); ++i) add_symbol(piece, i, i + 1);
  } else {
    for (size_t i = 0; i < piece.size();) {
      const size_t start = i;
      utf8::next(piece, i);
      add_symbol(piece, static_cast<uint32_t>(start), static_cast<uint32_t>(i));
    }
  }
  bpe_merge(t_symbols, [&](const BpeSymbol& a, const BpeSymbol& b) { return merges_.find(a.id, b.id); });
  const size_t first = out.size();
  for (const auto& s : t_symbols) out.push_back(s.id);
  cache.insert(instance_, piece, out.data() + first, out.size() - first);
}

}  // namespace loom
