// Config parsing, validation messages and round trips; durable file I/O.
#include <yaml-cpp/yaml.h>

#include <fstream>
#include <set>
#include <tuple>

#include "core/config.h"
#include "core/config_fields.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/strings.h"
#include "core/system.h"
#include "test_util.h"

using loom::Config;
using loom::ConfigError;
using loom::parse_config;
using loom::starts_with;
using loom::test::config_error;

namespace {

std::vector<std::string> all_keys() {
  Config c;
  std::vector<std::string> keys;
  loom::visit_fields(c, [&](const char* key, auto&, const char*) { keys.push_back(key); });
  return keys;
}

}  // namespace

TEST_CASE("config: an empty file gives the documented defaults", "[config]") {
  const Config c = parse_config("", "empty.yaml");
  CHECK(c.model.arch == loom::ModelArch::kGpt);
  CHECK(c.model.d_model == 256);
  CHECK(c.model.n_heads == 4);
  CHECK(c.model.ffn_dim() == 4 * 256);
  CHECK(c.model.tie_embeddings);
  CHECK(c.optim.betas == std::vector<double>{0.9, 0.95});
  CHECK(c.schedule.name == loom::ScheduleKind::kWarmupCosine);
  CHECK(c.schedule_total_steps() == c.train.max_steps);
  CHECK(c.origin.empty());
  CHECK(c.where("model.d_model") == "empty.yaml (default)");
}

TEST_CASE("config: values of every type are parsed and their origin recorded", "[config]") {
  const std::string yaml =
      "run:\n"
      "  seed: 7\n"
      "model:\n"
      "  d_model: 128\n"
      "  d_ff: 300\n"
      "  dropout: 0.25\n"
      "  tie_embeddings: false\n"
      "optim:\n"
      "  betas: [0.8, 0.99]\n"
      "  lr: 1e-3\n"
      "schedule:\n"
      "  name: wsd\n"
      "  total_steps: 500\n";
  const Config c = parse_config(yaml, "x.yaml");
  CHECK(c.run.seed == 7);
  CHECK(c.model.d_model == 128);
  CHECK(c.model.ffn_dim() == 300);
  CHECK(c.model.dropout == 0.25);
  CHECK_FALSE(c.model.tie_embeddings);
  CHECK(c.optim.betas == std::vector<double>{0.8, 0.99});
  CHECK(c.optim.lr == 1e-3);
  CHECK(c.schedule.name == loom::ScheduleKind::kWsd);
  CHECK(c.schedule_total_steps() == 500);
  CHECK(c.where("model.d_ff") == "x.yaml:5");
  CHECK(c.where("schedule.total_steps") == "x.yaml:13");
}

TEST_CASE("config: a validation error names file, line, key and the constraint", "[config]") {
  const std::string yaml =
      "run:\n"
      "  seed: 1\n"
      "model:\n"
      "  d_model: 256\n"
      "  n_heads: 7\n";
  CHECK(config_error(yaml) == "x.yaml:5: model.n_heads: 7 does not divide model.d_model=256");

  // Every problem is reported at once, one per line, in declaration order.
  CHECK(config_error("optim:\n  eps: 0\ntrain:\n  max_steps: 0\n") ==
        "x.yaml:2: optim.eps: 0 must be > 0\nx.yaml:4: train.max_steps: 0 must be > 0");
  // One bad value can break several constraints; each is named.
  CHECK(config_error("optim:\n  lr: -1\n") ==
        "x.yaml:2: optim.lr: -1 must be > 0\nx.yaml (default): schedule.min_lr: 0 must be in [0, optim.lr=-1]");
  // A key left at its default is named as such.
  CHECK(config_error("model:\n  max_seq_len: 64\n") == "x.yaml (default): data.seq_len: 128 exceeds model.max_seq_len=64");
  CHECK(config_error("train:\n  batch_size: 30\n  micro_batch_size: 4\n") ==
        "x.yaml:2: train.batch_size: 30 must be a multiple of train.micro_batch_size * parallel.dp = 4 * 1");
  CHECK(config_error("precision:\n  dtype: fp16\n  loss_scale_backoff: 2\n") ==
        "x.yaml:3: precision.loss_scale_backoff: 2 must be in (0, 1)");
  CHECK(config_error("train:\n  activation_checkpointing: some\n") ==
        "x.yaml:2: train.activation_checkpointing: 'some' is not one of none, full, selective");
  CHECK(config_error("schedule:\n  name: cosine\n") ==
        "x.yaml:2: schedule.name: 'cosine' is not one of warmup_cosine, inverse_sqrt, constant, linear, wsd");
  CHECK(config_error("train:\n  batch_tokens: -1\n") == "x.yaml:2: train.batch_tokens: -1 must be >= 0 (0: off)");
  CHECK(starts_with(config_error("train:\n  batch_tokens: 4096\n"),
                    "x.yaml:2: train.batch_tokens: token-based batching is for encoder-decoder runs"));
}

