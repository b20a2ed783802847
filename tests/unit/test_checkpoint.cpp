// Checkpoints: exact round trip of model, AdamW state, counters and RNG; detection of damaged or
// incomplete checkpoints; pruning.
#include <ATen/CPUGeneratorImpl.h>

#include <fstream>
#include <set>

#include "core/error.h"
#include "core/file_io.h"
#include "models/gpt.h"
#include "optim/cross_entropy.h"
#include "optim/optimizer.h"
#include "train/checkpoint.h"
#include "train/checkpoint_reshard.h"
#include "train/checkpoint_weights.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace {

loom::Config tiny_config(const std::vector<std::string>& extra = {}) {
  std::vector<std::string> overrides = {"model.vocab_size=61", "model.d_model=32", "model.n_layers=2",
                                        "model.n_heads=4",     "model.max_seq_len=16", "model.dropout=0",
                                        "data.seq_len=16",     "optim.lr=0.01",        "optim.weight_decay=0.1"};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return loom::parse_config("", "tiny.yaml", overrides);
}

struct Trainee {
  explicit Trainee(const loom::Config& config, uint64_t seed) {
    torch::manual_seed(seed);
    model = loom::Gpt(config.model);
    optimizer = loom::make_adamw(*model, config.optim);
  }
  void step(const torch::Tensor& inputs, const torch::Tensor& targets) {
    optimizer->zero_grad();
    const auto logits = model->forward(inputs);
    loom::cross_entropy(logits.view({-1, logits.size(-1)}), targets.view({-1})).backward();
    optimizer->step();
  }
  loom::CheckpointParts parts() { return {*model, optimizer.get()}; }
  std::vector<torch::Tensor> snapshot() {
    std::vector<torch::Tensor> out;
    for (const auto& p : model->parameters()) out.push_back(p.detach().clone());
    return out;
  }

  loom::Gpt model{nullptr};
  std::unique_ptr<torch::optim::AdamW> optimizer;
};

bool bitwise_equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!a[i].equal(b[i])) return false;
  return true;
}

struct Batch {
  torch::Tensor inputs, targets;
};

Batch random_batch(int64_t seed) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(seed));
  auto window = torch::randint(0, 61, {4, 17}, generator, torch::kLong);
  using torch::indexing::Slice;
  return {window.index({Slice(), Slice(0, 16)}).contiguous(), window.index({Slice(), Slice(1, 17)}).contiguous()};
}

void flip_byte(const fs::path& path, size_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  const char c = static_cast<char>(f.get());
  f.seekp(static_cast<std::streamoff>(offset));
  f.put(static_cast<char>(c ^ 0x01));
}

std::set<std::string> entries(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

const char* kShard = "shard-dp0-tp0-pp0.pt";

}  // namespace

