// Fuzzing `loom prepare`'s untrusted inputs and outputs with the token files' mutations (fuzz_util.h):
// damaged corpora (cut, bytes flipped, garbage; plain JSONL, gzip, zstd) are prepared or refused with a
// loom::Error naming the file, never a crash or another exception; so are damaged document indexes and
// manifests when training opens them.
#include "core/error.h"
#include "core/file_io.h"
#include "data/corpus/document_index.h"
#include "data/prepare/prepare.h"
#include "data/corpus/token_corpus.h"
#include "fuzz_util.h"
#include "prepare_test_util.h"

namespace fs = std::filesystem;
using loom::test::Mutations;
using loom::test::write_bytes;

namespace {

// About `count` of fuzz_util's mutations, evenly spread over its list (cuts, header flips, data flips,
// the rest): a corpus is prepared anew for each case, too slow for every cut length.
Mutations spread(const Mutations& all, size_t count) {
  Mutations out;
  const size_t stride = std::max<size_t>(1, all.size() / count);
  for (size_t i = 0; i < all.size(); i += stride) out.push_back(all[i]);
  for (size_t i = all.size() - 4; i < all.size(); ++i) out.push_back(all[i]);  // padded, another format, text, garbage
  return out;
}

// Runs `open` on each mutation written to `path` (a name that matters: its extension, or manifest.json):
// it must succeed or throw a loom::Error naming `named`. Returns how many opened.
template <class Open>
int64_t fuzz_at(const fs::path& path, const std::string& named, const Mutations& cases, Open open) {
  int64_t opened = 0;
  for (const auto& [what, bytes] : cases) {
    write_bytes(path, bytes);
    try {
      open();
      ++opened;
    } catch (const loom::Error& e) {
      INFO(what << ": " << e.what());
      CHECK(std::string(e.what()).find(named) != std::string::npos);
    } catch (const std::exception& e) {
      FAIL(what << ": not a loom::Error: " << e.what());
    }
  }
  return opened;
}

}  // namespace

TEST_CASE("prepare fuzz: damaged corpora are prepared or refused naming the file", "[prepare][fuzz]") {
  const auto dir = loom::test::scratch_dir("prepare-fuzz");
  std::string jsonl, text;
  for (uint64_t i = 0; i < 200; ++i) {
    jsonl += R"({"text": ")" + loom::test::sentence(i) + R"(", "meta": {"n": )" + std::to_string(i) + "}}\n";
    text += loom::test::sentence(i) + "\n";
  }
  const std::vector<std::pair<std::string, std::string>> corpora = {
      {"c.jsonl", jsonl}, {"c.jsonl.gz", loom::test::gzip_bytes(jsonl)}, {"c.txt.zst", loom::test::zstd_bytes(text)}};
  for (const auto& [name, good] : corpora) {
    loom::PrepareOptions o;
    o.inputs = {(dir / name).string()};
    o.tokenizer.model = loom::test::tiny_tokenizer().string();
    o.out = dir / "out";
    o.stream.threads = 2;
    o.stream.encode.stop_at_problem = false;  // skip: as much damage as possible reaches the encoder
    const int64_t opened = fuzz_at(dir / name, (dir / name).string(), spread(loom::test::mutations(good), 80),
                                   [&] { loom::prepare(o); });
    UNSCOPED_INFO(name << ": " << opened << " prepared");
    CHECK(opened > 0);
  }
}

TEST_CASE("prepare fuzz: damaged document indexes and manifests are refused naming the file", "[prepare][fuzz]") {
  const auto dir = loom::test::scratch_dir("prepare-fuzz-out");
  std::string text;
  for (uint64_t i = 0; i < 300; ++i) text += loom::test::sentence(i) + "\n";
  write_bytes(dir / "c.txt", text);
  loom::PrepareOptions o;
  o.inputs = {(dir / "c.txt").string()};
  o.tokenizer.model = loom::test::tiny_tokenizer().string();
  o.out = dir / "out";
  loom::prepare(o);
  const auto shard_path = o.out / "train-00000.bin", index_path = o.out / "train-00000.idx";
  const loom::TokenFile shard(shard_path);
  const std::string index = loom::read_file(index_path);
  // Every mutation of fuzz_util's full set (each cut length, each header byte flipped): all refused, the
  // CRC covering the offsets and the header's reserved bytes required zero.
  const int64_t opened = loom::test::fuzz(dir, loom::test::mutations(index), [&](const fs::path& path) {
    const loom::DocumentIndex read(path, shard);
    for (int64_t d = 0; d < read.documents(); ++d) REQUIRE(read.length(d) > 0);
  });
  CHECK(opened == 0);

  const auto manifest_path = o.out / "manifest.json";
  const std::string manifest = loom::read_file(manifest_path);
  // A damaged shard name or count is reported naming the shard: every message names the directory.
  fuzz_at(manifest_path, o.out.string(), spread(loom::test::mutations(manifest, 0), 400), [&] {
    const loom::TokenCorpus corpus(o.out, "train");
    REQUIRE(corpus.tokens() > 0);
  });
}