TEST_CASE("config: context parallelism refuses what ring attention cannot run, naming the key", "[config]") {
  CHECK(config_error("", {"parallel.cp=2"}).empty());  // data.seq_len 128, dropout 0.1
  CHECK(config_error("", {"parallel.cp=0"}) == "--set parallel.cp=0: parallel.cp: 0 must be >= 1");
  CHECK(config_error("data:\n  seq_len: 96\n", {"parallel.cp=32"}) ==
        "x.yaml:2: data.seq_len: 96 must be a multiple of 2 * parallel.cp = 64 (each sequence is cut into 2 * cp "
        "equal chunks, two per context-parallel rank)");
  CHECK_THAT(config_error("model:\n  arch: transformer\n", {"parallel.cp=2"}),
             Catch::Contains("--set parallel.cp=2: parallel.cp: 2: context parallelism is built for model.arch=gpt"));
  // What the encoder-decoder still refuses says why and what to do.
  CHECK_THAT(config_error("model:\n  arch: transformer\n", {"data.document_mask=true"}),
             Catch::Contains("data.document_mask: packs documents into model.arch=gpt windows") &&
                 Catch::Contains("set it false"));
  CHECK_THAT(config_error("model:\n  arch: transformer\n  init_from: x.safetensors\n"),
             Catch::Contains("x.yaml:3: model.init_from: model.arch=transformer reads Hugging Face T5ForConditionalGeneration weights only") &&
                 Catch::Contains("leave it empty"));
  // With sequence parallelism each TP rank keeps 1/tp of a CP rank's positions: 128 / 4 = 32 over 2.
  CHECK(config_error("", {"parallel.cp=4", "parallel.tp=2", "parallel.sequence_parallel=true"}).empty());
  CHECK(config_error("data:\n  seq_len: 24\nmodel:\n  n_heads: 8\n",
                     {"parallel.cp=2", "parallel.tp=8", "parallel.sequence_parallel=true"}) ==
        "x.yaml:2: data.seq_len: 24 / parallel.cp=2 must be a multiple of parallel.tp=8 with "
        "parallel.sequence_parallel (each tensor-parallel rank keeps 1/tp of a context-parallel rank's positions)");
}

TEST_CASE("config: hybrid sharding's shard size divides dp and needs ZeRO, naming parallel.shard_size", "[config]") {
  const std::string dp4 = "parallel.dp=4", batch = "train.batch_size=16", micro = "train.micro_batch_size=0";
  CHECK(config_error("", {dp4, batch, micro, "parallel.zero=3", "parallel.shard_size=2"}).empty());
  CHECK(config_error("", {"parallel.dp=-1", "parallel.zero=1", "parallel.shard_size=8"}).empty());  // the mesh checks
  CHECK(config_error("", {dp4, batch, micro, "parallel.zero=1", "parallel.shard_size=3"}) ==
        "--set parallel.shard_size=3: parallel.shard_size: 3 does not divide parallel.dp=4: the DP ranks split into "
        "groups of shard_size");
  CHECK(config_error("", {dp4, batch, micro, "parallel.shard_size=2"}) ==
        "--set parallel.shard_size=2: parallel.shard_size: 2 shards ZeRO's state, but parallel.zero is 0: set "
        "parallel.zero 1, 2 or 3, or parallel.shard_size 0");
  CHECK(config_error("", {"parallel.shard_size=-2"}) ==
        "--set parallel.shard_size=-2: parallel.shard_size: -2 must be >= 0 (0: shard over the whole DP group)");
}