TEST_CASE("checkpoint: a round trip restores parameters, AdamW state, counters and RNG exactly", "[checkpoint]") {
  const auto run = loom::test::scratch_dir("ckpt-roundtrip");
  const auto config = tiny_config();
  const loom::Mesh mesh(config, 1, 0);
  const auto b1 = random_batch(1), b2 = random_batch(2), b3 = random_batch(3);

  Trainee original(config, 1);
  original.step(b1.inputs, b1.targets);
  original.step(b2.inputs, b2.targets);
  loom::save_checkpoint(run, config, mesh, original.parts(), {2, 128, 3.25});
  const auto saved_params = original.snapshot();
  const auto rand_after_save = torch::rand({8});
  original.step(b3.inputs, b3.targets);  // the reference third step

  Trainee restored(config, 99);  // a different initialization, overwritten by the load
  REQUIRE_FALSE(bitwise_equal(restored.snapshot(), saved_params));
  REQUIRE(loom::latest_checkpoint(run) == std::optional<int64_t>(2));
  const auto state = loom::load_checkpoint(run, 2, mesh, restored.parts());
  CHECK(state.step == 2);
  CHECK(state.tokens == 128);
  CHECK(state.elapsed_s == 3.25);
  CHECK(torch::rand({8}).equal(rand_after_save));
  CHECK(bitwise_equal(restored.snapshot(), saved_params));
  // The third step from the restored moments equals the original's third step, bit for bit.
  restored.step(b3.inputs, b3.targets);
  CHECK(bitwise_equal(restored.snapshot(), original.snapshot()));
  // The decay/no-decay split survives the load.
  auto& groups = restored.optimizer->param_groups();
  CHECK(static_cast<torch::optim::AdamWOptions&>(groups[0].options()).weight_decay() == 0.1);
  CHECK(static_cast<torch::optim::AdamWOptions&>(groups[1].options()).weight_decay() == 0.0);

  // The directory holds the shard, the resolved config and a manifest describing both.
  const auto dir = loom::checkpoint_dir(run, 2);
  CHECK(dir == run / "checkpoints" / "2");
  CHECK(entries(dir) == std::set<std::string>{kShard, "config.yaml", "manifest.json"});
  CHECK(loom::read_file(dir / "config.yaml") == loom::to_yaml(config));
  const auto manifest = nlohmann::json::parse(loom::read_file(dir / "manifest.json"));
  CHECK(manifest["step"] == 2);
  CHECK(manifest["tokens"] == 128);
  CHECK(manifest["layout"] == nlohmann::json({{"dp", 1}, {"cp", 1}, {"tp", 1}, {"pp", 1}, {"shard_size", 1}, {"ep", 1}, {"zero", 0}}));
  CHECK(manifest["files"][kShard]["bytes"] == fs::file_size(dir / kShard));
  CHECK(manifest["files"][kShard]["crc32"] == loom::crc32_file(dir / kShard));
  CHECK(manifest["files"]["config.yaml"]["crc32"] == loom::crc32_file(dir / "config.yaml"));

  // An inference-only load (no optimizer, RNG untouched) gives the same weights.
  Trainee inference(config, 5);
  torch::manual_seed(77);
  const auto expected_rand = torch::rand({4});
  torch::manual_seed(77);
  loom::load_checkpoint(run, 2, mesh, {*inference.model, nullptr}, /*restore_rng=*/false);
  CHECK(torch::rand({4}).equal(expected_rand));
  CHECK(bitwise_equal(inference.snapshot(), saved_params));
}

TEST_CASE("checkpoint: damaged or incomplete checkpoints are detected and skipped", "[checkpoint]") {
  const auto run = loom::test::scratch_dir("ckpt-damaged");
  const auto config = tiny_config();
  const loom::Mesh mesh(config, 1, 0);
  Trainee t(config, 1);
  loom::save_checkpoint(run, config, mesh, t.parts(), {10, 0, 0});
  loom::save_checkpoint(run, config, mesh, t.parts(), {20, 0, 0});
  const auto dir20 = loom::checkpoint_dir(run, 20);
  CHECK_FALSE(loom::checkpoint_problem(dir20).has_value());
  CHECK(loom::latest_checkpoint(run) == std::optional<int64_t>(20));

  // One flipped byte in the middle of the shard.
  const auto shard = dir20 / kShard;
  const size_t middle = fs::file_size(shard) / 2;
  flip_byte(shard, middle);
  CHECK(loom::checkpoint_problem(dir20) == std::optional<std::string>(std::string(kShard) + " fails its checksum"));
  CHECK(loom::latest_checkpoint(run) == std::optional<int64_t>(10));
  try {
    loom::load_checkpoint(run, 20, mesh, t.parts());
    FAIL("loading a corrupt checkpoint must throw");
  } catch (const loom::Error& e) {
    CHECK(std::string(e.what()).find(dir20.string()) != std::string::npos);
  }
  flip_byte(shard, middle);  // repaired
  CHECK(loom::latest_checkpoint(run) == std::optional<int64_t>(20));

  // A truncated shard, then a missing file.
  const std::string shard_bytes = loom::read_file(shard);
  fs::resize_file(shard, shard_bytes.size() - 10);
  CHECK(loom::checkpoint_problem(dir20) == std::optional<std::string>(std::string(kShard) + " has the wrong size"));
  CHECK(loom::latest_checkpoint(run) == std::optional<int64_t>(10));
  loom::write_file_atomic(shard, shard_bytes);
  fs::remove(dir20 / "config.yaml");
  CHECK(loom::checkpoint_problem(dir20) == std::optional<std::string>("config.yaml is missing"));
  CHECK(loom::latest_checkpoint(run) == std::optional<int64_t>(10));

  // A garbled manifest.
  const auto dir10 = loom::checkpoint_dir(run, 10);
  loom::write_file_atomic(dir10 / "manifest.json", "{\"files\": ");
  const auto problem = loom::checkpoint_problem(dir10);
  REQUIRE(problem.has_value());
  CHECK(problem->rfind("manifest.json is unreadable", 0) == 0);
  CHECK_FALSE(loom::latest_checkpoint(run).has_value());
}

