// BERT (models/bert.h, train/bert_family.cpp): its closed-form parameter count against transformers'
// BertForMaskedLM (and BertForSequenceClassification) and against the built model, its Hugging Face weights
// both ways against transformers (tests/golden/hf_bert.py), and the MLM masking rule, by tokens and by whole
// words (data/corpus/mlm_masking.h).

#include <fstream>

#include "core/config.h"
#include "data/corpus/mlm_masking.h"
#include "models/bert.h"
#include "models/bert_weights.h"
#include "models/estimates.h"
#include "models/safetensors.h"
#include "train/mlm_task.h"
#include "test_util.h"

namespace {

loom::ModelConfig bert_config(const std::vector<std::string>& sets = {}) {
  std::vector<std::string> all = {"model.arch=bert", "model.vocab_size=50", "model.d_model=32", "model.n_layers=2",
                                  "model.n_heads=4", "model.d_ff=48", "model.max_seq_len=16", "model.dropout=0",
                                  "model.norm_position=post", "model.norm_eps=1e-12", "model.activation=gelu_erf",
                                  "data.seq_len=16"};
  all.insert(all.end(), sets.begin(), sets.end());
  return loom::parse_config("", "test", all).model;
}

// tokens (2, 8), the second row's last 3 positions padded, both segments used.
struct BertInputs {
  torch::Tensor tokens, padding, token_types;
};
BertInputs bert_inputs(int64_t vocab) {
  BertInputs in;
  in.tokens = torch::randint(0, vocab, {2, 8}, torch::kLong);
  in.padding = torch::zeros({2, 8}, torch::kBool);
  in.padding.index_put_({1, torch::indexing::Slice(5, 8)}, true);
  in.token_types = (torch::arange(8) >= 4).to(torch::kLong).unsqueeze(0).repeat({2, 1});
  return in;
}

torch::Tensor hf_bert(const std::string& mode, const loom::ModelConfig& c, const BertInputs& in,
                      const std::filesystem::path& dir) {
  nlohmann::json config = {{"vocab_size", c.vocab_size}, {"d_model", c.d_model}, {"n_layers", c.n_layers},
                                 {"n_heads", c.n_heads}, {"d_ff", c.ffn_dim()}, {"max_seq_len", c.max_seq_len},
                                 {"norm_eps", c.norm_eps}, {"tie_embeddings", c.tie_embeddings}};
  if (c.num_labels > 0) config["num_labels"] = c.num_labels;
  const nlohmann::json input = {{"config", config}, {"tokens", loom::test::tensor_json(in.tokens)},
                                {"padding", loom::test::tensor_json(in.padding.to(torch::kLong))},
                                {"token_types", loom::test::tensor_json(in.token_types)}, {"seed", 5}};
  const auto path = dir.string() + ".json";
  std::ofstream(path) << input.dump();
  const auto out = loom::test::python_golden("hf_bert.py", mode + " " + path + " " + dir.string() + " 2>/dev/null");
  return loom::test::json_tensor(out["logits"], torch::kFloat);
}

// Export: the model's weights changed, written as `loom export` does, read by from_pretrained: the same logits.
void check_export_reads_back(loom::Bert& model, const loom::ModelConfig& config, const BertInputs& in,
                             const std::filesystem::path& dir) {
  loom::test::perturb(*model);
  const auto exported = dir / "export";
  std::filesystem::create_directories(exported);
  loom::write_safetensors(exported / "model.safetensors", loom::export_bert_weights(*model), {{"format", "pt"}});
  std::ofstream(exported / "config.json") << loom::bert_config_json(config, {}).dump(2);
  CHECK_THAT(model->forward(in.tokens, in.padding, in.token_types),
             loom::test::reference_logits(hf_bert("read", config, in, exported)));
}

}  // namespace