TEST_CASE("config: every key that sizes a resource is bounded, naming the key, the value and the limit", "[config]") {
  const std::string cores = std::to_string(loom::usable_cpu_cores());
  CHECK(config_error("", {"runtime.threads=" + cores}).empty());
  const auto threads = config_error("runtime:\n  threads: 100000\n");
  CHECK(starts_with(threads, "x.yaml:2: runtime.threads: 100000 exceeds the " + cores + " CPU cores this process can use"));
  CHECK(starts_with(config_error("", {"runtime.threads=100000"}),
                    "--set runtime.threads=100000: runtime.threads: 100000 exceeds the " + cores));
  // Each bound: at the limit accepted, one past it refused with the limit in the message.
  const std::vector<std::tuple<std::string, std::string, std::string, std::vector<std::string>>> bounds = {
      {"train.batch_size", "16777216", "16777217", {"train.micro_batch_size=16777216"}},
      {"train.micro_batch_size", "16777216", "16777217", {"train.batch_size=16777216"}},
      {"train.loss_chunk_tokens", "1073741824", "1073741825", {}},
      {"train.eval_batches", "16777216", "16777217", {}},
      {"parallel.bucket_mb", "65536", "65537", {}},
      {"parallel.timeout_s", "604800", "604801", {}},
      {"data.synthetic_valid_size", "16777216", "16777217", {"model.arch=transformer", "model.norm_position=post",
                                                              "model.position=sinusoidal", "data.synthetic=copy"}},
      {"decode.max_len_b", "1073741824", "1073741825", {}},
      {"decode.beam", "2048", "2049", {"decode.batch_size=32"}},
  };
  for (const auto& [key, limit, beyond, others] : bounds) {
    INFO(key);
    auto sets = others;
    sets.push_back(key + "=" + limit);
    CHECK(config_error("", sets).empty());
    sets.back() = key + "=" + beyond;
    const auto message = config_error("", sets);
    CHECK_THAT(message, Catch::Contains("--set " + key + "=" + beyond + ": " + key + ": " + beyond) &&
                            Catch::Contains("limit of "));
  }
}

TEST_CASE("config: unknown keys and sections are rejected with the known keys", "[config]") {
  const auto yaml_error = config_error("model:\n  d_modle: 64\n");
  CHECK(starts_with(yaml_error, "x.yaml:2: model.d_modle: unknown key (known keys: model."));
  CHECK(yaml_error.find("model.d_model") != std::string::npos);
  CHECK(yaml_error.find("optim.lr") == std::string::npos);  // only the section's own keys

  const auto set_error = config_error("", {"model.foo=1"});
  CHECK(starts_with(set_error, "--set model.foo=1: model.foo: unknown key (known keys: "));
  CHECK(set_error.find("model.n_layers") != std::string::npos);

  CHECK(starts_with(config_error("run:\n  seed: 1\nmodle:\n  d_model: 64\n"), "x.yaml:3: modle: unknown section"));
  CHECK(config_error("model: 3\n") == "x.yaml:1: model: expected a mapping of keys, got '3'");
  CHECK(config_error("", {"model.d_model"}) == "--set model.d_model: expected --set key.path=value");
}

