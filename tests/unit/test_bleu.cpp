// Corpus BLEU against sacreBLEU (tests/golden/bleu_cases.py) and closed forms; e2e/test_bleu.sh
// compares `loom bleu` with the sacrebleu command on real verse translations.
#include <cmath>

#include "core/error.h"
#include "train/bleu.h"
#include "test_util.h"

using loom::BleuStats;
using loom::corpus_bleu;

TEST_CASE("bleu: 13a tokenization matches sacreBLEU's", "[data][bleu]") {
  const auto golden = loom::test::python_golden("bleu_cases.py");
  for (const auto& item : golden["tokenize"]) {
    INFO("line: " << item[0].get<std::string>());
    CHECK(loom::tokenize_13a(item[0].get<std::string>()) == item[1].get<std::string>());
  }
}

TEST_CASE("bleu: edge-case corpora score as sacreBLEU scores them", "[data][bleu]") {
  const auto golden = loom::test::python_golden("bleu_cases.py");
  for (const auto& [name, c] : golden["corpora"].items()) {
    INFO("corpus " << name);
    const auto s = corpus_bleu(c["hyps"].get<std::vector<std::string>>(), c["refs"].get<std::vector<std::string>>());
    CHECK(s.score == Approx(c["score"].get<double>()).margin(1e-9));
    for (int n = 0; n < loom::kBleuOrder; ++n) CHECK(s.precisions[n] == Approx(c["precisions"][n].get<double>()));
    CHECK(s.brevity_penalty == Approx(c["bp"].get<double>()));
    CHECK(s.hyp_len == c["hyp_len"].get<int64_t>());
    CHECK(s.ref_len == c["ref_len"].get<int64_t>());
  }
}

TEST_CASE("bleu: closed forms", "[data][bleu]") {
  // Identical text: every precision 100, no brevity penalty.
  CHECK(corpus_bleu({"the cat sat on the mat ."}, {"the cat sat on the mat ."}).score == Approx(100.0));
  // Counts are summed over the corpus before dividing: 10/12, 7/10, 5/8, 3/6 n-gram matches here.
  const auto s = corpus_bleu({"the cat sat on the mat", "a dog barked loudly at night"},
                             {"the cat sat on a mat", "the dog barked loudly at night"});
  const double expected = 100 * std::exp((std::log(10.0 / 12) + std::log(7.0 / 10) + std::log(5.0 / 8) + std::log(3.0 / 6)) / 4);
  CHECK(s.score == Approx(expected).epsilon(1e-12));
  CHECK(s.format() == "BLEU = 65.34 83.3/70.0/62.5/50.0 (BP = 1.000 ratio = 1.000 hyp_len = 12 ref_len = 12)");
  // Brevity penalty exp(1 - r/c) with r = 6, c = 3; the 3-gram and 4-gram orders have a single
  // candidate and none, so the 4-gram precision is 0 and so is the score.
  const auto short_hyp = corpus_bleu({"a b c"}, {"a b c d e f"});
  CHECK(short_hyp.brevity_penalty == Approx(std::exp(1.0 - 6.0 / 3.0)));
  CHECK(short_hyp.score == 0.0);
  // 'exp' smoothing: the first order without a match counts 1/2 match, the next 1/4.
  const auto smoothed = corpus_bleu({"a b c x d e f g"}, {"a b c y d e f h"});  // 6/8, 4/7, 2/6, 0/5 matches
  CHECK(smoothed.precisions[3] == Approx(100.0 / (2 * 5)));
  CHECK(corpus_bleu({}, {}).score == 0.0);
  CHECK_THROWS_AS(corpus_bleu({"a"}, {"a", "b"}), loom::Error);
}

TEST_CASE("bleu: statistics add up over slices of the corpus", "[data][bleu]") {
  const std::vector<std::string> hyps = {"In the beginning God made heaven.", "And the earth was void;", ""};
  const std::vector<std::string> refs = {"In the beginning God created the heaven.", "And the earth was without form", "x"};
  BleuStats first, second;
  first.add(hyps[0], refs[0]);
  second.add(hyps[1], refs[1]);
  second.add(hyps[2], refs[2]);
  first += second;
  const auto whole = corpus_bleu(hyps, refs);
  CHECK(first.score().score == whole.score);
  CHECK(first.hyp_len == whole.hyp_len);
  CHECK(first.ref_len == whole.ref_len);
}
