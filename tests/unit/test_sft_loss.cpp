// The SFT loss end to end through loom's data and task: a prepared directory with loss masks -> the language
// model task's batches -> its loss, against PyTorch's F.cross_entropy(ignore_index=-100) over the targets
// the mask keeps (tests/golden/sft_loss.py), on the logits loom computed; with packed documents on, and with
// label smoothing. Split into micro-batches, the means weighted by their counted targets give the batch's.
#include <fstream>

#include "data/corpus/lm_sampler.h"
#include "data/prepare/prepared_manifest.h"
#include "data/prepare/shard_writer.h"
#include "models/gpt.h"
#include "test_util.h"
#include "train/run_plan.h"
#include "train/task.h"

namespace fs = std::filesystem;

namespace {

// Documents of 5 + (d * 7) % 11 tokens (token t of the shard is (t * 37) % 500); a document's tokens from
// its third on count (its first two are its prompt).
bool counted(int64_t position_in_document) { return position_in_document >= 2; }

fs::path sft_dir(const std::string& name, std::vector<int64_t>* mask_of_token) {
  const auto dir = loom::test::scratch_dir(name);
  loom::ShardWriter writer(dir, "train", 500, 42, 1 << 20, /*with_loss_mask=*/true);
  int64_t t = 0;
  for (int64_t d = 0; d < 40; ++d) {
    std::vector<int32_t> doc;
    std::vector<uint8_t> mask;
    for (int64_t i = 0; i < 5 + (d * 7) % 11; ++i, ++t) {
      doc.push_back(static_cast<int32_t>((t * 37) % 500));
      mask.push_back(counted(i) ? 1 : 0);
      mask_of_token->push_back(mask.back());
    }
    writer.add_document(doc.data(), doc.size(), mask.data());
  }
  loom::PreparedManifest m;
  m.tokenizer = {"tok.model", 42, 500, 499, false};
  m.options = nlohmann::json::object();
  m.splits[0].shards = writer.finish();
  m.splits[0].tokens = t;
  loom::write_prepared_manifest(dir, m);
  return dir;
}

}  // namespace

TEST_CASE("SFT loss: the mean over response tokens equals F.cross_entropy(ignore_index=-100)", "[golden][data]") {
  std::vector<int64_t> mask_of_token;
  const auto dir = sft_dir("sft-loss", &mask_of_token);
  const bool packed = GENERATE(false, true);
  const double smoothing = GENERATE(0.0, 0.1);
  CAPTURE(packed, smoothing);
  auto config = loom::parse_config("", "x.yaml",
                                   {"data.train=" + dir.string(), "model.d_model=16", "model.n_layers=1",
                                    "model.n_heads=2", "model.max_seq_len=32", "data.seq_len=24", "model.dropout=0",
                                    "train.batch_size=4", std::string("data.document_mask=") + (packed ? "true" : "false")});
  auto task = loom::make_task(loom::RunPlan(config, 0).config(), torch::kCPU, loom::TaskData::kTraining);
  auto& model = dynamic_cast<loom::GptImpl&>(task->model());
  const auto batch = task->train_batch(3, 0, 4);
  const auto& b = batch.as<loom::LmBatch>();
  CHECK(b.positions.defined() == packed);
  const auto loss = task->loss(batch, torch::kCPU, smoothing);
  const auto logits = model.forward(b.inputs, nullptr, b.positions).detach();

  // Each window's next tokens and their mask bytes, from the shard itself (the window starts where the
  // sampler put it: inputs[0] is token (start * 37) % 500, and 37 is invertible mod 500).
  auto next_tokens = torch::empty_like(b.targets);
  auto mask = torch::empty_like(b.targets);
  for (int64_t i = 0; i < 4; ++i) {
    const int64_t first = b.inputs[i][0].item<int64_t>();
    int64_t start = 0;
    while ((start * 37) % 500 != first) ++start;  // the first window start with this token: the only one below 500
    REQUIRE(start + 24 < static_cast<int64_t>(mask_of_token.size()));
    for (int64_t j = 0; j < 24; ++j) {
      next_tokens[i][j] = ((start + j + 1) * 37) % 500;
      mask[i][j] = mask_of_token[static_cast<size_t>(start + j + 1)];
    }
  }
  REQUIRE(next_tokens.masked_select(mask.to(torch::kBool)).equal(b.targets.masked_select(mask.to(torch::kBool))));
  const auto case_file = loom::test::scratch_dir("sft-loss-case") / "case.json";
  std::ofstream(case_file) << nlohmann::json{{"logits", loom::test::tensor_json(logits)},
                                             {"next_tokens", loom::test::tensor_json(next_tokens)},
                                             {"mask", loom::test::tensor_json(mask)},
                                             {"label_smoothing", smoothing}}.dump();
  const auto golden = loom::test::python_golden("sft_loss.py", case_file.string());
  CHECK(batch.loss_tokens() == golden["counted"].get<int64_t>());
  CHECK(batch.loss_tokens() < batch.tokens());  // the prompts are left out
  // A mean of token losses, each rounded as values as large as the largest logit are (test_losses.cpp).
  const double logit_scale = std::max(1.0, logits.abs().max().item<double>());
  CHECK_THAT(loss.item<double>(), loom::test::close_to(golden["loss"].get<double>(), 0.0, 8 * loom::test::kFloatEps * logit_scale));

  // Micro-batches (the Trainer's split) weighted by their counted targets give the whole batch's mean.
  const auto first = task->train_batch(3, 0, 1), rest = task->train_batch(3, 1, 3);
  const double weighted = (task->loss(first, torch::kCPU, smoothing).item<double>() * first.loss_tokens() +
                           task->loss(rest, torch::kCPU, smoothing).item<double>() * rest.loss_tokens()) /
                          static_cast<double>(first.loss_tokens() + rest.loss_tokens());
  CHECK_THAT(weighted, loom::test::close_to(golden["loss"].get<double>(), 0.0, 8 * loom::test::kFloatEps * logit_scale));
}