TEST_CASE("config: values of the wrong type are rejected", "[config]") {
  CHECK(config_error("run:\n  seed: 1\nmodel:\n  d_model: abc\n") ==
        "x.yaml:4: model.d_model: expected an integer, got 'abc'");
  CHECK(config_error("model:\n  d_model: 12abc\n") == "x.yaml:2: model.d_model: expected an integer, got '12abc'");
  CHECK(config_error("model:\n  d_model: 1.5\n") == "x.yaml:2: model.d_model: expected an integer, got '1.5'");
  CHECK(config_error("model:\n  d_model: [1]\n") == "x.yaml:2: model.d_model: expected an integer, got a list");
  CHECK(config_error("model:\n  tie_embeddings: maybe\n") ==
        "x.yaml:2: model.tie_embeddings: expected true or false, got 'maybe'");
  CHECK(config_error("optim:\n  lr: nan\n") == "x.yaml:2: optim.lr: expected a finite number, got 'nan'");
  CHECK(config_error("optim:\n  betas: 0.9\n") == "x.yaml:2: optim.betas: expected a list of numbers, got '0.9'");
  CHECK(config_error("optim:\n  betas: [0.9, x]\n") == "x.yaml:2: optim.betas[1]: expected a finite number, got 'x'");
  CHECK(config_error("", {"model.d_model=abc"}) ==
        "--set model.d_model=abc: model.d_model: expected an integer, got 'abc'");
}

TEST_CASE("config: malformed YAML is reported with its line", "[config]") {
  const auto message = config_error("run:\n  seed: 1\nmodel:\n  d_model: [64, 128\n  n_heads: 4\n");
  CHECK(starts_with(message, "x.yaml:"));
  CHECK(message.find("malformed YAML") != std::string::npos);
  // A stray tab-free bad indentation on line 3.
  CHECK(starts_with(config_error("model:\n  d_model: 64\n n_heads: 4\n"), "x.yaml:3: malformed YAML: "));
}

TEST_CASE("config: --set overrides the file and is named in messages", "[config]") {
  const Config c = parse_config("model:\n  d_model: 128\n", "x.yaml", {"model.d_model=64", "optim.betas=[0.5, 0.6]"});
  CHECK(c.model.d_model == 64);
  CHECK(c.where("model.d_model") == "--set model.d_model=64");
  CHECK(c.optim.betas == std::vector<double>{0.5, 0.6});
  CHECK(config_error("model:\n  d_model: 128\n", {"model.n_heads=3"}) ==
        "--set model.n_heads=3: model.n_heads: 3 does not divide model.d_model=128");
}

TEST_CASE("config: to_yaml round-trips every key exactly", "[config]") {
  const std::vector<std::string> overrides = {
      "run.dir=/tmp/some run", "run.seed=99",        "model.vocab_size=1000", "model.d_model=96",
      "model.n_heads=3",       "model.dropout=0.1",  "model.tie_embeddings=false",
      "optim.lr=0.00031415926535897931",             "optim.betas=[0.85, 0.975]",
      "optim.weight_decay=0.3", "schedule.name=inverse_sqrt", "schedule.decay_fraction=0.37",
      "train.micro_batch_size=8", "parallel.dp=-1",   "precision.dtype=bf16", "runtime.device=cuda"};
  const Config a = parse_config("", "a.yaml", overrides);
  const std::string yaml = to_yaml(a);
  const Config b = parse_config(yaml, "b.yaml");
  CHECK(to_yaml(b) == yaml);
  CHECK(b.run.dir == "/tmp/some run");
  CHECK(b.model.vocab_size == 1000);
  CHECK(b.model.n_heads == 3);
  CHECK_FALSE(b.model.tie_embeddings);
  CHECK(b.optim.lr == 0.00031415926535897931);  // bit-exact double
  CHECK(b.optim.betas == std::vector<double>{0.85, 0.975});
  CHECK(b.schedule.decay_fraction == 0.37);
  CHECK(b.parallel.dp == -1);
  CHECK(b.runtime.device == loom::DeviceKind::kCuda);

  // Every declared key is in the dump, and every key of the dump is a declared one.
  const auto keys = all_keys();
  const YAML::Node root = YAML::Load(yaml);
  // Nested sections (model.moe) are mappings inside their section.
  std::set<std::string> dumped;
  std::function<void(const std::string&, const YAML::Node&)> walk = [&](const std::string& prefix, const YAML::Node& node) {
    for (const auto& entry : node) {
      const std::string key = prefix + "." + entry.first.as<std::string>();
      if (entry.second.IsMap()) walk(key, entry.second);
      else dumped.insert(key);
    }
  };
  for (const auto& section : root) walk(section.first.as<std::string>(), section.second);
  CHECK(dumped == std::set<std::string>(keys.begin(), keys.end()));
}

