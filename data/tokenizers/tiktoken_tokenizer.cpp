#include "data/tokenizers/tiktoken_tokenizer.h"

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/file_io.h"
#include "core/parse_number.h"
#include "data/tokenizers/bpe_merge.h"
#include "data/tokenizers/tokenizer_presets.h"
#include "data/tokenizers/utf8.h"

namespace loom {
namespace {

std::optional<std::string> base64_decode(std::string_view text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  while (!text.empty() && text.back() == '=') text.remove_suffix(1);
  if (text.size() % 4 == 1) return std::nullopt;
  std::string out;
  uint32_t bits = 0;
  int count = 0;
  for (char c : text) {
    const int v = value(c);
    if (v < 0) return std::nullopt;
    bits = (bits << 6) | static_cast<uint32_t>(v);
    if ((count += 6) >= 8) {
      count -= 8;
      out += static_cast<char>((bits >> count) & 0xFF);
    }
  }
  return out;
}

std::string resolve_pattern(const std::string& path, const std::string& pattern) {
  if (pattern.empty())
    throw ConfigError(path + " is a tiktoken rank file, which carries no split pattern: set tokenizer.pattern (or "
                      "--pattern) to a name (" + pattern_names() + ") or a regex");
  if (auto named = named_pattern(pattern)) return *named;
  return pattern;
}

// The special tokens: a preset, the config's map, or the preset named like the pattern.
SpecialTokenPreset resolve_special(const std::string& pattern, const SpecialTokensSetting& setting, int64_t ranks) {
  if (!setting.ids.empty()) {
    SpecialTokenPreset out;
    for (const auto& [text, id] : setting.ids) out.tokens.push_back({text, static_cast<int32_t>(id)});
    return out;
  }
  const std::string& name = setting.preset.empty() ? pattern : setting.preset;
  if (auto preset = special_token_preset(name, ranks)) return *preset;
  if (!setting.preset.empty())
    throw ConfigError("tokenizer.special_tokens: '" + setting.preset + "' is not a preset (presets: " +
                      pattern_names() + "); or give a mapping of token text to id");
  return {};  // a pattern given as a regex and no special tokens
}

}  // namespace

TiktokenTokenizer::TiktokenTokenizer(const std::string& path, const std::string& pattern,
                                     const SpecialTokensSetting& special)
    : Tokenizer(path, 0), instance_(next_tokenizer_instance()) {
  const std::string regex = resolve_pattern(path, pattern);
  std::ifstream in(path, std::ios::binary);
  LOOM_CHECK(in, path, ": cannot open the tiktoken file");
  int64_t line_number = 0;
  const auto file_bytes = static_cast<int64_t>(std::filesystem::file_size(path));
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const size_t space = line.find(' ');
    const auto bytes = space == std::string::npos ? std::nullopt : base64_decode(std::string_view(line).substr(0, space));
    const auto rank = space == std::string::npos ? std::nullopt : parse_int64(line.substr(space + 1));
    if (!bytes || bytes->empty() || !rank || *rank < 0 || *rank > file_bytes)  // a line takes 4 bytes at least
      throw Error(path + ":" + std::to_string(line_number) + ": not a tiktoken line (base64 token, a space, its rank)");
    if (ranks_.find(*bytes) != StringTable::kMissing)
      throw Error(path + ":" + std::to_string(line_number) + ": the token is listed twice");
    ranks_.insert(*bytes, static_cast<int32_t>(*rank));
    if (tokens_.size() <= static_cast<size_t>(*rank)) tokens_.resize(static_cast<size_t>(*rank) + 1), known_.resize(tokens_.size());
    LOOM_CHECK(!known_[static_cast<size_t>(*rank)], path, ":", line_number, ": rank ", *rank, " is given twice");
    tokens_[static_cast<size_t>(*rank)] = *bytes;
    known_[static_cast<size_t>(*rank)] = true;
  }
  LOOM_CHECK(ranks_.size() > 0, path, ": no ranks in the tiktoken file");
  for (int b = 0; b < 256; ++b)
    LOOM_CHECK(ranks_.find(std::string(1, static_cast<char>(b))) != StringTable::kMissing, path,
               ": byte ", b, " has no rank: byte-level BPE needs all 256 single bytes");

