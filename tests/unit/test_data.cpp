// Token files (round trip, corruption detection) and the stateless LM batch sampler.
#include <fstream>
#include <set>

#include "core/error.h"
#include "core/file_io.h"
#include "data/corpus/lm_sampler.h"
#include "data/corpus/token_corpus.h"
#include "data/corpus/token_file.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace {

std::vector<int32_t> pseudo_random_tokens(size_t n, int64_t vocab) {
  std::vector<int32_t> tokens(n);
  uint64_t x = 88172645463325252ull;
  for (auto& t : tokens) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    t = static_cast<int32_t>(x % static_cast<uint64_t>(vocab));
  }
  tokens[0] = static_cast<int32_t>(vocab - 1);  // the largest id must survive the width
  return tokens;
}

// Rewrites byte `offset` of the file with `value`.
void poke(const fs::path& path, size_t offset, char value) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(offset));
  f.put(value);
}

char peek(const fs::path& path, size_t offset) { return loom::read_file(path).at(offset); }

// The message of the loom::Error opening the file throws (fails the test if it opens).
std::string open_error(const fs::path& path) {
  try {
    loom::TokenFile file(path);
  } catch (const loom::Error& e) {
    return e.what();
  }
  FAIL("opening " << path << " did not throw");
  return "";
}

}  // namespace

TEST_CASE("token_file: round trip with 2-byte and 4-byte tokens", "[data]") {
  const auto dir = loom::test::scratch_dir("tokens");
  for (int64_t vocab : {int64_t{1000}, int64_t{65536}, int64_t{65537}, int64_t{1} << 20}) {
    INFO("vocab " << vocab);
    const auto tokens = pseudo_random_tokens(5000, vocab);
    const auto path = dir / ("v" + std::to_string(vocab) + ".bin");
    loom::write_token_file(path, tokens, vocab, 0xDEADBEEF);
    const size_t width = vocab <= 65536 ? 2 : 4;
    CHECK(fs::file_size(path) == 64 + tokens.size() * width);

    const loom::TokenFile file(path);
    CHECK(file.size() == 5000);
    CHECK(file.vocab_size() == vocab);
    CHECK(file.tokenizer_crc() == 0xDEADBEEF);
    bool all_equal = true;
    for (size_t i = 0; i < tokens.size(); ++i) all_equal &= file.at(static_cast<int64_t>(i)) == tokens[i];
    CHECK(all_equal);
    const auto slice = file.slice(100, 50);
    CHECK(slice.scalar_type() == torch::kLong);
    CHECK(slice.equal(torch::tensor(std::vector<int64_t>(tokens.begin() + 100, tokens.begin() + 150))));
    CHECK(file.slice(0, 0).numel() == 0);
    CHECK_THROWS(file.slice(4990, 11));
    CHECK_THROWS(file.slice(-1, 2));
  }
  // An empty token file is valid.
  loom::write_token_file(dir / "empty.bin", {}, 10, 0);
  CHECK(loom::TokenFile(dir / "empty.bin").size() == 0);
  // Ids outside the vocabulary are refused at write time.
  CHECK_THROWS_AS(loom::write_token_file(dir / "bad.bin", {1, 2, 10}, 10, 0), loom::Error);
  CHECK_THROWS_AS(loom::write_token_file(dir / "bad.bin", {-1}, 10, 0), loom::Error);
}

TEST_CASE("token_file: damaged files are refused with a message naming the file", "[data]") {
  const auto dir = loom::test::scratch_dir("tokens-bad");
  const auto good = dir / "good.bin";
  loom::write_token_file(good, pseudo_random_tokens(1000, 500), 500, 1);
  auto copy = [&](const std::string& name) {
    fs::copy_file(good, dir / name);
    return dir / name;
  };

  const auto truncated = copy("truncated.bin");
  fs::resize_file(truncated, fs::file_size(good) - 1);
  auto message = open_error(truncated);
  CHECK(message.find(truncated.string()) != std::string::npos);
  CHECK(message.find("truncated") != std::string::npos);

  const auto padded = copy("padded.bin");
  fs::resize_file(padded, fs::file_size(good) + 2);
  CHECK(open_error(padded).find(padded.string()) != std::string::npos);

  const auto flipped = copy("flipped.bin");
  poke(flipped, 64 + 777, static_cast<char>(peek(flipped, 64 + 777) ^ 0x10));
  message = open_error(flipped);
  CHECK(message.find(flipped.string()) != std::string::npos);
  CHECK(message.find("checksum") != std::string::npos);

  const auto magic = copy("magic.bin");
  poke(magic, 0, 'X');
  message = open_error(magic);
  CHECK(message.find(magic.string()) != std::string::npos);
  CHECK(message.find("bad magic") != std::string::npos);

  const auto version = copy("version.bin");
  poke(version, 8, 9);  // the version field follows the 8-byte magic
  message = open_error(version);
  CHECK(message.find(version.string()) != std::string::npos);
  CHECK(message.find("version 9") != std::string::npos);

  const auto tiny = dir / "tiny.bin";
  std::ofstream(tiny, std::ios::binary) << "LOOMTOK";
  message = open_error(tiny);
  CHECK(message.find(tiny.string()) != std::string::npos);
  CHECK(message.find("only 7 bytes") != std::string::npos);

  message = open_error(dir / "missing.bin");
  CHECK(message.find((dir / "missing.bin").string()) != std::string::npos);

  CHECK(loom::TokenFile(good).size() == 1000);  // the original is still fine
}