TEST_CASE("config: the reference table has one row per key", "[config]") {
  const std::string table = loom::config_reference_markdown();
  const auto keys = all_keys();
  size_t rows = 0;
  for (size_t at = table.find("\n| `"); at != std::string::npos; at = table.find("\n| `", at + 1)) ++rows;
  CHECK(rows == keys.size());
  for (const auto& key : keys) CHECK(table.find("| `" + key + "` |") != std::string::npos);
  CHECK(table.find("| `model.d_model` | `256` |") != std::string::npos);
  CHECK(table.find("| `data.train` | `(empty)` |") != std::string::npos);
}

TEST_CASE("config: micro-batches and accumulation steps", "[config]") {
  Config c = parse_config("train:\n  batch_size: 32\n  micro_batch_size: 4\n", "x.yaml");
  CHECK(c.micro_batch_size(2) == 4);
  CHECK(c.accumulation_steps(2) == 32 / (4 * 2));
  c = parse_config("train:\n  batch_size: 32\n", "x.yaml");
  CHECK(c.micro_batch_size(4) == 8);
  CHECK(c.accumulation_steps(4) == 1);
  CHECK(c.accumulation_steps(1) == 1);
}

TEST_CASE("file_io: CRC-32 check value and chaining", "[file_io]") {
  const std::string check = "123456789";
  CHECK(loom::crc32(check.data(), check.size()) == 0xCBF43926u);
  CHECK(loom::crc32(nullptr, 0) == 0u);
  CHECK(loom::crc32("a", 1) == 0xE8B7BE43u);
  // Feeding the data in pieces gives the CRC of the whole.
  CHECK(loom::crc32(check.data() + 4, 5, loom::crc32(check.data(), 4)) == 0xCBF43926u);

  const auto dir = loom::test::scratch_dir("crc");
  std::string big(200000, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i * 2654435761u) >> 13);
  std::ofstream(dir / "big.bin", std::ios::binary) << big;
  CHECK(loom::crc32_file(dir / "big.bin") == loom::crc32(big.data(), big.size()));
  CHECK_THROWS_AS(loom::crc32_file(dir / "missing"), loom::Error);
}

TEST_CASE("file_io: write_file_atomic replaces the file and leaves no temporary", "[file_io]") {
  const auto dir = loom::test::scratch_dir("atomic");
  const auto path = dir / "out.txt";
  loom::write_file_atomic(path, "first version, longer than the second");
  loom::write_file_atomic(path, std::string("second\0binary", 13));
  CHECK(loom::read_file(path) == std::string("second\0binary", 13));
  // Larger than the writer's 1 MiB buffer (a checkpoint): written straight from the caller's bytes, all of them.
  std::string big(3 * (1 << 20) + 17, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i * 2654435761u) >> 11);
  loom::write_file_atomic(path, big);
  CHECK(loom::read_file(path) == big);
  int entries = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    CHECK(entry.path().filename() == "out.txt");
    ++entries;
  }
  CHECK(entries == 1);
  try {
    loom::read_file(dir / "nope.txt");
    FAIL("expected loom::Error");
  } catch (const loom::Error& e) {
    CHECK(std::string(e.what()).find("nope.txt") != std::string::npos);
  }
  CHECK_THROWS_AS(loom::write_file_atomic(dir / "no-such-dir" / "x", "x"), loom::Error);
}
