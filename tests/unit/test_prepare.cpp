// `loom prepare` end to end in the process: JSONL (plain, gzip, zstd) and text inputs -> shards whose
// documents are exactly the tokenizer's ids + EOS in input order, split by text hash; the same bytes
// whatever the thread count; a re-run on unchanged inputs does nothing; bad input (malformed JSON, a
// missing field, invalid UTF-8, empty and over-long documents) fails naming file:line or is skipped and
// counted; a full disk (a file-size limit) leaves nothing half-written; --train-tokenizer.
#include <signal.h>
#include <sys/resource.h>

#include <map>

#include "core/error.h"
#include "core/file_io.h"
#include "data/corpus/document_index.h"
#include "data/prepare/prepare.h"
#include "data/corpus/token_file.h"
#include "prepare_test_util.h"

namespace fs = std::filesystem;
using loom::test::sentence;
using loom::test::write_bytes;

namespace {

loom::TokenizerConfig tokenizer_file(const fs::path& path) {
  loom::TokenizerConfig config;
  config.model = path.string();
  return config;
}

struct Corpus {
  fs::path dir;
  std::vector<std::string> texts;  // every document's text, in input order
};

// a.jsonl (nested field too), b.txt.gz (one per line), c.jsonl.zst: `n` documents in all.
Corpus mixed_corpus(const std::string& name, uint64_t n) {
  Corpus c{loom::test::scratch_dir(name), {}};
  std::string a, b, cz;
  for (uint64_t i = 0; i < n; ++i) {
    const std::string text = sentence(i) + (i % 7 == 0 ? " caf\u00e9 \"quoted\"" : "");
    c.texts.push_back(text);
    const std::string escaped = i % 7 == 0 ? sentence(i) + " caf\\u00e9 \\\"quoted\\\"" : text;
    if (i % 3 == 0) a += R"({"id": )" + std::to_string(i) + R"(, "text": ")" + escaped + "\"}\n";
    if (i % 3 == 1) b += text + "\n";
    if (i % 3 == 2) cz += R"({"text": ")" + escaped + "\"}\n";
  }
  // Input order is a, then b, then c: put the texts in that order.
  std::vector<std::string> ordered;
  for (int part = 0; part < 3; ++part)
    for (uint64_t i = 0; i < n; ++i)
      if (static_cast<int>(i % 3) == part) ordered.push_back(c.texts[i]);
  c.texts = ordered;
  write_bytes(c.dir / "a.jsonl", a);
  write_bytes(c.dir / "b.txt.gz", loom::test::gzip_bytes(b));
  write_bytes(c.dir / "c.jsonl.zst", loom::test::zstd_bytes(cz));
  return c;
}

loom::PrepareOptions options_for(const Corpus& c, const fs::path& out, size_t threads = 2) {
  loom::PrepareOptions o;
  o.inputs = {(c.dir / "a.jsonl").string(), (c.dir / "b.txt.gz").string(), (c.dir / "c.jsonl.zst").string()};
  o.tokenizer.model = loom::test::tiny_tokenizer().string();
  o.out = out;
  o.stream.threads = threads;
  o.stream.encode.valid_fraction = 0.2;
  return o;
}

// Every document of a split, read back through the shards and their indexes.
std::vector<std::vector<int32_t>> read_split(const fs::path& dir, int split) {
  const auto manifest = loom::read_prepared_manifest(dir);
  std::vector<std::vector<int32_t>> docs;
  for (const auto& shard : manifest.splits[static_cast<size_t>(split)].shards) {
    const loom::TokenFile tokens(dir / shard.tokens_file);
    const loom::DocumentIndex index(dir / shard.index_file, tokens);
    REQUIRE(index.documents() == shard.documents);
    for (int64_t d = 0; d < index.documents(); ++d) {
      std::vector<int32_t> doc;
      for (int64_t t = index.offset(d); t < index.offset(d) + index.length(d); ++t)
        doc.push_back(static_cast<int32_t>(tokens.at(t)));
      docs.push_back(doc);
    }
  }
  return docs;
}

