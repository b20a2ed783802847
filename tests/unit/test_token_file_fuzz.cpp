// Fuzz-style: thousands of damaged versions of a valid token file and pair file (cut at every length,
// every header byte flipped several ways, data bytes flipped, the magic of another format, garbage) are
// each either opened with every token inside the vocabulary, or refused with a loom::Error naming the
// file. Never another exception, a crash, or a read past the end of the mapping.
#include "core/error.h"
#include "data/pairs/pair_file.h"
#include "data/corpus/token_file.h"
#include "fuzz_util.h"
#include "test_util.h"

namespace fs = std::filesystem;

using loom::test::fuzz;
using loom::test::mutations;
using loom::test::read_bytes;

TEST_CASE("token file fuzz: every damaged file is read correctly or refused naming the file", "[data][fuzz]") {
  const auto dir = loom::test::scratch_dir("token-fuzz");
  std::vector<int32_t> tokens;
  for (int32_t i = 0; i < 200; ++i) tokens.push_back((i * 37) % 300);
  loom::write_token_file(dir / "good.bin", tokens, 300, 0xC0FFEE);
  const int64_t opened = fuzz(dir, mutations(read_bytes(dir / "good.bin")), [](const fs::path& path) {
    const loom::TokenFile file(path);
    const auto all = file.slice(0, file.size());
    REQUIRE(all.size(0) == file.size());
    if (file.size() > 0) CHECK(all.max().item<int64_t>() < file.vocab_size());
  });
  // What loom does not check opens (the tokenizer checksum is compared with the run's tokenizer later, the
  // reserved bytes are reserved, and a vocabulary grown by a flip still holds every id): some, not most.
  CHECK(opened > 0);
  CHECK(opened < 400);
}

TEST_CASE("pair file fuzz: every damaged file is read correctly or refused naming the file", "[data][fuzz]") {
  const auto dir = loom::test::scratch_dir("pair-fuzz");
  std::vector<std::vector<int32_t>> sources, targets;
  for (int32_t i = 0; i < 30; ++i) {
    sources.push_back({3 + i % 50, 4 + (i * 7) % 90, 5});
    targets.push_back({6 + (i * 11) % 80, 7});
  }
  loom::write_pair_file(dir / "good.bin", sources, targets, 100, 0xC0FFEE);
  const int64_t opened = fuzz(dir, mutations(read_bytes(dir / "good.bin")), [](const fs::path& path) {
    const loom::PairFile file(path);
    for (int64_t i = 0; i < file.size(); ++i) {
      CHECK(file.source(i).size(0) == file.source_length(i));
      CHECK(file.target(i).size(0) == file.target_length(i));
    }
  });
  CHECK(opened > 0);
}
