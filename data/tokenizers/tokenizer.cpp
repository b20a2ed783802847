#include "data/tokenizers/tokenizer.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "data/tokenizers/hf_tokenizer.h"
#include "data/tokenizers/sentencepiece_tokenizer.h"
#include "data/tokenizers/tiktoken_tokenizer.h"

namespace loom {
namespace {

bool any_of(std::string_view text, std::initializer_list<std::string_view> names) {
  return std::find(names.begin(), names.end(), text) != names.end();
}

TokenizerType parse_type(const TokenizerConfig& config) {
  return config.type == TokenizerType::kAuto ? detect_tokenizer_type(config.model) : config.type;
}

// A tiktoken line: base64 text, one space, decimal rank.
bool looks_like_tiktoken_line(const std::string& line) {
  const size_t space = line.find(' ');
  if (space == 0 || space == std::string::npos || space + 1 == line.size()) return false;
  for (size_t i = 0; i < space; ++i) {
    const char c = line[i];
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '+' && c != '/' && c != '=') return false;
  }
  for (size_t i = space + 1; i < line.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(line[i])) && !(line[i] == '\r' && i + 1 == line.size())) return false;
  return true;
}

}  // namespace

std::optional<int32_t> Tokenizer::special_id(std::string_view text) const {
  for (const auto& t : special_)
    if (t.text == text) return t.id;
  return std::nullopt;
}

bool Tokenizer::is_special(int32_t id) const {
  const auto it = std::lower_bound(special_.begin(), special_.end(), id,
                                   [](const SpecialToken& t, int32_t v) { return t.id < v; });
  return it != special_.end() && it->id == id;
}

int32_t Tokenizer::require_eos() const {
  if (eos_) return *eos_;
  throw Error(path_ + ": the " + type_name() +
              " tokenizer has no end-of-text token (loom ends every document with one): give it one, e.g. "
              "<|endoftext|> in tokenizer.special_tokens or an eos_token in tokenizer_config.json beside it");
}

void Tokenizer::set_special_tokens(std::vector<SpecialToken> tokens, std::optional<int32_t> bos,
                                   std::optional<int32_t> eos, std::optional<int32_t> pad) {
  std::sort(tokens.begin(), tokens.end(), [](const SpecialToken& a, const SpecialToken& b) { return a.id < b.id; });
  special_ = std::move(tokens);
  // The texts the common tokenizers give these roles (GPT-2 and Qwen: <|endoftext|> ends text).
  for (const auto& t : special_) {
    if (!bos && any_of(t.text, {"<|begin_of_text|>", "<s>", "<|startoftext|>", "<bos>"})) bos = t.id;
    if (!eos && any_of(t.text, {"<|end_of_text|>", "<|endoftext|>", "</s>", "<eos>"})) eos = t.id;
    if (!pad && any_of(t.text, {"<pad>", "<|pad|>", "[PAD]", "<|finetune_right_pad_id|>"})) pad = t.id;
  }
  bos_ = bos, eos_ = eos, pad_ = pad;
}

void check_token_id(int64_t id, int64_t entries, const std::string& what) {
  if (id < 0 || id >= entries + kMaxTokenIdGap)
    throw Error(what + ": id " + std::to_string(id) + " is outside [0, " + std::to_string(entries + kMaxTokenIdGap) +
                ") (the entries plus " + std::to_string(kMaxTokenIdGap) + "): a damaged file or setting");
}

TokenizerType detect_tokenizer_type(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  LOOM_CHECK(in, path, ": cannot open the tokenizer file");
  std::string head(4096, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(in.gcount()));
  const size_t first = head.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && head[first] == '{') return TokenizerType::kHuggingFace;
  const size_t eol = head.find('\n');
  if (eol != std::string::npos && looks_like_tiktoken_line(head.substr(0, eol))) return TokenizerType::kTiktoken;
  return TokenizerType::kSentencePiece;
}

std::unique_ptr<Tokenizer> load_tokenizer(const TokenizerConfig& config) {
  const std::string& path = config.model;
  if (path.empty()) throw ConfigError("tokenizer.model: no tokenizer file given");
  LOOM_CHECK(std::filesystem::is_regular_file(path), path,
             ": no tokenizer there (tokenizer.model: a SentencePiece .model, a Hugging Face tokenizer.json or a "
             ".tiktoken file; scripts/prepare_kjv.sh makes a SentencePiece one)");
  const TokenizerType type = parse_type(config);
  if (type != TokenizerType::kTiktoken && (!config.pattern.empty() || !config.special_tokens.empty()))
    throw ConfigError(path + " is a " + enum_name(type) +
                      " tokenizer: tokenizer.pattern and tokenizer.special_tokens apply to .tiktoken files only "
                      "(a tokenizer.json and a SentencePiece model carry their own)");
  switch (type) {
    case TokenizerType::kSentencePiece: return std::make_unique<SentencePieceTokenizer>(path);
    case TokenizerType::kHuggingFace: return load_hf_tokenizer(path);
    case TokenizerType::kTiktoken: return load_tiktoken_tokenizer(path, config.pattern, config.special_tokens);
    case TokenizerType::kAuto: break;
  }
  throw Error("unknown tokenizer type");
}

namespace {

template <typename Id>
std::string decode_lines_of(const Tokenizer& tokenizer, const std::vector<Id>& ids) {
  const auto eos = tokenizer.eos_id();
  std::string out;
  std::vector<int32_t> line;
  for (Id id : ids) {
    if (eos && id == *eos) {
      out += tokenizer.decode(line) + '\n';
      line.clear();
    } else if (id >= 0 && id < tokenizer.vocab_size()) {
      line.push_back(static_cast<int32_t>(id));
    }
  }
  return out + tokenizer.decode(line);
}

}  // namespace

std::string decode_lines(const Tokenizer& tokenizer, const std::vector<int32_t>& ids) {
  return decode_lines_of(tokenizer, ids);
}
std::string decode_lines(const Tokenizer& tokenizer, const std::vector<int64_t>& ids) {
  return decode_lines_of(tokenizer, ids);
}

}  // namespace loom
