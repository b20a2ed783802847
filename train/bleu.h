// Corpus BLEU exactly as sacreBLEU computes it by default (`sacrebleu REF < HYP`): 13a tokenization,
// 1- to 4-gram precisions clipped by the reference counts, counts summed over the corpus before the
// precisions are taken, brevity penalty from the summed lengths, 'exp' smoothing (mteval-v13a's: the
// k-th n-gram order with no match counts as 1 / 2^k matches), case-sensitive, one reference.
// Used by `loom bleu` and by evaluation of translation runs; the statistics add up, so DP ranks can
// each score a slice of the corpus and sum.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace loom {

constexpr int kBleuOrder = 4;

// sacreBLEU's 13a tokenizer (mteval-v13a.pl): splits punctuation and symbols off words, periods and
// commas unless inside a number, a dash after a digit; unescapes &quot; &amp; &lt; &gt;; collapses
// whitespace (Python's str.split(): Unicode spaces included). Input and output are UTF-8.
std::string tokenize_13a(const std::string& line);

struct BleuScore {
  double score = 0;                          // 0..100
  std::array<double, kBleuOrder> precisions{};  // percent, smoothed as the score uses them
  double brevity_penalty = 0;
  double ratio = 0;  // hyp_len / ref_len
  int64_t hyp_len = 0, ref_len = 0;
  // sacreBLEU's text line: "BLEU = 31.23 62.1/38.5/25.0/16.9 (BP = 0.965 ratio = 0.966 hyp_len = 1 ref_len = 2)"
  std::string format() const;
};

// Sufficient statistics of a set of segments: they sum over segments (and over DP ranks).
struct BleuStats {
  int64_t hyp_len = 0, ref_len = 0;
  std::array<int64_t, kBleuOrder> matches{}, totals{};

  // Adds one hypothesis/reference segment (raw text: trailing whitespace stripped, then 13a).
  void add(const std::string& hypothesis, const std::string& reference);
  BleuStats& operator+=(const BleuStats& other);
  BleuScore score() const;
};

// hypotheses[i] is scored against references[i]; throws loom::Error when the counts differ.
BleuScore corpus_bleu(const std::vector<std::string>& hypotheses, const std::vector<std::string>& references);

}  // namespace loom
