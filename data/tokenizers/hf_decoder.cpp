#include "data/tokenizers/hf_decoder.h"

#include <climits>

#include "core/error.h"
#include "data/tokenizers/byte_level.h"
#include "data/tokenizers/hf_normalizer.h"
#include "data/tokenizers/split_regex.h"
#include "data/tokenizers/utf8.h"

namespace loom {

struct HfDecoder::Step {
  enum Kind { kByteLevel, kByteFallback, kFuse, kReplace, kStrip, kWordPiece } kind;
  std::unique_ptr<SplitRegex> regex;  // kReplace
  std::string content;                // kReplace: the replacement; kStrip: the character stripped; kWordPiece: prefix
  bool cleanup = false;               // kWordPiece
  size_t start = 0, stop = 0;         // kStrip

  void apply(std::vector<std::string>& tokens) const;
};

namespace {

// "<0x4A>" -> 0x4A; -1 when the token is not a byte token.
int byte_token(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  int v = 0;
  for (int i = 3; i < 5; ++i) {
    const char c = t[i];
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

void add_decoder_steps(const nlohmann::json& spec, const std::string& where, std::vector<std::unique_ptr<HfDecoder::Step>>& steps) {
  using Step = HfDecoder::Step;
  const std::string type = spec.value("type", "");
  if (type == "Sequence") {
    for (const auto& s : spec.at("decoders")) add_decoder_steps(s, where, steps);
    return;
  }
  auto step = std::make_unique<Step>();
  if (type == "ByteLevel") {
    step->kind = Step::kByteLevel;
  } else if (type == "ByteFallback") {
    step->kind = Step::kByteFallback;
  } else if (type == "Fuse") {
    step->kind = Step::kFuse;
  } else if (type == "Replace") {
    step->kind = Step::kReplace;
    bool is_regex = false;
    const std::string pattern = hf_pattern(spec.at("pattern"), is_regex, where + " (decoder Replace)");
    step->regex = std::make_unique<SplitRegex>(is_regex ? pattern : regex_escape(pattern), RegexDialect::kHuggingFace,
                                               where + " (decoder Replace)");
    step->content = spec.at("content").get<std::string>();
  } else if (type == "Strip") {
    step->kind = Step::kStrip;
    step->content = spec.at("content").get<std::string>();
    step->start = spec.value("start", size_t{0});
    step->stop = spec.value("stop", size_t{0});
  } else if (type == "WordPiece") {
    step->kind = Step::kWordPiece;
    step->content = spec.value("prefix", std::string("##"));
    step->cleanup = spec.value("cleanup", true);
  } else {
    throw Error(where + ": decoder '" + type +
                "' is not implemented by loom (it reads ByteLevel, ByteFallback, Fuse, Replace, Strip, WordPiece and "
                "Sequence)");
  }
  steps.push_back(std::move(step));
}

// Every occurrence of `from` in s replaced by `to`, left to right.
void replace_every(std::string& s, std::string_view from, std::string_view to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
}

// The WordPiece decoder's cleanup: the spaces English tokenization puts before punctuation and contractions.
void wordpiece_cleanup(std::string& s) {
  static const std::pair<const char*, const char*> kRules[] = {
      {" .", "."},     {" ?", "?"},     {" !", "!"},           {" ,", ","},     {" ' ", "'"},    {" n't", "n't"},
      {" 'm", "'m"},   {" do not", " don't"}, {" 's", "'s"},   {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : kRules) replace_every(s, from, to);
}

}  // namespace

void HfDecoder::Step::apply(std::vector<std::string>& tokens) const {
  switch (kind) {
    case kByteLevel: {
      std::string bytes;
      for (const auto& t : tokens) {
        const auto raw = byte_level::to_bytes(t);
        bytes += raw ? *raw : t;  // a token outside the alphabet (an added token) stays as it is
      }
      tokens.assign(1, utf8::replace_invalid(bytes));
      return;
    }
    case kByteFallback: {
      std::vector<std::string> out;
      std::string pending;
      size_t pending_tokens = 0;
      auto flush = [&] {
        if (pending_tokens == 0) return;
        if (utf8::is_valid(pending)) {
          out.push_back(pending);
        } else {
          for (size_t i = 0; i < pending_tokens; ++i) out.push_back("\xEF\xBF\xBD");  // one U+FFFD per byte token
        }
        pending.clear();
        pending_tokens = 0;
      };
      for (auto& t : tokens) {
        const int b = byte_token(t);
        if (b >= 0) {
          pending += static_cast<char>(b);
          ++pending_tokens;
        } else {
          flush();
          out.push_back(std::move(t));
        }
      }
      flush();
      tokens = std::move(out);
      return;
    }
    case kFuse: {
      std::string all;
      for (const auto& t : tokens) all += t;
      tokens.assign(1, all);
      return;
    }
    case kReplace:
      for (auto& t : tokens) t = replace_all(*regex, t, content);
      return;
    case kStrip:
      for (auto& t : tokens) {
        size_t begin = 0, end = t.size(), n = 0;
        while (n < start && begin < end && t.compare(begin, content.size(), content) == 0) begin += content.size(), ++n;
        n = 0;
        while (n < stop && end >= begin + content.size() && t.compare(end - content.size(), content.size(), content) == 0)
          end -= content.size(), ++n;
        t = t.substr(begin, end - begin);
      }
      return;
    case kWordPiece:  // continuation pieces lose their prefix, every other piece but the first gets a space
      for (size_t i = 0; i < tokens.size(); ++i) {
        auto& t = tokens[i];
        if (i > 0) {
          if (t.compare(0, content.size(), content) == 0) {
            t.erase(0, content.size());
          } else {
            t.insert(0, " ");
          }
        }
        if (cleanup) wordpiece_cleanup(t);
      }
      return;
  }
}

HfDecoder::HfDecoder(const nlohmann::json& spec, const std::string& where) {
  none_ = spec.is_null();
  if (!none_) add_decoder_steps(spec, where, steps_);
}

HfDecoder::~HfDecoder() = default;

std::string HfDecoder::decode(std::vector<std::string> tokens) const {
  if (none_) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  for (const auto& step : steps_) step->apply(tokens);
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

HfPostProcessor parse_hf_post_processor(const nlohmann::json& spec, const std::string& where,
                                        const std::function<int32_t(const std::string&)>& token_id) {
  HfPostProcessor out;
  if (spec.is_null()) return out;
  const auto id_of = [&](const nlohmann::json& id) {  // not get<int32_t>, which wraps a damaged large id
    const int64_t value = id.get<int64_t>();
    LOOM_CHECK(value >= 0 && value <= INT32_MAX, where, ": post_processor names token id ", value);
    return static_cast<int32_t>(value);
  };
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
    out.prefix.push_back(id_of(spec.at("cls").at(1)));
    out.suffix.push_back(id_of(spec.at("sep").at(1)));
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
        for (const auto& id : table[name].at("ids")) ids.push_back(id_of(id));
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