TEST_CASE("bert: parameter counts equal transformers' and the built model's", "[bert]") {
  // transformers' BertForMaskedLM(BertConfig()): sum(p.numel() for p in model.parameters()).
  const auto preset = (loom::test::source_dir() / "configs" / "bert-base-uncased.yaml").string();
  CHECK(loom::count_parameters(loom::load_config(preset).model) == 109514298);
  // BertForSequenceClassification(BertConfig(num_labels=2)): the encoder, its pooler and the classifier.
  CHECK(loom::count_parameters(loom::load_config(preset, {"model.num_labels=2"}).model) == 109483778);
  for (const auto& sets : std::vector<std::vector<std::string>>{{},
                                                                {"model.norm_position=pre"},
                                                                {"model.tie_embeddings=false"},
                                                                {"model.activation=relu"},
                                                                {"model.num_labels=3"},
                                                                {"model.num_labels=3", "model.tie_embeddings=false"}}) {
    const auto config = bert_config(sets);
    loom::Bert model(config);
    CHECK(loom::test::numel_sum(*model) == loom::count_parameters(config));
  }
}

TEST_CASE("bert: transformers' random BertForMaskedLM loads with equal logits, and loom's export loads back",
          "[bert][hf][golden]") {
  torch::manual_seed(11);
  for (const bool tied : {true, false}) {
    INFO("tie_embeddings " << tied);
    const auto config = bert_config({tied ? "model.tie_embeddings=true" : "model.tie_embeddings=false"});
    const auto in = bert_inputs(config.vocab_size);
    const auto dir = loom::test::scratch_dir(std::string("hf-bert-") + (tied ? "tied" : "untied"));
    const auto expected = hf_bert("write", config, in, dir / "hf");
    loom::Bert model(config);
    loom::load_bert_weights(*model, dir / "hf");
    model->eval();
    torch::NoGradGuard no_grad;
    const auto logits = model->forward(in.tokens, in.padding, in.token_types);
    CHECK_THAT(logits, loom::test::reference_logits(expected));
    const double relative = ((logits - expected).abs().max() / expected.abs().max()).item<double>();
    CHECK(relative < 1e-6);  // measured: about 5e-7 of the largest logit
    WARN("import: max |loom - transformers| / max |transformers| = " << relative);

    check_export_reads_back(model, config, in, dir);
  }
}

TEST_CASE("bert: transformers' random BertForSequenceClassification loads with equal logits and exports back, and "
          "a BertForMaskedLM gives a classifier its encoder", "[bert][hf][golden]") {
  torch::manual_seed(12);
  const auto config = bert_config({"model.num_labels=3"});
  const auto in = bert_inputs(config.vocab_size);
  const auto dir = loom::test::scratch_dir("hf-bert-classifier");
  const auto expected = hf_bert("write", config, in, dir / "hf");
  REQUIRE(expected.sizes() == torch::IntArrayRef({2, 3}));
  loom::Bert model(config);
  loom::load_bert_weights(*model, dir / "hf");
  model->eval();
  torch::NoGradGuard no_grad;
  CHECK_THAT(model->forward(in.tokens, in.padding, in.token_types), loom::test::reference_logits(expected));

  check_export_reads_back(model, config, in, dir);

  // Fine-tuning from a pretrained MLM file: the encoder's weights are the file's (those of an MLM model loading
  // it), the pooler and classifier keep the classifier's own init.
  const auto masked_lm = bert_config();
  hf_bert("write", masked_lm, in, dir / "mlm");
  loom::Bert pretrained(masked_lm), fine_tuned(config);
  loom::load_bert_weights(*pretrained, dir / "mlm");
  const auto fresh_classifier = fine_tuned->named_parameters()["classifier.weight"].clone();
  loom::load_bert_weights(*fine_tuned, dir / "mlm");
  const auto mlm_params = pretrained->named_parameters();
  int64_t encoder = 0;
  for (const auto& p : fine_tuned->named_parameters()) {
    if (!mlm_params.contains(p.key())) continue;
    INFO(p.key());
    CHECK(torch::equal(p.value(), mlm_params[p.key()]));
    ++encoder;
  }
  CHECK(encoder == 5 + 2 * 12);  // 3 embeddings, the embedding norm's 2, 12 per block
  CHECK(torch::equal(fine_tuned->named_parameters()["classifier.weight"], fresh_classifier));
}

