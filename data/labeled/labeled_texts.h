// The labelled texts of a sequence classifier (model.num_labels, train/classify_task.h): JSON Lines, one
// object a line (blank lines skipped),
//   {"text": "...", "label": "..."}            or, for text pairs, also "text_pair": "..."
// a label a string or an integer. The label set is the training file's: its distinct labels in order (by
// value when all are integers, else by text), label i being the classifier's output i. A bad line is a
// ConfigError naming the file, the line and the field.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace loom {

class Tokenizer;

struct LabeledText {
  int64_t line = 0;  // 1-based line of the file
  std::vector<int32_t> text, text_pair;  // token ids, without special tokens; text_pair empty: none
  std::string label;
};

// The file's records, their texts encoded by `tokenizer`.
std::vector<LabeledText> read_labeled_texts(const std::filesystem::path& path, const Tokenizer& tokenizer);

// The distinct labels of `texts`: integers by value when all are, else by text.
std::vector<std::string> label_set(const std::vector<LabeledText>& texts);

// Each record's index in `labels`; a label not among them is a ConfigError naming `path`, the line and the
// labels.
std::vector<int64_t> label_ids(const std::vector<LabeledText>& texts, const std::vector<std::string>& labels,
                               const std::filesystem::path& path);

}  // namespace loom