TEST_CASE("checkpoint: temporary and manifest-less directories are ignored", "[checkpoint]") {
  const auto run = loom::test::scratch_dir("ckpt-leftovers");
  const auto config = tiny_config();
  const loom::Mesh mesh(config, 1, 0);
  Trainee t(config, 1);
  CHECK_FALSE(loom::latest_checkpoint(run).has_value());  // no checkpoints/ at all
  loom::save_checkpoint(run, config, mesh, t.parts(), {20, 0, 0});

  // What a crash in the middle of writing step 30 leaves: a temporary directory with a shard.
  fs::create_directories(run / "checkpoints" / ".tmp-30");
  fs::copy_file(loom::checkpoint_dir(run, 20) / kShard, run / "checkpoints" / ".tmp-30" / kShard);
  // And a step directory that never got its manifest.
  fs::create_directories(loom::checkpoint_dir(run, 40));
  fs::copy_file(loom::checkpoint_dir(run, 20) / kShard, loom::checkpoint_dir(run, 40) / kShard);
  fs::create_directories(run / "checkpoints" / "notes");  // not a step name

  CHECK(loom::checkpoint_problem(loom::checkpoint_dir(run, 40)) == std::optional<std::string>("no manifest.json"));
  CHECK(loom::latest_checkpoint(run) == std::optional<int64_t>(20));

  // Saving step 40 again replaces the incomplete directory and clears its own temporary.
  loom::save_checkpoint(run, config, mesh, t.parts(), {40, 0, 0});
  CHECK(loom::latest_checkpoint(run) == std::optional<int64_t>(40));
  CHECK_FALSE(fs::exists(run / "checkpoints" / ".tmp-40"));
}

TEST_CASE("checkpoint: prune keeps the newest complete checkpoints", "[checkpoint]") {
  const auto run = loom::test::scratch_dir("ckpt-prune");
  const auto config = tiny_config();
  const loom::Mesh mesh(config, 1, 0);
  Trainee t(config, 1);
  for (int64_t step : {5, 10, 15, 20, 100}) loom::save_checkpoint(run, config, mesh, t.parts(), {step, 0, 0});
  fs::create_directories(run / "checkpoints" / ".tmp-105");

  // 100 sorts before 15 as a string: the order must be numeric.
  loom::prune_checkpoints(run, 2);
  CHECK(entries(run / "checkpoints") == std::set<std::string>{"20", "100"});
  CHECK(loom::latest_checkpoint(run) == std::optional<int64_t>(100));

  // A broken newest checkpoint does not count towards `keep`.
  flip_byte(loom::checkpoint_dir(run, 100) / kShard, 100);
  loom::prune_checkpoints(run, 1);
  CHECK(fs::exists(loom::checkpoint_dir(run, 20)));
  CHECK(loom::latest_checkpoint(run) == std::optional<int64_t>(20));
  loom::prune_checkpoints(run, 5);  // nothing to delete
  CHECK(fs::exists(loom::checkpoint_dir(run, 20)));
}