TEST_CASE("bert: a pre-norm BERT has no BertForMaskedLM names", "[bert][hf]") {
  loom::Bert model(bert_config({"model.norm_position=pre"}));
  CHECK_THAT(loom::test::message_of([&] { loom::export_bert_weights(*model); }),
             Catch::Contains("model.norm_position"));
}

TEST_CASE("bert: MLM masking chooses 15%, then 80/10/10, as a pure function of seed, step and index", "[bert][data]") {
  loom::MlmTokenIds ids{100, 101, 102, 103, 99, 99, nullptr};
  const auto windows = torch::randint(0, 99, {1000, 126}, torch::kLong);  // 126,000 text positions
  const auto m = loom::mask_for_mlm(windows, ids, 7, 3, 0);
  const auto text = m.inputs.index({torch::indexing::Slice(), torch::indexing::Slice(1, 127)});
  CHECK((m.inputs.select(1, 0) == 100).all().item<bool>());
  CHECK((m.inputs.select(1, 127) == 101).all().item<bool>());
  CHECK(m.selected.numel() == 1000 * 19);  // round(0.15 * 126) per window
  const auto chosen_inputs = m.inputs.flatten().index_select(0, m.selected);
  const auto chosen_targets = m.targets.flatten().index_select(0, m.selected);
  CHECK((chosen_targets == windows.flatten().index_select(0, torch::nonzero(m.targets.index({torch::indexing::Slice(),
      torch::indexing::Slice(1, 127)}).flatten() != -100).flatten())).all().item<bool>());
  CHECK((m.targets != -100).sum().item<int64_t>() == m.selected.numel());
  const double n = static_cast<double>(m.selected.numel());
  const double masked = (chosen_inputs == 102).sum().item<double>() / n;
  const double kept = (chosen_inputs == chosen_targets).sum().item<double>() / n;
  const double replaced = 1.0 - masked - kept;
  // A random replacement equal to the original counts as kept: 1/99 of the 10%.
  CHECK(std::abs(masked - 0.8) < 0.005);
  CHECK(std::abs(kept - (0.1 + 0.1 / 99)) < 0.005);
  CHECK(std::abs(replaced - (0.1 - 0.1 / 99)) < 0.005);
  // Unchosen positions are untouched.
  CHECK((text.flatten().index_select(0, torch::nonzero(m.targets.index({torch::indexing::Slice(),
      torch::indexing::Slice(1, 127)}).flatten() == -100).flatten()) ==
         windows.flatten().index_select(0, torch::nonzero(m.targets.index({torch::indexing::Slice(),
      torch::indexing::Slice(1, 127)}).flatten() == -100).flatten())).all().item<bool>());
  // Sequence 500 masked alone (as a DP rank's slice) equals its row in the whole batch; another step differs.
  const auto alone = loom::mask_for_mlm(windows.slice(0, 500, 501), ids, 7, 3, 500);
  CHECK(torch::equal(alone.inputs[0], m.inputs[500]));
  CHECK(!torch::equal(loom::mask_for_mlm(windows.slice(0, 500, 501), ids, 7, 4, 500).inputs[0], m.inputs[500]));
  // The document end becomes [SEP] (its target too, where chosen).
  const auto ends = loom::mask_for_mlm(torch::full({1, 20}, int64_t{99}), ids, 7, 3, 0);
  const auto unchosen = torch::nonzero(ends.targets.flatten() == -100).flatten();
  CHECK((ends.inputs.flatten().index_select(0, unchosen).slice(0, 1) == 101).all().item<bool>());  // after [CLS]
  CHECK((ends.targets.flatten().index_select(0, ends.selected) == 101).all().item<bool>());
}

