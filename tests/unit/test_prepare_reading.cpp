// `loom prepare`'s reading side: input lists from files, directories and globs; gzip and zstd streams
// (concatenated members and frames, truncation, corruption); documents cut from lines, blank-line
// paragraphs and whole files; a JSONL field by dotted path through simdjson; the split by text hash.
// The hidden [.bench] case times simdjson against nlohmann-json on a JSONL corpus.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "core/file_io.h"
#include "data/prepare/document_encoder.h"
#include "data/prepare/document_reader.h"
#include "data/prepare/input_stream.h"
#include "data/prepare/json_field.h"
#include "data/prepare/prepare_inputs.h"
#include "prepare_test_util.h"

namespace fs = std::filesystem;
using loom::test::write_bytes;
using loom::test::message_of;

namespace {

std::string read_all(const loom::InputFile& input) {
  auto stream = loom::InputStream::open(input);
  std::string out, piece(777, '\0');  // an odd buffer size: pieces end anywhere
  for (size_t n; (n = stream->read(piece.data(), piece.size())) > 0;) out.append(piece, 0, n);
  return out;
}

loom::InputFile file_of(const fs::path& path) { return loom::expand_inputs({path.string()}).at(0); }

std::vector<std::pair<int64_t, std::string>> documents(const fs::path& path, loom::DocumentSplit split, size_t max_bytes) {
  const auto input = file_of(path);
  auto stream = loom::InputStream::open(input);
  loom::DocumentReader reader(*stream, split, max_bytes);
  std::vector<std::pair<int64_t, std::string>> out;
  for (loom::RawDocument d; reader.next(d);) out.emplace_back(d.line, d.too_long ? "<too long>" : std::string(d.text));
  return out;
}

}  // namespace

TEST_CASE("prepare inputs: files, sorted directories and globs, with the format from the extension", "[prepare]") {
  const auto dir = loom::test::scratch_dir("prepare-inputs");
  fs::create_directories(dir / "b" / "deep");
  for (const auto* name : {"b/z.txt", "b/a.jsonl.gz", "b/deep/m.txt.zst", "b/notes.md", "c.jsonl", "d.txt"})
    write_bytes(dir / name, "x\n");
  const auto inputs = loom::expand_inputs({(dir / "d.txt").string(), (dir / "b").string(), (dir / "*.jsonl").string()});
  std::vector<std::string> names;
  for (const auto& i : inputs) names.push_back(fs::relative(i.path, dir).string());
  CHECK(names == std::vector<std::string>{"d.txt", "b/a.jsonl.gz", "b/deep/m.txt.zst", "b/z.txt", "c.jsonl"});
  CHECK(inputs[1].format == loom::InputFormat::kJsonl);
  CHECK(inputs[1].compression == loom::Compression::kGzip);
  CHECK(inputs[2].format == loom::InputFormat::kText);
  CHECK(inputs[2].compression == loom::Compression::kZstd);
  CHECK(inputs[0].bytes == 2);

  CHECK_THAT(message_of([&] { loom::expand_inputs({(dir / "b/notes.md").string()}); }),
             Catch::Contains("notes.md is not a corpus file") && Catch::Contains(".jsonl.zst"));
  CHECK_THAT(message_of([&] { loom::expand_inputs({(dir / "none.txt").string()}); }),
             Catch::Contains("none.txt: no such file or directory"));
  CHECK_THAT(message_of([&] { loom::expand_inputs({(dir / "*.zip").string()}); }), Catch::Contains("no file matches"));
  CHECK_THAT(message_of([&] { loom::expand_inputs({(dir / "b").string(), (dir / "b/z.txt").string()}); }),
             Catch::Contains("z.txt is already an input"));
  fs::create_directories(dir / "empty");
  CHECK_THAT(message_of([&] { loom::expand_inputs({(dir / "empty").string()}); }),
             Catch::Contains("holds no corpus file"));
}