TEST_CASE("checkpoint: any DP size resumes it, another PP layout is refused", "[checkpoint]") {
  const auto run = loom::test::scratch_dir("ckpt-layout");
  const auto config = tiny_config();
  Trainee t(config, 1);
  loom::save_checkpoint(run, config, loom::Mesh(config, 1, 0), t.parts(), {3, 0, 0});
  // DP replicas are identical: rank 1 of a DP=2 job loads the same shard, parameters bitwise equal.
  const auto dp2 = tiny_config({"parallel.dp=2"});
  Trainee replica(dp2, 2);
  CHECK(loom::load_checkpoint(run, 3, loom::Mesh(dp2, 2, 1), replica.parts()).step == 3);
  for (const auto& p : t.model->named_parameters())
    CHECK(p.value().equal(replica.model->named_parameters()[p.key()]));
  // Another TP size or pipeline split reshards (tests/e2e/test_tensor_parallel.sh, test_pipeline_parallel.sh):
  // the last of two stages takes block 1, the final norm and its copy of the tied embedding.
  const auto pp2 = tiny_config({"parallel.pp=2"});
  torch::manual_seed(5);
  loom::Gpt last(pp2.model, loom::TensorParallelism{}, loom::model_stage(pp2.model, pp2.parallel, 1));
  CHECK(loom::load_checkpoint(run, 3, loom::Mesh(pp2, 2, 1), {*last}).step == 3);
  for (const auto& p : last->named_parameters())
    CHECK(p.value().equal(t.model->named_parameters()[p.key()]));
  CHECK(last->named_parameters().contains("token_embedding.weight"));
  CHECK(!last->named_parameters().contains("blocks.0.ln1.weight"));
  // A model with more blocks than the checkpoint looks for blocks the shard does not have.
  const auto deeper = tiny_config({"model.n_layers=3"});
  Trainee bigger(deeper, 1);
  CHECK_THROWS_AS(loom::load_checkpoint(run, 3, loom::Mesh(deeper, 1, 0), bigger.parts()), loom::Error);
}

// torch's InputArchive::read set_()s each parameter to the stored tensor, so without a shape check a
// checkpoint of other shapes would silently replace the model's parameters instead of being refused.
TEST_CASE("checkpoint: a model with other shapes is refused", "[checkpoint]") {
  const auto run = loom::test::scratch_dir("ckpt-shapes");
  const auto config = tiny_config();
  Trainee t(config, 1);
  loom::save_checkpoint(run, config, loom::Mesh(config, 1, 0), t.parts(), {3, 0, 0});
  // A wider model: the same parameter names, other shapes.
  const auto wider = tiny_config({"model.d_model=64"});
  Trainee wide(wider, 1);
  CHECK_THROWS_AS(loom::load_checkpoint(run, 3, loom::Mesh(wider, 1, 0), wide.parts()), loom::Error);
  CHECK(wide.model->named_parameters()["token_embedding.weight"].sizes() == std::vector<int64_t>({61, 64}));
}

TEST_CASE("checkpoint: a layout has one optimizer shard file per rank of its shard group", "[checkpoint]") {
  using nlohmann::json;
  CHECK(loom::saved_shard_files(json{{"dp", 4}, {"cp", 2}, {"zero", 0}}) == 1);  // the first replica's
  CHECK(loom::saved_shard_files(json{{"dp", 4}, {"zero", 2}}) == 4);
  CHECK(loom::saved_shard_files(json{{"dp", 4}, {"cp", 2}, {"zero", 1}}) == 8);  // before shard_size: all of dp x cp
  CHECK(loom::saved_shard_files(json{{"dp", 4}, {"cp", 2}, {"shard_size", 2}, {"zero", 3}}) == 4);  // cp x dp_shard
}