  const SpecialTokenPreset preset = resolve_special(pattern, special, static_cast<int64_t>(ranks_.size()));
  std::vector<AddedToken> added;
  std::vector<std::string> texts;
  for (const auto& t : preset.tokens) {
    check_token_id(t.id, static_cast<int64_t>(ranks_.size()), "tokenizer.special_tokens '" + t.text + "'");
    const auto id = static_cast<size_t>(t.id);
    if (id < known_.size() && known_[id])
      throw ConfigError("tokenizer.special_tokens: '" + t.text + "' has id " + std::to_string(t.id) +
                        ", which is already a rank of " + path);
    if (tokens_.size() <= id) tokens_.resize(id + 1), known_.resize(id + 1);
    tokens_[id] = t.text;
    known_[id] = true;
    added.push_back({t.text, t.id, true});
    texts.push_back(t.text);
  }
  specials_ = AddedTokenMatcher(std::move(added), std::move(texts));
  vocab_size_ = static_cast<int64_t>(tokens_.size());
  set_special_tokens(preset.tokens, preset.bos, preset.eos, std::nullopt);
  pattern_ = std::make_unique<SplitRegex>(regex, RegexDialect::kTiktoken, path + " (tokenizer.pattern)");

  // The pattern and special tokens decide the ids as much as the ranks do.
  std::string identity = "\npattern " + regex;
  for (const auto& t : special_tokens()) identity += "\nspecial " + t.text + " " + std::to_string(t.id);
  set_checksum(crc32(identity.data(), identity.size(), crc32_file(path)));
}

void TiktokenTokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  const int32_t whole = ranks_.find(piece);
  if (whole != StringTable::kMissing) {
    out.push_back(whole);
    return;
  }
  PieceCache& cache = PieceCache::for_this_thread();
  if (cache.find(instance_, piece, out)) return;
  thread_local std::vector<BpeSymbol> symbols;
  symbols.clear();
  for (uint32_t i = 0; i < piece.size(); ++i)
    symbols.push_back({i, i + 1, ranks_.find(piece.substr(i, 1))});
  bpe_merge(symbols, [&](const BpeSymbol& a, const BpeSymbol& b) {
    const int32_t rank = ranks_.find(piece.substr(a.start, b.end - a.start));
    return PairTable::Merge{rank, rank};
  });
  const size_t first = out.size();
  for (const auto& s : symbols) out.push_back(s.id);
  cache.insert(instance_, piece, out.data() + first, out.size() - first);
}

void TiktokenTokenizer::encode_ordinary(std::string_view text, std::vector<int32_t>& out) const {
  pattern_->for_each_match(text, [&](size_t start, size_t end) { encode_piece(text.substr(start, end - start), out); });
}

void TiktokenTokenizer::encode_to(std::string_view raw, std::vector<int32_t>& out, const EncodeOptions& options) const {
  const std::string valid = utf8::is_valid(raw) ? std::string() : utf8::replace_invalid(raw);
  const std::string_view text = valid.empty() ? raw : std::string_view(valid);
  specials_.split(
      text, !options.special_in_text, [&](std::string_view stretch) { encode_ordinary(stretch, out); },
      [&](int32_t id) { out.push_back(id); });
}

std::string TiktokenTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string bytes;
  for (int32_t id : ids) {
    LOOM_CHECK(id >= 0 && id < vocab_size_ && known_[static_cast<size_t>(id)], path(), ": token id ", id,
               " is not in the vocabulary (ranks and special tokens)");
    bytes += tokens_[static_cast<size_t>(id)];
  }
  return utf8::replace_invalid(bytes);
}

std::unique_ptr<Tokenizer> load_tiktoken_tokenizer(const std::string& path, const std::string& pattern,
                                                   const SpecialTokensSetting& special) {
  return std::make_unique<TiktokenTokenizer>(path, pattern, special);
}

}  // namespace loom