TEST_CASE("prepare inputs: gzip and zstd streams decompress whole, concatenated too, and damage is refused",
          "[prepare]") {
  const auto dir = loom::test::scratch_dir("prepare-streams");
  std::string text;
  for (uint64_t i = 0; i < 20000; ++i) text += loom::test::sentence(i) + "\n";  // ~1.4 MB: many read pieces
  const std::string half = text.substr(0, text.size() / 2), rest = text.substr(text.size() / 2);
  write_bytes(dir / "a.txt", text);
  write_bytes(dir / "a.txt.gz", loom::test::gzip_bytes(text));
  write_bytes(dir / "two.txt.gz", loom::test::gzip_bytes(half) + loom::test::gzip_bytes(rest));
  write_bytes(dir / "a.txt.zst", loom::test::zstd_bytes(text));
  write_bytes(dir / "two.txt.zst", loom::test::zstd_bytes(half) + loom::test::zstd_bytes(rest));
  for (const auto* name : {"a.txt", "a.txt.gz", "two.txt.gz", "a.txt.zst", "two.txt.zst"}) {
    INFO(name);
    const auto input = file_of(dir / name);
    CHECK(read_all(input) == text);
    // The file's own bytes are counted and checksummed as they are read.
    auto stream = loom::InputStream::open(input);
    std::string piece(1 << 16, '\0');
    while (stream->read(piece.data(), piece.size()) > 0) {
    }
    CHECK(stream->file_bytes_read() == input.bytes);
    CHECK(stream->file_crc() == loom::crc32_file(input.path));
  }
  for (const auto* ext : {"gz", "zst"}) {
    const std::string good = ext == std::string("gz") ? loom::test::gzip_bytes(text) : loom::test::zstd_bytes(text);
    const auto truncated = dir / (std::string("cut.txt.") + ext), corrupt = dir / (std::string("bad.txt.") + ext);
    write_bytes(truncated, good.substr(0, good.size() / 2));
    std::string damaged = good;
    for (size_t i = 20; i < 60; ++i) damaged[i] = static_cast<char>(damaged[i] ^ 0x5A);
    write_bytes(corrupt, damaged);
    const std::string kind = ext == std::string("gz") ? "gzip" : "zstd";
    CHECK_THAT(message_of([&] { read_all(file_of(truncated)); }),
               Catch::Contains(truncated.string()) && Catch::Contains("truncated " + kind));
    CHECK_THAT(message_of([&] { read_all(file_of(corrupt)); }),
               Catch::Contains(corrupt.string()) && Catch::Contains("corrupt " + kind));
  }
  write_bytes(dir / "unreadable.txt", "x\n");
  fs::permissions(dir / "unreadable.txt", fs::perms::none);
  if (::geteuid() != 0)  // root reads anything
    CHECK_THAT(message_of([&] { read_all(file_of(dir / "unreadable.txt")); }), Catch::Contains("cannot open"));
}

TEST_CASE("prepare documents: lines, blank-line paragraphs, whole files, and over-long ones are flagged", "[prepare]") {
  const auto dir = loom::test::scratch_dir("prepare-documents");
  write_bytes(dir / "a.txt", "one\r\ntwo\n\n  \nthree\nfour\n\n\nfive");
  using Docs = std::vector<std::pair<int64_t, std::string>>;
  CHECK(documents(dir / "a.txt", loom::DocumentSplit::kLines, 100) ==
        Docs{{1, "one"}, {2, "two"}, {3, ""}, {4, "  "}, {5, "three"}, {6, "four"}, {7, ""}, {8, ""}, {9, "five"}});
  CHECK(documents(dir / "a.txt", loom::DocumentSplit::kBlankLines, 100) ==
        Docs{{1, "one\ntwo"}, {5, "three\nfour"}, {9, "five"}});
  CHECK(documents(dir / "a.txt", loom::DocumentSplit::kWholeFile, 100) == Docs{{1, "one\ntwo\n\n  \nthree\nfour\n\n\nfive"}});
  // A line longer than the limit, one far longer than a read buffer, a paragraph made too long by its
  // second line: flagged, and reading goes on after each.
  const std::string big(3 << 20, 'x');
  write_bytes(dir / "b.txt", "short\n" + std::string(200, 'y') + "\nok\n" + big + "\nend\n");
  CHECK(documents(dir / "b.txt", loom::DocumentSplit::kLines, 100) ==
        Docs{{1, "short"}, {2, "<too long>"}, {3, "ok"}, {4, "<too long>"}, {5, "end"}});
  write_bytes(dir / "c.txt", "aaaa\nbbbb\n\ncc\n");
  CHECK(documents(dir / "c.txt", loom::DocumentSplit::kBlankLines, 6) == Docs{{1, "<too long>"}, {4, "cc"}});
  CHECK(documents(dir / "c.txt", loom::DocumentSplit::kBlankLines, 9) == Docs{{1, "aaaa\nbbbb"}, {4, "cc"}});
}

