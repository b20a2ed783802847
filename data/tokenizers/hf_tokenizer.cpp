#include "data/tokenizers/hf_tokenizer.h"

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/file_io.h"
#include "data/tokenizers/hf_bpe.h"
#include "data/tokenizers/hf_wordpiece.h"
#include "data/tokenizers/utf8.h"

namespace loom {
namespace {

nlohmann::json read_json(const std::string& path) {
  try {
    return nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(path + ": not valid JSON: " + e.what());
  }
}

// bos_token / eos_token / pad_token of a tokenizer_config.json: a string or {"content": ...}.
std::optional<std::string> config_token(const nlohmann::json& config, const char* key) {
  if (!config.contains(key)) return std::nullopt;
  const auto& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;
}

}  // namespace

HfTokenizer::HfTokenizer(const std::string& path) : Tokenizer(path, crc32_file(path)) {
  const nlohmann::json file = read_json(path);
  try {
    LOOM_CHECK(file.is_object() && file.contains("model"), path, ": not a Hugging Face tokenizer.json (no \"model\")");
    const auto& model = file["model"];
    const std::string model_type = model.value("type", model.contains("merges") ? "BPE" : "");
    if (model_type != "BPE" && model_type != "WordPiece")
      throw Error(path + ": model type '" + model_type +
                  "' is not implemented by loom (it reads BPE models, as GPT-2, Llama 3, Qwen 2, and WordPiece, as "
                  "BERT)");
    normalizer_ = std::make_unique<HfNormalizer>(file.value("normalizer", nlohmann::json()), path);
    pre_tokenizer_ = std::make_unique<HfPreTokenizer>(file.value("pre_tokenizer", nlohmann::json()), path);
    if (model_type == "BPE") {
      model_ = std::make_unique<HfBpeModel>(model, pre_tokenizer_->byte_level(), path);
    } else {
      model_ = std::make_unique<HfWordPieceModel>(model, path);
    }
    decoder_ = std::make_unique<HfDecoder>(file.value("decoder", nlohmann::json()), path);
    vocab_size_ = static_cast<int64_t>(model_->tokens().size());

    std::vector<AddedToken> raw, normalized;
    std::vector<std::string> raw_patterns, normalized_patterns;
    std::vector<SpecialToken> special;
    const auto added_tokens = file.value("added_tokens", nlohmann::json::array());
    const auto entries = static_cast<int64_t>(model_->tokens().size() + added_tokens.size());
    for (const auto& t : added_tokens) {
      AddedToken a;
      a.content = t.at("content").get<std::string>();
      const int64_t id = t.at("id").get<int64_t>();  // checked below, before it sizes added_text_
      a.special = t.value("special", false);
      a.single_word = t.value("single_word", false);
      a.lstrip = t.value("lstrip", false);
      a.rstrip = t.value("rstrip", false);
      a.normalized = t.value("normalized", !a.special);
      LOOM_CHECK(!a.content.empty(), path, ": added token ", t.dump(), " has no content");
      check_token_id(id, entries, path + ": added token " + a.content);
      a.id = static_cast<int32_t>(id);
      if (added_text_.size() <= static_cast<size_t>(a.id)) added_text_.resize(static_cast<size_t>(a.id) + 1);
      added_text_[static_cast<size_t>(a.id)] = a.content;
      vocab_size_ = std::max<int64_t>(vocab_size_, a.id + 1);
      if (a.special) special.push_back({a.content, a.id});
      if (a.normalized) {
        normalized_patterns.push_back(normalizer_->apply(a.content));
        normalized.push_back(std::move(a));
      } else {
        raw_patterns.push_back(a.content);
        raw.push_back(std::move(a));
      }
    }
    raw_added_ = AddedTokenMatcher(std::move(raw), std::move(raw_patterns));
    normalized_added_ = AddedTokenMatcher(std::move(normalized), std::move(normalized_patterns));
    post_ = parse_hf_post_processor(file.value("post_processor", nlohmann::json()), path,
                                    [&](const std::string& text) { return token_id(text); });
    for (const auto* side : {&post_.prefix, &post_.suffix})
      for (int32_t id : *side)
        LOOM_CHECK(id < vocab_size_, path, ": post_processor adds token id ", id, ", outside the vocabulary [0, ",
                   vocab_size_, ")");

    // Roles: tokenizer_config.json beside the file, else the template's first token as bos.
    std::optional<int32_t> bos, eos, pad;
    const auto config_path = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
    if (std::filesystem::is_regular_file(config_path)) {
      const nlohmann::json config = read_json(config_path.string());
      auto role = [&](const char* key) -> std::optional<int32_t> {
        const auto text = config_token(config, key);
        if (!text) return std::nullopt;
        const int32_t id = token_id(*text);
        LOOM_CHECK(id >= 0, config_path.string(), ": ", key, " '", *text, "' is not a token of ", path);
        return id;
      };
      bos = role("bos_token"), eos = role("eos_token"), pad = role("pad_token");
    }
    if (!bos && !post_.prefix.empty()) bos = post_.prefix.front();
    set_special_tokens(std::move(special), bos, eos, pad);
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": unexpected tokenizer.json structure: " + e.what());
  }
}

