// `loom classify RUN_DIR [--step S] < TEXTS`: the label a BERT classifier run (model.num_labels > 0) predicts for
// each stdin line, one label a line and in order. A line is a text, or a text pair as TEXT<TAB>TEXT_PAIR; the
// label names are the run's data.train labels (train/classify_task.h), which must still be readable.
#include <iostream>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "data/tokenizers/tokenizer.h"
#include "models/bert.h"
#include "train/classify_task.h"
#include "train/inference.h"

namespace loom::cli {

int classify_command(const Argv& argv, const ProcessGroup&) {
  const auto args = parse_args(argv, {"step"}, {}, 1, "loom classify RUN_DIR [--step S] < texts.txt");
  std::optional<int64_t> step;
  if (args.option("step")) step = args.int_option("step", 0);
  const auto loaded = load_trained_model(args.positional[0], step);
  LOOM_CHECK(loaded.as<Bert>() && loaded.config.model.num_labels > 0, args.positional[0],
             " is not a classifier run: loom classify needs model.arch=bert with model.num_labels > 0");
  const Config& config = loaded.config;
  const torch::Device device = loaded.model->parameters().front().device();
  auto task = make_task(config, device, TaskData::kEvaluation, loaded.model);
  auto& classifier = dynamic_cast<ClassifyTask&>(*task);
  const auto tokenizer = load_tokenizer(config.tokenizer);
  std::vector<LabeledText> texts;
  for (std::string line; std::getline(std::cin, line);) {
    LabeledText t;
    const size_t tab = line.find('\t');
    tokenizer->encode_to(line.substr(0, tab), t.text);
    if (tab != std::string::npos) tokenizer->encode_to(line.substr(tab + 1), t.text_pair);
    texts.push_back(std::move(t));
  }
  for (const int64_t label : classifier.predict(texts, device)) std::cout << classifier.label_names()[label] << "\n";
  return 0;
}

}  // namespace loom::cli