std::map<std::string, std::string> directory_bytes(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::directory_iterator(dir)) files[e.path().filename().string()] = loom::read_file(e.path());
  return files;
}

// Whatever a failed prepare left in dir: only the inputs it was given, never a shard, index or manifest.
std::vector<std::string> prepared_leftovers(const fs::path& dir) {
  std::vector<std::string> left;
  if (!fs::exists(dir)) return left;
  for (const auto& e : fs::directory_iterator(dir)) left.push_back(e.path().filename().string());
  return left;
}

// A file-size limit on this process while it lives (SIGXFSZ ignored: a write past it fails with EFBIG).
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved_) == 0);
    handler_ = ::signal(SIGXFSZ, SIG_IGN);
    rlimit small = saved_;
    small.rlim_cur = bytes;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    ::signal(SIGXFSZ, handler_);
  }

 private:
  rlimit saved_{};
  sighandler_t handler_ = SIG_DFL;
};

std::string prepare_error(const loom::PrepareOptions& o) {
  try {
    loom::prepare(o);
  } catch (const loom::Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("prepare: documents are the tokenizer's ids + EOS, in input order, split by text hash", "[prepare]") {
  const Corpus corpus = mixed_corpus("prepare-basic", 3000);
  const auto out = corpus.dir / "out";
  auto options = options_for(corpus, out);
  options.stream.shard_tokens = 5000;  // several shards per split
  const auto result = loom::prepare(options);
  CHECK_FALSE(result.up_to_date);

  const auto tokenizer = loom::open_prepare_tokenizer(tokenizer_file(loom::test::tiny_tokenizer()));
  std::array<std::vector<std::vector<int32_t>>, 2> expected;
  for (const auto& text : corpus.texts) {
    auto ids = tokenizer->encode(text);
    ids.push_back(*tokenizer->eos_id());
    expected[static_cast<size_t>(loom::document_split(text, 0.2))].push_back(ids);
  }
  const auto& m = result.manifest;
  for (int s : {loom::kTrainSplit, loom::kValidSplit}) {
    INFO(loom::split_name(s));
    const auto docs = read_split(out, s);
    CHECK(docs == expected[static_cast<size_t>(s)]);
    int64_t tokens = 0;
    for (const auto& d : docs) tokens += static_cast<int64_t>(d.size());
    const auto& split = m.splits[static_cast<size_t>(s)];
    CHECK(split.documents == static_cast<int64_t>(docs.size()));
    CHECK(split.tokens == tokens);
    CHECK(split.shards.size() >= 2);
    for (const auto& shard : split.shards) CHECK(shard.tokens <= 5000);  // documents are far shorter than a shard
  }
  // 3000 documents, a fifth of them in valid (binomial: sd 22).
  CHECK(std::abs(m.splits[1].documents - 600) < 5 * 22);
  CHECK(m.splits[0].documents + m.splits[1].documents == 3000);
  REQUIRE(m.inputs.size() == 3);
  CHECK(m.inputs[1].compression == "gzip");
  CHECK(m.inputs[2].crc32 == loom::crc32_file(corpus.dir / "c.jsonl.zst"));
  CHECK(m.tokenizer.checksum == tokenizer->checksum());
  CHECK(m.tokenizer.vocab_size == 300);
  CHECK(m.skipped.at("empty") == 0);
  CHECK(loom::read_prepared_manifest(out).splits[0].tokens == m.splits[0].tokens);
}

TEST_CASE("prepare: the output is the same byte for byte with 1, 2 or 3 threads", "[prepare]") {
  const Corpus corpus = mixed_corpus("prepare-threads", 40000);  // ~2.5 MB of text: several batches
  std::map<std::string, std::string> first;
  for (size_t threads : {1, 2, 3}) {
    const auto out = corpus.dir / ("out" + std::to_string(threads));
    loom::prepare(options_for(corpus, out, threads));
    const auto files = directory_bytes(out);
    CHECK(files.count("train-00000.bin") == 1);
    CHECK(files.count("valid-00000.idx") == 1);
    if (threads == 1) {
      first = files;
    } else {
      CHECK(files == first);
    }
  }
}

TEST_CASE("prepare: a re-run on unchanged inputs does nothing, and a changed input or option redoes it", "[prepare]") {
  const Corpus corpus = mixed_corpus("prepare-rerun", 600);
  const auto out = corpus.dir / "out";
  auto options = options_for(corpus, out);
  options.stream.shard_tokens = 1000;
  const auto first = loom::prepare(options);
  const auto before = directory_bytes(out);
  const auto again = loom::prepare(options);
  CHECK(again.up_to_date);
  CHECK(directory_bytes(out) == before);
  options.stream.threads = 1;  // the thread count changes nothing written
  CHECK(loom::prepare(options).up_to_date);

  // The same size, one byte different: the checksum catches it.
  std::string a = loom::read_file(corpus.dir / "a.jsonl");
  a[a.find("in")] = 'I';
  write_bytes(corpus.dir / "a.jsonl", a);
  CHECK_FALSE(loom::prepare(options).up_to_date);
  CHECK(loom::prepare(options).up_to_date);
  // Larger shards: fewer of them, and no shard of the older run is left behind.
  options.stream.shard_tokens = 1 << 20;
  CHECK_FALSE(loom::prepare(options).up_to_date);
  std::vector<std::string> names;
  for (const auto& [name, bytes] : directory_bytes(out)) names.push_back(name);
  CHECK(names == std::vector<std::string>{"manifest.json", "train-00000.bin", "train-00000.idx", "valid-00000.bin",
                                          "valid-00000.idx"});
  // A shard removed by hand: not up to date any more.
  fs::remove(out / "valid-00000.idx");
  CHECK_FALSE(loom::prepare(options).up_to_date);
}

TEST_CASE("prepare: bad input fails naming file:line, or is skipped and counted with --on-error skip", "[prepare]") {
  const auto dir = loom::test::scratch_dir("prepare-bad");
  write_bytes(dir / "a.jsonl",
                 "{\"text\": \"good one\"}\n"            // 1
                 "\n"                                      // 2: empty
                 "{\"text\": \"broken\", \"x\": [1, }\n"  // 3: malformed
                 "{\"body\": \"no text key\"}\n"          // 4: missing field
                 "{\"text\": 42}\n"                        // 5: not a string
                 "{\"text\": \"bad \xff utf-8\"}\n"        // 6: invalid UTF-8
                 "{\"text\": \"   \"}\n"                   // 7: empty text
                 "{\"text\": \"good two\"}\n");            // 8
  write_bytes(dir / "b.txt", "fine line\n\xc3\x28 broken\n" + std::string(3 << 20, 'x') + "\nlast\n");
  loom::PrepareOptions o;
  o.inputs = {(dir / "a.jsonl").string(), (dir / "b.txt").string()};
  o.tokenizer.model = loom::test::tiny_tokenizer().string();
  o.out = dir / "out";
  o.stream.max_document_bytes = 1 << 20;
  const std::string error = prepare_error(o);
  CHECK_THAT(error, Catch::Contains((dir / "a.jsonl").string() + ":3: malformed JSON") &&
                        Catch::Contains("--on-error skip"));
  CHECK(prepared_leftovers(o.out).empty());
  // Each kind of problem, alone, names its line.
  auto first_error = [&](const std::string& jsonl) {
    write_bytes(dir / "one.jsonl", jsonl);
    o.inputs = {(dir / "one.jsonl").string()};
    return prepare_error(o);
  };
  CHECK_THAT(first_error("{\"text\": \"a\"}\n{\"body\": 1}\n"),
             Catch::Contains("one.jsonl:2: no field 'text' (keys there: 'body')"));
  CHECK_THAT(first_error("{\"text\": [1]}\n"), Catch::Contains("one.jsonl:1: the field 'text' is an array, not a string"));
  CHECK_THAT(first_error("{\"text\": \"\xc0\xaf\"}\n"), Catch::Contains("one.jsonl:1: invalid UTF-8"));
  o.inputs = {(dir / "b.txt").string()};
  CHECK_THAT(prepare_error(o), Catch::Contains("b.txt:2: invalid UTF-8"));
  CHECK(prepared_leftovers(o.out).empty());

  o.inputs = {(dir / "a.jsonl").string(), (dir / "b.txt").string()};
  o.stream.encode.stop_at_problem = false;
  const auto result = loom::prepare(o);
  const std::map<std::string, int64_t> skipped = {{"empty", 2},        {"invalid_utf8", 2}, {"malformed_json", 1},
                                                  {"missing_field", 1}, {"not_a_string", 1}, {"too_long", 1}};
  CHECK(result.manifest.skipped == skipped);
  CHECK(result.manifest.splits[0].documents + result.manifest.splits[1].documents == 4);  // good one, good two, fine line, last
  CHECK(loom::read_prepared_manifest(o.out).skipped == skipped);
}

TEST_CASE("prepare: a full disk (file-size limit) is a clear error and leaves nothing half-written", "[prepare]") {
  const Corpus corpus = mixed_corpus("prepare-full", 20000);
  const auto out = corpus.dir / "out";
  const auto options = options_for(corpus, out);  // the tokenizer is made before the limit
  // RLIMIT_FSIZE makes a write past 64 KiB fail with EFBIG (SIGXFSZ ignored), as a full disk's ENOSPC would.
  // Writes to other files of this process fail alike meanwhile, so the limit is lifted before any check.
  std::string error;
  {
    const FileSizeLimit limit(64 << 10);
    error = prepare_error(options);
  }
  CHECK_THAT(error, Catch::Contains("cannot write " + (out / "train-00000.bin.tmp").string()) &&
                        Catch::Contains("file-size limit"));
  CHECK(prepared_leftovers(out).empty());
  // With room again the same run completes.
  CHECK_FALSE(loom::prepare(options).up_to_date);
}

TEST_CASE("prepare: --train-tokenizer trains a SentencePiece model into DIR first and tokenizes with it", "[prepare]") {
  const Corpus corpus = mixed_corpus("prepare-train-tokenizer", 2000);
  auto options = options_for(corpus, corpus.dir / "out");
  options.tokenizer.model.clear();
  options.train_tokenizer = true;
  options.tokenizer_training.vocab_size = 400;  // 256 byte pieces, the characters, merges
  const auto result = loom::prepare(options);
  const auto model = corpus.dir / "out" / "tokenizer.model";
  REQUIRE(fs::exists(model));
  const auto tokenizer = loom::open_prepare_tokenizer(tokenizer_file(model));
  CHECK(tokenizer->type() == loom::TokenizerType::kSentencePiece);
  CHECK(tokenizer->vocab_size() == 400);
  CHECK(result.manifest.tokenizer.trained);
  CHECK(result.manifest.tokenizer.path == "tokenizer.model");
  CHECK(result.manifest.tokenizer.checksum == tokenizer->checksum());
  // Every training document decodes back to its text (byte fallback: nothing is lost).
  const auto docs = read_split(corpus.dir / "out", loom::kTrainSplit);
  std::vector<std::string> train_texts;
  for (const auto& t : corpus.texts)
    if (loom::document_split(t, 0.2) == loom::kTrainSplit) train_texts.push_back(t);
  REQUIRE(docs.size() == train_texts.size());
  for (size_t i = 0; i < docs.size(); i += 97) CHECK(loom::decode_lines(*tokenizer, docs[i]) == train_texts[i] + "\n");
  CHECK(loom::prepare(options).up_to_date);  // the trained model's checksum is part of the check
  CHECK_THAT(prepare_error([&] {
               auto both = options;
               both.tokenizer.model = loom::test::tiny_tokenizer().string();
               return both;
             }()),
             Catch::Contains("either --tokenizer FILE or --train-tokenizer"));
}