namespace {

// A token file whose token i is i: every window shows where it starts.
fs::path counting_file(const std::string& name, int64_t n) {
  const auto path = loom::test::scratch_dir(name) / "count.bin";
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) tokens[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  loom::write_token_file(path, tokens, n, 0);
  return path;
}

}  // namespace

TEST_CASE("lm_sampler: windows are contiguous and targets are inputs shifted by one", "[data]") {
  const int64_t n = 3000, T = 16;
  const loom::TokenCorpus file(counting_file("sampler", n), "train");
  const loom::LmSampler sampler(42, T);
  const auto batch = sampler.train_batch(file, 5, 0, 64);
  REQUIRE(batch.inputs.sizes() == std::vector<int64_t>({64, T}));
  REQUIRE(batch.targets.sizes() == std::vector<int64_t>({64, T}));
  const auto starts = batch.inputs.index({torch::indexing::Slice(), 0});
  CHECK(batch.inputs.equal(starts.unsqueeze(1) + torch::arange(T, torch::kLong)));
  CHECK(batch.targets.equal(batch.inputs + 1));
  // Every window lies inside the file, target of the last position included.
  CHECK(starts.min().item<int64_t>() >= 0);
  CHECK(starts.max().item<int64_t>() + T + 1 <= n);
  for (int64_t i = 0; i < 64; ++i) CHECK(sampler.window_start(file, 5, i) == starts[i].item<int64_t>());
  // 64 draws from 2984 positions: the starts are spread, not repeated.
  std::set<int64_t> distinct(starts.data_ptr<int64_t>(), starts.data_ptr<int64_t>() + 64);
  CHECK(distinct.size() >= 60);
}

TEST_CASE("lm_sampler: batches are a pure function of (seed, step, index)", "[data]") {
  const loom::TokenCorpus file(counting_file("sampler-det", 5000), "train");
  const loom::LmSampler sampler(7, 12);
  const auto a = sampler.train_batch(file, 3, 0, 8);
  CHECK(a.inputs.equal(loom::LmSampler(7, 12).train_batch(file, 3, 0, 8).inputs));
  CHECK_FALSE(a.inputs.equal(sampler.train_batch(file, 4, 0, 8).inputs));
  CHECK_FALSE(a.inputs.equal(loom::LmSampler(8, 12).train_batch(file, 3, 0, 8).inputs));
  // A DP rank's slice of the global batch is exactly those rows of the global batch.
  using torch::indexing::Slice;
  for (int64_t first : {0, 2, 4, 6}) {
    const auto part = sampler.train_batch(file, 3, first, 2);
    CHECK(part.inputs.equal(a.inputs.index({Slice(first, first + 2)})));
    CHECK(part.targets.equal(a.targets.index({Slice(first, first + 2)})));
  }
  CHECK(sampler.train_batch(file, 3, 5, 3).inputs.equal(a.inputs.index({Slice(5, 8)})));
}

TEST_CASE("lm_sampler: evaluation windows are consecutive and wrap around", "[data]") {
  const int64_t n = 101, T = 10;  // (101 - 1) / 10 = 10 windows starting at 0, 10, ..., 90
  const loom::TokenCorpus file(counting_file("sampler-eval", n), "train");
  const loom::LmSampler sampler(1, T);
  for (int64_t index : {0, 1, 2, 3}) {
    const auto batch = sampler.eval_batch(file, index * 4, 4);
    for (int64_t j = 0; j < 4; ++j) {
      const int64_t start = ((index * 4 + j) % 10) * T;
      CHECK(batch.inputs[j].equal(torch::arange(start, start + T, torch::kLong)));
      CHECK(batch.targets[j].equal(torch::arange(start + 1, start + T + 1, torch::kLong)));
    }
  }
  // Too few tokens for one window is an error naming the file, not a crash.
  const loom::TokenCorpus small(counting_file("sampler-small", 10), "train");
  try {
    loom::LmSampler(1, T).train_batch(small, 0, 0, 1);
    FAIL("expected loom::Error");
  } catch (const loom::Error& e) {
    CHECK(std::string(e.what()).find(small.name()) != std::string::npos);
  }
  CHECK_THROWS_AS(loom::LmSampler(1, T).eval_batch(small, 0, 1), loom::Error);
}
