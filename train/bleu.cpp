#include "train/bleu.h"

#include <cmath>
#include <cstdio>
#include <unordered_map>

#include "core/error.h"

namespace loom {
namespace {

// Length of the UTF-8 sequence at s[i] and its code point (a stray byte counts as itself).
size_t decode_utf8(const std::string& s, size_t i, uint32_t& cp) {
  const auto b = static_cast<unsigned char>(s[i]);
  size_t n = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 1;
  if (i + n > s.size()) n = 1;
  cp = n == 1 ? b : b & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return n;
}

// Python's str.isspace(), which str.split() and str.rstrip() use.
bool python_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

// Python's str.split(): the words between runs of whitespace.
std::vector<std::string> split_words(const std::string& s) {
  std::vector<std::string> words;
  std::string word;
  for (size_t i = 0; i < s.size();) {
    uint32_t cp;
    const size_t n = decode_utf8(s, i, cp);
    if (python_space(cp)) {
      if (!word.empty()) words.push_back(std::move(word));
      word.clear();
    } else {
      word.append(s, i, n);
    }
    i += n;
  }
  if (!word.empty()) words.push_back(std::move(word));
  return words;
}

// Python's str.rstrip().
std::string rstrip(const std::string& s) {
  size_t end = 0;
  for (size_t i = 0; i < s.size();) {
    uint32_t cp;
    const size_t n = decode_utf8(s, i, cp);
    i += n;
    if (!python_space(cp)) end = i;
  }
  return s.substr(0, end);
}

// Python's str.replace(from, to): every non-overlapping occurrence, left to right.
std::string replace_all(const std::string& s, const std::string& from, const std::string& to) {
  std::string out;
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(s, pos, hit - pos);
    out += to;
  }
  return out + s.substr(pos);
}

bool digit(char c) { return c >= '0' && c <= '9'; }
bool period_or_comma(char c) { return c == '.' || c == ','; }

// re.sub of a two-character pattern (first, second) -> a + " " ... as 13a's regexes do: scans left to
// right and resumes after each match, so matches never overlap. Bytes stand in for characters: the
// patterns only test ASCII, and a multi-byte character can neither start nor end inside a match.
template <class First, class Second, class Emit>
std::string substitute_pairs(const std::string& s, First first, Second second, Emit emit) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    if (i + 1 < s.size() && first(s[i]) && second(s[i + 1])) {
      emit(out, s[i], s[i + 1]);
      i += 2;
    } else {
      out += s[i++];
    }
  }
  return out;
}

// 13a's first class: ASCII punctuation and symbols except ' , - . (space included, harmlessly).
bool symbol(char c) {
  return (c >= '{' && c <= '~') || (c >= '[' && c <= '`') || (c >= ' ' && c <= '&') || (c >= '(' && c <= '+') ||
         (c >= ':' && c <= '@') || c == '/';
}

// Word n-gram counts of every order, keyed by the n words joined with spaces (words hold none).
using NgramCounts = std::array<std::unordered_map<std::string, int64_t>, kBleuOrder>;

NgramCounts count_ngrams(const std::vector<std::string>& words) {
  NgramCounts counts;
  for (int n = 1; n <= kBleuOrder; ++n) {
    for (size_t i = 0; i + n <= words.size(); ++i) {
      std::string key = words[i];
      for (int k = 1; k < n; ++k) key += ' ' + words[i + k];
      ++counts[n - 1][key];
    }
  }
  return counts;
}

}  // namespace

std::string tokenize_13a(const std::string& input) {
  std::string line = replace_all(input, "<skipped>", "");
  line = replace_all(line, "-\n", "");
  line = replace_all(line, "\n", " ");
  if (line.find('&') != std::string::npos) {
    line = replace_all(line, "&quot;", "\"");
    line = replace_all(line, "&amp;", "&");
    line = replace_all(line, "&lt;", "<");
    line = replace_all(line, "&gt;", ">");
  }
  line = " " + line + " ";

  std::string spaced;
  for (char c : line) {
    if (symbol(c)) {
      spaced += ' ';
      spaced += c;
      spaced += ' ';
    } else {
      spaced += c;
    }
  }
  auto not_digit = [](char c) { return !digit(c); };
  // Periods and commas split off unless preceded by a digit, then unless followed by one.
  spaced = substitute_pairs(spaced, not_digit, period_or_comma, [](std::string& o, char a, char b) {
    o += a, o += ' ', o += b, o += ' ';
  });
  spaced = substitute_pairs(spaced, period_or_comma, not_digit, [](std::string& o, char a, char b) {
    o += ' ', o += a, o += ' ', o += b;
  });
  // A dash after a digit ("1-2" -> "1 - 2").
  spaced = substitute_pairs(spaced, digit, [](char c) { return c == '-'; }, [](std::string& o, char a, char b) {
    o += a, o += ' ', o += b, o += ' ';
  });

  std::string out;
  for (const auto& word : split_words(spaced)) {
    if (!out.empty()) out += ' ';
    out += word;
  }
  return out;
}