TEST_CASE("prepare JSONL: a field by dotted path, and malformed lines, missing fields, non-strings, bad UTF-8 are told apart",
          "[prepare]") {
  loom::JsonFieldReader text("text"), nested("meta.body");
  // (status, text or detail); the status as its name, so that Catch prints what differs.
  auto read = [](loom::JsonFieldReader& reader, std::string line) {
    line.append(loom::JsonFieldReader::kJsonPadding, ' ');
    const auto result = reader.read(std::string_view(line.data(), line.size() - loom::JsonFieldReader::kJsonPadding));
    static const char* names[] = {"ok", "malformed", "invalid_utf8", "missing", "not_string"};
    return std::make_pair(std::string(names[static_cast<int>(result.status)]),
                          result.status == loom::FieldStatus::kOk ? std::string(result.text) : result.detail);
  };
  CHECK(read(text, R"({"id": 1, "text": "caf\u00e9 \"x\"\n\tz"})") == std::make_pair(std::string("ok"), std::string("café \"x\"\n\tz")));
  CHECK(read(nested, R"({"meta": {"body": "deep", "x": [1, 2]}, "text": "top"})") ==
        std::make_pair(std::string("ok"), std::string("deep")));
  CHECK(read(text, R"({"text": ""})") == std::make_pair(std::string("ok"), std::string()));
  // The error after the field still makes the line malformed: the record is parsed whole.
  CHECK(read(text, R"({"text": "fine", "rest": [1, }})").first == "malformed");
  CHECK(read(text, R"({"text": "unterminated})").first == "malformed");
  CHECK(read(text, "not json").first == "malformed");
  CHECK(read(text, "{\"text\": \"bad \xff\xfe utf-8\"}").first == "invalid_utf8");
  CHECK(read(text, R"({"body": "x", "id": 3})") == std::make_pair(std::string("missing"), std::string("no field 'text' (keys there: 'body', 'id')")));
  CHECK(read(nested, R"({"meta": "flat"})") ==
        std::make_pair(std::string("missing"), std::string("'meta' is a string, not an object with the field 'meta.body'")));
  CHECK(read(text, R"([1, 2])").first == "missing");
  CHECK(read(text, R"({"text": 12})") == std::make_pair(std::string("not_string"), std::string("the field 'text' is a number, not a string")));
  CHECK(read(text, R"({"text": null})").second == "the field 'text' is null, not a string");
  CHECK_THROWS_WITH(loom::JsonFieldReader("meta..body"), Catch::Contains("an empty key"));
}

TEST_CASE("prepare split: by a hash of the text alone, at the asked fraction", "[prepare]") {
  int64_t valid = 0;
  const int64_t n = 20000;
  for (int64_t i = 0; i < n; ++i) {
    const std::string text = loom::test::sentence(static_cast<uint64_t>(i)) + " #" + std::to_string(i);
    const int split = loom::document_split(text, 0.1);
    CHECK(split == loom::document_split(std::string(text), 0.1));  // the text decides, nothing else
    valid += split == loom::kValidSplit;
    // A larger fraction only adds documents to valid: a document never moves from valid to train.
    if (split == loom::kValidSplit) CHECK(loom::document_split(text, 0.2) == loom::kValidSplit);
  }
  // Binomial(20000, 0.1): standard deviation 42; 5 sigma either way.
  CHECK(std::abs(valid - n / 10) < 5 * 43);
  CHECK(loom::document_split("anything", 0.0) == loom::kTrainSplit);
}

// Why simdjson: the field of every record of a JSONL corpus through JsonFieldReader (simdjson's DOM parser,
// the record parsed whole) against nlohmann::json::parse + at(field), on ~64 MB of records shaped like a
// Hugging Face dataset's ({"id", "text", "meta": {...}}). Both must find the same texts.
TEST_CASE("prepare JSONL: simdjson against nlohmann-json on one corpus", "[.bench]") {
  std::string corpus;
  std::vector<size_t> starts;
  for (uint64_t i = 0; corpus.size() < (64u << 20); ++i) {
    std::string text;
    for (uint64_t s = 0; s < 8; ++s) text += loom::test::sentence(i * 8 + s) + (s % 3 == 2 ? "\\n" : " ");
    starts.push_back(corpus.size());
    corpus += R"({"id": )" + std::to_string(i) + R"(, "text": ")" + text +
              R"(", "meta": {"source": "bench", "score": 0.75, "tags": ["a", "b"]}})" + "\n";
  }
  starts.push_back(corpus.size());
  corpus.append(loom::JsonFieldReader::kJsonPadding, ' ');
  auto line = [&](size_t k) { return std::string_view(corpus.data() + starts[k], starts[k + 1] - starts[k] - 1); };
  const size_t records = starts.size() - 1;
  const double mb = static_cast<double>(starts.back()) / 1e6;

  for (int round = 0; round < 3; ++round) {
    loom::JsonFieldReader reader("text");
    uint64_t simd_bytes = 0, nlohmann_bytes = 0;
    auto t0 = std::chrono::steady_clock::now();
    for (size_t k = 0; k < records; ++k) simd_bytes += reader.read(line(k)).text.size();
    auto t1 = std::chrono::steady_clock::now();
    for (size_t k = 0; k < records; ++k)
      nlohmann_bytes += nlohmann::json::parse(line(k)).at("text").get_ref<const std::string&>().size();
    auto t2 = std::chrono::steady_clock::now();
    CHECK(simd_bytes == nlohmann_bytes);
    const double simd_s = std::chrono::duration<double>(t1 - t0).count();
    const double nlohmann_s = std::chrono::duration<double>(t2 - t1).count();
    WARN("round " << round << ": " << records << " records, " << mb << " MB: simdjson " << mb / simd_s
                  << " MB/s, nlohmann-json " << mb / nlohmann_s << " MB/s (" << nlohmann_s / simd_s << "x)");
  }
}