// The manifest's layout is the mesh's axis sizes by name plus "zero", as loom has always written it; an axis
// a manifest does not name (one its writer did not have: cp before context parallelism) reads as size 1.
TEST_CASE("checkpoint: a layout without an axis of this mesh loads as that axis of size 1", "[checkpoint]") {
  const auto run = loom::test::scratch_dir("ckpt-axes");
  const auto config = tiny_config();
  Trainee t(config, 1);
  loom::save_checkpoint(run, config, loom::Mesh(config, 1, 0), t.parts(), {3, 0, 0});
  const auto path = loom::checkpoint_dir(run, 3) / "manifest.json";
  auto manifest = nlohmann::json::parse(loom::read_file(path));
  // The keys a loom with the three fixed axes wrote (and read with layout.at("tp")), and cp and shard_size:
  // old and new manifests are one format.
  CHECK(manifest["layout"] == nlohmann::json({{"dp", 1}, {"cp", 1}, {"pp", 1}, {"tp", 1}, {"shard_size", 1}, {"ep", 1}, {"zero", 0}}));
  manifest["layout"] = {{"dp", 1}, {"zero", 0}};  // no tp, no pp, no cp, no shard_size
  loom::write_file_atomic(path, manifest.dump(2) + "\n");  // the manifest is not among its own checksums
  REQUIRE_FALSE(loom::checkpoint_problem(loom::checkpoint_dir(run, 3)));
  Trainee restored(config, 2);
  CHECK(loom::load_checkpoint(run, 3, loom::Mesh(config, 1, 0), restored.parts()).step == 3);
  CHECK(bitwise_equal(restored.snapshot(), t.snapshot()));
}

// Format 2 (before the weights were stored by range) kept the whole model, as Module::save writes it, in
// every shard file; such a checkpoint still resumes exactly.
TEST_CASE("checkpoint: a format-2 checkpoint (the whole model in its shard) resumes exactly", "[checkpoint]") {
  const auto run = loom::test::scratch_dir("ckpt-format2");
  const auto config = tiny_config();
  const loom::Mesh mesh(config, 1, 0);
  const auto b1 = random_batch(1), b2 = random_batch(2);
  Trainee original(config, 1);
  original.step(b1.inputs, b1.targets);
  loom::save_checkpoint(run, config, mesh, original.parts(), {1, 64, 1.0});
  // Rewritten as format 2 wrote it: the model archive, the optimizer state by range, the counters.
  const auto dir = loom::checkpoint_dir(run, 1);
  {
    torch::serialize::OutputArchive shard, model_archive;
    original.model->save(model_archive);
    shard.write("model", model_archive);
    loom::write_optimizer_state(shard, loom::whole_parameter_layout(*original.optimizer), *original.model);
    for (const char* key : {"state.step", "state.tokens"}) shard.write(key, torch::tensor({int64_t{1}}));
    shard.write("state.elapsed_s", torch::tensor({1.0}, torch::kDouble));
    shard.save_to((dir / kShard).string());
  }
  auto manifest = nlohmann::json::parse(loom::read_file(dir / "manifest.json"));
  CHECK(manifest["format"] == 4);
  manifest["format"] = 2;
  manifest["files"][kShard] = {{"bytes", fs::file_size(dir / kShard)}, {"crc32", loom::crc32_file(dir / kShard)}};
  loom::write_file_atomic(dir / "manifest.json", manifest.dump(2) + "\n");
  REQUIRE_FALSE(loom::checkpoint_problem(dir));

  Trainee restored(config, 9);
  CHECK(loom::load_checkpoint(run, 1, mesh, restored.parts(), /*restore_rng=*/false).step == 1);
  CHECK(bitwise_equal(restored.snapshot(), original.snapshot()));
  original.step(b2.inputs, b2.targets);
  restored.step(b2.inputs, b2.targets);  // from the restored moments: the same second step
  CHECK(bitwise_equal(restored.snapshot(), original.snapshot()));
}

