#include "data/tokenizers/hf_pre_tokenizer.h"

#include <algorithm>

#include "core/error.h"
#include "data/tokenizers/bert_chars.h"
#include "data/tokenizers/hf_normalizer.h"
#include "data/tokenizers/utf8.h"

namespace loom {

const char* const kByteLevelPattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

// (span, is_match) covering text[start, end), as Hugging Face's Pattern::find_matches.
using MatchSpans = std::vector<std::pair<TextPiece, bool>>;

// The pieces `behavior` makes of the spans (inverted first when `invert`), appended to out.
void apply_split_behavior(MatchSpans& spans, SplitBehavior behavior, bool invert, std::vector<TextPiece>& out);

}  // namespace

void split_spans(const SplitRegex& regex, SplitBehavior behavior, bool invert, std::string_view text, uint32_t start,
                 uint32_t end, std::vector<TextPiece>& out) {
  thread_local MatchSpans spans;
  spans.clear();
  const std::string_view part = text.substr(start, end - start);
  uint32_t done = 0;
  regex.for_each_match(part, [&](size_t s, size_t e) {
    if (s > done) spans.push_back({{start + done, start + static_cast<uint32_t>(s), false}, false});
    spans.push_back({{start + static_cast<uint32_t>(s), start + static_cast<uint32_t>(e), false}, true});
    done = static_cast<uint32_t>(e);
  });
  if (done < part.size()) spans.push_back({{start + done, end, false}, false});
  apply_split_behavior(spans, behavior, invert, out);
}

namespace {

// Each character `is_delimiter` accepts is a match of its own, as Hugging Face's split by a char predicate.
void split_chars(bool (*is_delimiter)(char32_t), SplitBehavior behavior, std::string_view text, uint32_t start,
                 uint32_t end, std::vector<TextPiece>& out) {
  thread_local MatchSpans spans;
  spans.clear();
  uint32_t done = start;
  for (size_t i = start; i < end;) {
    const auto at = static_cast<uint32_t>(i);
    if (!is_delimiter(utf8::next(text, i))) continue;
    if (at > done) spans.push_back({{done, at, false}, false});
    spans.push_back({{at, static_cast<uint32_t>(i), false}, true});
    done = static_cast<uint32_t>(i);
  }
  if (done < end) spans.push_back({{done, end, false}, false});
  apply_split_behavior(spans, behavior, false, out);
}

void apply_split_behavior(MatchSpans& spans, SplitBehavior behavior, bool invert, std::vector<TextPiece>& out) {
  if (invert)
    for (auto& s : spans) s.second = !s.second;

  const size_t first = out.size();
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const auto& [span, match] : spans)
        if (!match) out.push_back(span);
      break;
    case SplitBehavior::kIsolated:
      for (const auto& s : spans) out.push_back(s.first);
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const auto& [span, match] : spans) {
        if (match && !previous_match && out.size() > first) {
          out.back().end = span.end;
        } else {
          out.push_back(span);
        }
        previous_match = match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (size_t k = spans.size(); k-- > 0;) {  // from the end, then reversed
        const auto& [span, match] = spans[k];
        if (match && !previous_match && out.size() > first) {
          out.back().start = span.start;
        } else {
          out.push_back(span);
        }
        previous_match = match;
      }
      std::reverse(out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
      break;
    case SplitBehavior::kContiguous:
      for (const auto& [span, match] : spans) {
        if (match == previous_match && out.size() > first) {
          out.back().end = span.end;
        } else {
          out.push_back(span);
        }
        previous_match = match;
      }
      break;
  }
}

}  // namespace