HfTokenizer::~HfTokenizer() = default;

int32_t HfTokenizer::token_id(std::string_view text) const {
  for (size_t id = 0; id < added_text_.size(); ++id)
    if (added_text_[id] == text) return static_cast<int32_t>(id);
  return model_->token_id(text);
}

void HfTokenizer::encode_pieces(std::string_view text, std::vector<int32_t>& out) const {
  thread_local std::vector<TextPiece> pieces;
  thread_local std::string prefixed;
  pre_tokenizer_->split(text, pieces);
  for (const auto& p : pieces) {
    const std::string_view piece = text.substr(p.start, p.end - p.start);
    if (!p.space_before) {
      model_->encode(piece, out);
      continue;
    }
    prefixed.assign(1, ' ');
    prefixed.append(piece);
    model_->encode(prefixed, out);
  }
}

void HfTokenizer::encode_normalized(std::string_view text, bool skip_special, std::vector<int32_t>& out) const {
  if (normalizer_->empty() && normalized_added_.empty()) {
    encode_pieces(text, out);
    return;
  }
  const std::string normalized = normalizer_->apply(text);
  normalized_added_.split(
      normalized, skip_special, [&](std::string_view stretch) { encode_pieces(stretch, out); },
      [&](int32_t id) { out.push_back(id); });
}

void HfTokenizer::encode_to(std::string_view raw, std::vector<int32_t>& out, const EncodeOptions& options) const {
  const std::string valid = utf8::is_valid(raw) ? std::string() : utf8::replace_invalid(raw);
  const std::string_view text = valid.empty() ? raw : std::string_view(valid);
  if (options.add_special_tokens) out.insert(out.end(), post_.prefix.begin(), post_.prefix.end());
  const bool skip_special = !options.special_in_text;
  raw_added_.split(
      text, skip_special, [&](std::string_view stretch) { encode_normalized(stretch, skip_special, out); },
      [&](int32_t id) { out.push_back(id); });
  if (options.add_special_tokens) out.insert(out.end(), post_.suffix.begin(), post_.suffix.end());
}

std::string HfTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  const auto& vocab = model_->tokens();
  for (int32_t id : ids) {
    const auto i = static_cast<size_t>(id);
    const bool added = id >= 0 && i < added_text_.size() && !added_text_[i].empty();
    const bool in_model = id >= 0 && i < vocab.size() && !vocab[i].empty();
    LOOM_CHECK(added || in_model, path(), ": token id ", id, " is not in the vocabulary");
    tokens.push_back(added ? added_text_[i] : vocab[i]);
  }
  return decoder_->decode(std::move(tokens));
}

std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& path) { return std::make_unique<HfTokenizer>(path); }

}  // namespace loom