namespace {
// WeightReader fed with the shard files, one by one, as load_checkpoint feeds it.
void read_weights(const std::vector<fs::path>& files, const loom::WeightLayout& layout) {
  loom::WeightReader reader(layout);
  for (const auto& file : files) {
    torch::serialize::InputArchive shard;
    shard.load_from(file.string(), torch::kCPU);
    reader.add(shard, file.string());
  }
  reader.finish(files.front().string());
}
}  // namespace

// The weights by element range (train/checkpoint_weights.h): files written by one partition of a model's
// flat parameters load into another and into the whole model; a missing file is named, not zero-filled.
TEST_CASE("checkpoint weights: pieces of one partition load into another, a missing one is refused", "[checkpoint]") {
  const auto dir = loom::test::scratch_dir("ckpt-weight-pieces");
  torch::manual_seed(3);
  torch::nn::Linear model(5, 7);  // weight (7, 5) then bias (7): 42 elements end to end, as a bucket lays them
  const auto flat = torch::cat({model->weight.detach().reshape(-1), model->bias.detach()});
  // Rank r of k holds elements [r s, (r + 1) s) of the flat buffer (s = ceil(42 / k), the last padded).
  auto partition = [&](int64_t k, int64_t r) {
    const int64_t s = (42 + k - 1) / k, begin = r * s, end = begin + s;
    loom::WeightLayout layout;
    layout.tensors.push_back(torch::full({s}, -1.0f));
    auto& slices = layout.slices.emplace_back();
    int64_t offset = 0;
    for (const auto& p : model->named_parameters()) {
      const int64_t first = std::max(begin, offset), last = std::min(end, offset + p.value().numel());
      if (first < last) slices.push_back({p.key(), p.value().sizes().vec(), false, first - offset, first - begin, last - first});
      offset += p.value().numel();
    }
    return layout;
  };
  std::vector<fs::path> files;
  for (int64_t r = 0; r < 2; ++r) {
    auto layout = partition(2, r);
    layout.tensors[0].copy_(torch::constant_pad_nd(flat, {0, 2 * 21 - 42}).narrow(0, r * 21, 21));
    torch::serialize::OutputArchive shard;
    loom::write_weights(shard, layout);
    files.push_back(dir / ("part" + std::to_string(r) + ".pt"));
    shard.save_to(files.back().string());
  }
  for (int64_t r = 0; r < 4; ++r) {  // 4 ranks of 11: rank 3 holds 9 elements and 2 of padding
    const auto layout = partition(4, r);
    read_weights(files, layout);
    const int64_t held = std::min<int64_t>(11, 42 - r * 11);
    CHECK(torch::equal(layout.tensors[0].narrow(0, 0, held), flat.narrow(0, r * 11, held)));
    if (held < 11) CHECK((layout.tensors[0].narrow(0, held, 11 - held) == -1).all().item<bool>());  // padding untouched
  }
  torch::nn::Linear copy(5, 7);
  read_weights(files, loom::weight_layout(*copy, nullptr));
  CHECK(torch::equal(copy->weight, model->weight));
  CHECK(torch::equal(copy->bias, model->bias));
  // Without the second file, the bias (and the weight's end) is missing: refused, and nothing written.
  torch::nn::Linear partial(5, 7);
  const auto before = partial->weight.detach().clone();
  CHECK_THROWS_WITH(read_weights({files[0]}, loom::weight_layout(*partial, nullptr)),
                    Catch::Matchers::Contains("lacks part of weight"));
  CHECK(torch::equal(partial->weight, before));
  // A model of another shape is refused by name.
  torch::nn::Linear wider(6, 7);
  CHECK_THROWS_WITH(read_weights(files, loom::weight_layout(*wider, nullptr)),
                    Catch::Matchers::Contains("weight is [7, 5] in the checkpoint and [7, 6] in the model"));
}