void HfPreTokenizer::add(const nlohmann::json& spec, const std::string& where) {
  if (spec.is_null()) return;
  const std::string type = spec.value("type", "");
  if (byte_level_)
    throw Error(where + ": pre-tokenizer '" + type + "' after ByteLevel: loom reads ByteLevel as the last one only");
  if (type == "Sequence") {
    for (const auto& s : spec.at("pretokenizers")) add(s, where);
  } else if (type == "Split") {
    bool is_regex = false;
    const std::string pattern = hf_pattern(spec.at("pattern"), is_regex, where + " (pre_tokenizer Split)");
    const std::string behavior = spec.at("behavior").get<std::string>();
    SplitStep step;
    step.regex = std::make_unique<SplitRegex>(is_regex ? pattern : regex_escape(pattern), RegexDialect::kHuggingFace,
                                              where + " (pre_tokenizer Split)");
    step.invert = spec.value("invert", false);
    if (behavior == "Removed") step.behavior = SplitBehavior::kRemoved;
    else if (behavior == "Isolated") step.behavior = SplitBehavior::kIsolated;
    else if (behavior == "MergedWithPrevious") step.behavior = SplitBehavior::kMergedWithPrevious;
    else if (behavior == "MergedWithNext") step.behavior = SplitBehavior::kMergedWithNext;
    else if (behavior == "Contiguous") step.behavior = SplitBehavior::kContiguous;
    else throw Error(where + ": Split behavior '" + behavior + "' is not one of Removed, Isolated, MergedWithPrevious, "
                     "MergedWithNext, Contiguous");
    splits_.push_back(std::move(step));
  } else if (type == "BertPreTokenizer") {  // whitespace removed, then each punctuation character on its own
    splits_.push_back({nullptr, bert_chars::is_white_space, SplitBehavior::kRemoved, false});
    splits_.push_back({nullptr, bert_chars::is_punctuation, SplitBehavior::kIsolated, false});
  } else if (type == "WhitespaceSplit") {
    splits_.push_back({nullptr, bert_chars::is_white_space, SplitBehavior::kRemoved, false});
  } else if (type == "Whitespace") {  // runs of word characters, and runs of what is neither word nor space
    splits_.push_back({std::make_unique<SplitRegex>(R"(\w+|[^\w\s]+)", RegexDialect::kHuggingFace,
                                                    where + " (pre_tokenizer Whitespace)"),
                       nullptr, SplitBehavior::kRemoved, true});
  } else if (type == "ByteLevel") {
    byte_level_ = true;
    add_prefix_space_ = spec.value("add_prefix_space", true);
    if (spec.value("use_regex", true))
      byte_level_regex_ = std::make_unique<SplitRegex>(kByteLevelPattern, RegexDialect::kHuggingFace,
                                                       where + " (pre_tokenizer ByteLevel)");
  } else {
    throw Error(where + ": pre-tokenizer '" + type +
                "' is not implemented by loom (it reads ByteLevel, Split, BertPreTokenizer, Whitespace, WhitespaceSplit "
                "and Sequence)");
  }
}

HfPreTokenizer::HfPreTokenizer(const nlohmann::json& spec, const std::string& where) { add(spec, where); }
HfPreTokenizer::~HfPreTokenizer() = default;

void HfPreTokenizer::split(std::string_view text, std::vector<TextPiece>& out) const {
  out.clear();
  if (text.empty()) return;
  out.push_back({0, static_cast<uint32_t>(text.size()), false});
  thread_local std::vector<TextPiece> next;
  for (const auto& step : splits_) {
    next.clear();
    for (const auto& p : out) {
      if (step.regex) {
        split_spans(*step.regex, step.behavior, step.invert, text, p.start, p.end, next);
      } else {
        split_chars(step.is_delimiter, step.behavior, text, p.start, p.end, next);
      }
    }
    out.swap(next);
  }
  if (!byte_level_) return;
  next.clear();
  thread_local std::string prefixed;
  for (const auto& p : out) {
    const bool space = add_prefix_space_ && !(p.end > p.start && text[p.start] == ' ');
    if (!byte_level_regex_) {
      next.push_back({p.start, p.end, space});
      continue;
    }
    if (!space) {
      split_spans(*byte_level_regex_, SplitBehavior::kIsolated, false, text, p.start, p.end, next);
      continue;
    }
    // The regex sees the added space: a match that starts on it keeps it as space_before.
    prefixed.assign(1, ' ');
    prefixed.append(text.substr(p.start, p.end - p.start));
    const size_t first = next.size();
    split_spans(*byte_level_regex_, SplitBehavior::kIsolated, false, prefixed, 0,
                static_cast<uint32_t>(prefixed.size()), next);
    for (size_t k = first; k < next.size(); ++k) {
      TextPiece& q = next[k];
      q.space_before = q.start == 0;
      q.start = p.start + (q.start == 0 ? 0 : q.start - 1);
      q.end = p.start + q.end - 1;
    }
  }
  out.swap(next);
}

}  // namespace loom
