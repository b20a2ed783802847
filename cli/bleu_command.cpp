// `loom bleu REF_FILE < HYP_FILE`: corpus BLEU of the hypotheses on stdin against the references, line
// by line, computed as `sacrebleu REF_FILE < HYP_FILE` does by default (see train/bleu.h).
#include <nlohmann/json.hpp>

#include <fstream>
#include <iostream>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "train/bleu.h"

namespace loom::cli {
namespace {

std::vector<std::string> read_lines(std::istream& in) {
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(std::move(line));
  return lines;
}

}  // namespace

int bleu_command(const Argv& argv, const ProcessGroup&) {
  const auto args = parse_args(argv, {}, {"json"}, 1, "loom bleu REF_FILE [--json] < HYP_FILE");
  const std::string& ref_path = args.positional[0];
  std::ifstream ref_file(ref_path);
  LOOM_CHECK(ref_file, ref_path, ": cannot open the reference file");
  const auto references = read_lines(ref_file);
  const auto hypotheses = read_lines(std::cin);
  LOOM_CHECK(hypotheses.size() == references.size(), "the hypotheses on stdin have ", hypotheses.size(),
             " lines but ", ref_path, " has ", references.size(), ": BLEU needs one reference line per hypothesis");
  const BleuScore s = corpus_bleu(hypotheses, references);
  if (args.flag("json")) {
    const nlohmann::json out = {{"score", s.score},          {"precisions", s.precisions},
                                {"bp", s.brevity_penalty},   {"ratio", s.ratio},
                                {"hyp_len", s.hyp_len},      {"ref_len", s.ref_len},
                                {"signature", "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp"}};
    std::cout << out.dump() << "\n";
  } else {
    std::cout << s.format() << "\n";
  }
  return 0;
}

}  // namespace loom::cli