void BleuStats::add(const std::string& hypothesis, const std::string& reference) {
  const auto hyp_words = split_words(tokenize_13a(rstrip(hypothesis)));
  const auto ref_words = split_words(tokenize_13a(rstrip(reference)));
  hyp_len += static_cast<int64_t>(hyp_words.size());
  ref_len += static_cast<int64_t>(ref_words.size());
  const auto hyp = count_ngrams(hyp_words);
  const auto ref = count_ngrams(ref_words);
  for (int n = 0; n < kBleuOrder; ++n) {
    for (const auto& [ngram, count] : hyp[n]) {
      totals[n] += count;
      const auto it = ref[n].find(ngram);
      if (it != ref[n].end()) matches[n] += std::min(count, it->second);  // clipped by the reference count
    }
  }
}

BleuStats& BleuStats::operator+=(const BleuStats& other) {
  hyp_len += other.hyp_len;
  ref_len += other.ref_len;
  for (int n = 0; n < kBleuOrder; ++n) matches[n] += other.matches[n], totals[n] += other.totals[n];
  return *this;
}

BleuScore BleuStats::score() const {
  BleuScore s;
  s.hyp_len = hyp_len;
  s.ref_len = ref_len;
  s.ratio = ref_len > 0 ? static_cast<double>(hyp_len) / static_cast<double>(ref_len) : 0.0;
  s.brevity_penalty = 1.0;
  if (hyp_len < ref_len)
    s.brevity_penalty = hyp_len > 0 ? std::exp(1.0 - static_cast<double>(ref_len) / static_cast<double>(hyp_len)) : 0.0;
  bool any_match = false;
  for (auto m : matches) any_match = any_match || m > 0;
  if (!any_match) return s;  // score and precisions 0, as sacreBLEU returns early

  double smooth = 1.0;
  for (int n = 0; n < kBleuOrder; ++n) {
    if (totals[n] == 0) break;  // hypotheses too short for this order: its precision stays 0
    if (matches[n] == 0) {
      smooth *= 2;  // 'exp' smoothing
      s.precisions[n] = 100.0 / (smooth * static_cast<double>(totals[n]));
    } else {
      s.precisions[n] = 100.0 * static_cast<double>(matches[n]) / static_cast<double>(totals[n]);
    }
  }
  double log_sum = 0;
  for (double p : s.precisions) log_sum += p == 0.0 ? -9999999999.0 : std::log(p);  // sacreBLEU's my_log
  s.score = s.brevity_penalty * std::exp(log_sum / kBleuOrder);
  return s;
}

std::string BleuScore::format() const {
  char buf[256];
  std::snprintf(buf, sizeof buf, "BLEU = %.2f %.1f/%.1f/%.1f/%.1f (BP = %.3f ratio = %.3f hyp_len = %lld ref_len = %lld)",
                score, precisions[0], precisions[1], precisions[2], precisions[3], brevity_penalty, ratio,
                static_cast<long long>(hyp_len), static_cast<long long>(ref_len));
  return buf;
}

BleuScore corpus_bleu(const std::vector<std::string>& hypotheses, const std::vector<std::string>& references) {
  LOOM_CHECK(hypotheses.size() == references.size(), "BLEU needs one reference per hypothesis: ", hypotheses.size(),
             " hypotheses, ", references.size(), " references");
  BleuStats stats;
  for (size_t i = 0; i < hypotheses.size(); ++i) stats.add(hypotheses[i], references[i]);
  return stats.score();
}

}  // namespace loom