TEST_CASE("bert: whole-word masking chooses every piece of a word or none, up to 15% of the tokens",
          "[bert][data]") {
  // Ids 0-49 start a word, 50-99 continue one; [CLS] 101, [SEP] 102, [MASK] 103.
  loom::MlmTokenIds ids{101, 102, 103, 100, std::nullopt, 100, nullptr};
  auto continues = std::make_shared<std::vector<bool>>(100, false);
  for (int64_t id = 50; id < 100; ++id) (*continues)[static_cast<size_t>(id)] = true;
  ids.continues_word = continues;
  torch::manual_seed(5);
  const int64_t B = 2000, T = 40, chosen = 6;  // round(0.15 * 40)
  const auto windows = torch::randint(0, 100, {B, T}, torch::kLong);
  const auto m = loom::mask_for_mlm(windows, ids, 7, 3, 0);
  const auto targets = m.targets.index({torch::indexing::Slice(), torch::indexing::Slice(1, T + 1)});
  const auto is_chosen = (targets != -100).to(torch::kLong);
  const auto per_row = is_chosen.sum(1);
  CHECK(per_row.max().item<int64_t>() <= chosen);
  CHECK(per_row.to(torch::kDouble).mean().item<double>() > 5.5);  // words of 1-3 pieces mostly fill the 6
  // Within a word (a continuing token and the one before it) both are chosen or neither.
  const auto continuing = (windows >= 50).index({torch::indexing::Slice(), torch::indexing::Slice(1, T)});
  const auto here = is_chosen.index({torch::indexing::Slice(), torch::indexing::Slice(1, T)});
  const auto before = is_chosen.index({torch::indexing::Slice(), torch::indexing::Slice(0, T - 1)});
  CHECK((here.masked_select(continuing) == before.masked_select(continuing)).all().item<bool>());
  // A whole word is more than one piece often enough that the rule was exercised.
  CHECK((here.masked_select(continuing) == 1).sum().item<int64_t>() > B);
  // The fates are as for single tokens: 80% [MASK].
  const auto inputs = m.inputs.index({torch::indexing::Slice(), torch::indexing::Slice(1, T + 1)});
  const double masked = (inputs.masked_select(is_chosen.to(torch::kBool)) == 103).to(torch::kDouble).mean().item<double>();
  CHECK(std::abs(masked - 0.8) < 0.01);
  // A pure function of (seed, step, index): sequence 77 alone equals its row.
  const auto alone = loom::mask_for_mlm(windows.slice(0, 77, 78), ids, 7, 3, 77);
  CHECK(torch::equal(alone.inputs[0], m.inputs[77]));
}

TEST_CASE("bert: whole-word masking tells a WordPiece tokenizer's ## pieces as continuations", "[bert][data]") {
  const auto dir = loom::test::scratch_dir("bert-whole-word");
  nlohmann::json vocab = {{"[PAD]", 0}, {"[UNK]", 1}, {"[CLS]", 2}, {"[SEP]", 3}, {"[MASK]", 4}, {"a", 5},
                          {"begin", 6}, {"##ning", 7}, {"the", 8}, {"##s", 9}};
  nlohmann::json added = nlohmann::json::array();  // as bert-base-uncased's file: the specials are added tokens
  for (const auto& [text, id] : vocab.items())
    if (text[0] == '[') added.push_back({{"id", id}, {"content", text}, {"special", true}});
  const nlohmann::json spec = {
      {"added_tokens", added},
      {"normalizer", {{"type", "BertNormalizer"}}},
      {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
      {"decoder", {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}}},
      {"model", {{"type", "WordPiece"}, {"unk_token", "[UNK]"}, {"vocab", vocab}}}};
  std::ofstream(dir / "tokenizer.json") << spec.dump();
  const auto config = loom::parse_config("", "test",
                                         {"model.arch=bert", "model.vocab_size=10", "data.whole_word_masking=true",
                                          "tokenizer.model=" + (dir / "tokenizer.json").string()});
  const auto ids = loom::mlm_token_ids(config);
  REQUIRE(ids.continues_word);
  std::vector<int64_t> continuing;
  for (size_t id = 0; id < ids.continues_word->size(); ++id)
    if ((*ids.continues_word)[id]) continuing.push_back(static_cast<int64_t>(id));
  CHECK(continuing == std::vector<int64_t>{7, 9});
  CHECK((ids.cls == 2 && ids.sep == 3 && ids.mask == 4 && ids.pad == 0));
}
