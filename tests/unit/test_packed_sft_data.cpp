// The data side of packed documents and SFT: a corpus's windows give each token's position in its document
// (from a prepared directory's document index, or a token file's EOS ids); `loom prepare --sft` renders
// prompt/response and chat-template records into tokens with a loss mask per shard (checked header, damage
// refused naming the file); the sampler turns masked-out targets into kIgnoreTarget and counts the rest.
#include "core/error.h"
#include "core/file_io.h"
#include "data/corpus/lm_sampler.h"
#include "data/corpus/loss_mask.h"
#include "data/prepare/prepare.h"
#include "data/prepare/sft_record.h"
#include "data/prepare/shard_writer.h"
#include "data/corpus/token_corpus.h"
#include "prepare_test_util.h"

namespace fs = std::filesystem;
using loom::test::write_bytes;

namespace {

// A prepared directory of one train shard holding documents of these lengths (token t of the shard is
// t % 1000), with loss masks when `masks` (a document's second half counts).
fs::path packed_dir(const std::string& name, const std::vector<int64_t>& lengths, bool masks) {
  const auto dir = loom::test::scratch_dir(name);
  loom::ShardWriter writer(dir, "train", 1000, 77, 1 << 20, masks);
  int32_t next = 0;
  for (int64_t n : lengths) {
    std::vector<int32_t> doc;
    std::vector<uint8_t> mask;
    for (int64_t i = 0; i < n; ++i) {
      doc.push_back(next++ % 1000);
      mask.push_back(i >= n / 2 ? 1 : 0);
    }
    writer.add_document(doc.data(), doc.size(), masks ? mask.data() : nullptr);
  }
  loom::PreparedManifest m;
  m.tokenizer = {"tok.model", 77, 1000, 999, false};
  m.options = nlohmann::json::object();
  m.splits[0].shards = writer.finish();
  for (const auto& s : m.splits[0].shards) m.splits[0].tokens += s.tokens;
  loom::write_prepared_manifest(dir, m);
  return dir;
}

// Positions of tokens [start, start + n) of a stream of documents of these lengths.
std::vector<int64_t> expected_positions(const std::vector<int64_t>& lengths, int64_t start, int64_t n) {
  std::vector<int64_t> all;
  for (int64_t len : lengths)
    for (int64_t i = 0; i < len; ++i) all.push_back(i);
  std::vector<int64_t> out(all.begin() + start, all.begin() + start + n);
  // The document the window starts inside counts from the window's start.
  for (int64_t i = 0; i < n && (i == 0 || out[i] != 0); ++i) out[i] = i;
  return out;
}

std::vector<int64_t> as_vector(const torch::Tensor& t) {
  const auto c = t.contiguous().to(torch::kLong);
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

}  // namespace

TEST_CASE("packed windows: positions restart at each document of a prepared directory's index", "[data]") {
  const std::vector<int64_t> lengths = {5, 1, 12, 3, 9};
  const auto dir = packed_dir("packed-index", lengths, false);
  loom::TokenCorpus corpus(dir, "train");
  const int64_t T = 8;
  CHECK_FALSE(corpus.window(0, T).positions.defined());  // off until asked: no cost
  corpus.read_documents(std::nullopt);  // a directory needs no EOS: its index says where documents start
  for (int64_t w = 0; w < corpus.window_starts(T); ++w) {
    CAPTURE(w);
    const auto window = corpus.window(w, T);
    CHECK(as_vector(window.positions) == expected_positions(lengths, w, T + 1));
    CHECK_FALSE(window.loss_mask.defined());
  }
  CHECK(as_vector(corpus.eval_window(1, T).positions) == expected_positions(lengths, T, T + 1));

  const loom::LmSampler sampler(7, T);
  const auto batch = sampler.train_batch(corpus, 3, 0, 4);
  REQUIRE(batch.positions.sizes() == std::vector<int64_t>({4, T}));
  for (int64_t i = 0; i < 4; ++i) {
    auto expected = expected_positions(lengths, sampler.window_start(corpus, 3, i), T + 1);
    expected.pop_back();  // the inputs: the window's first T tokens
    CHECK(as_vector(batch.positions[i]) == expected);
  }
  CHECK(batch.loss_tokens() == 4 * T);  // no mask: every target counts
}

TEST_CASE("packed windows: a token file's documents end at the EOS id", "[data]") {
  const auto dir = loom::test::scratch_dir("packed-eos");
  // Documents 3, 4, 2 tokens, each ending with EOS 9.
  loom::write_token_file(dir / "t.bin", {1, 2, 9, 3, 4, 5, 9, 6, 9}, 10, 1);
  loom::TokenCorpus corpus(dir / "t.bin", "train");
  CHECK_THAT(loom::test::message_of([&] { corpus.read_documents(std::nullopt); }),
             Catch::Contains("set tokenizer.model"));
  corpus.read_documents(9);
  CHECK(as_vector(corpus.window(0, 8).positions) == std::vector<int64_t>({0, 1, 2, 0, 1, 2, 3, 0, 1}));
  CHECK(as_vector(corpus.window(1, 7).positions) == std::vector<int64_t>({0, 1, 0, 1, 2, 3, 0, 1}));
}

TEST_CASE("SFT data: a loss mask beside each shard makes its prompt targets ignored", "[data]") {
  const std::vector<int64_t> lengths = {6, 4, 10};
  const auto dir = packed_dir("sft-mask", lengths, true);
  const loom::TokenCorpus corpus(dir, "train");
  REQUIRE(corpus.has_loss_mask());
  CHECK(corpus.loss_tokens() == 3 + 2 + 5);
  const int64_t T = 9;
  const loom::LmSampler sampler(1, T);
  const auto batch = sampler.batch_of({corpus.window(0, T), corpus.window(5, T)});
  // Window 0: tokens 0..9; the counted ones are 3-5 (doc 0), 8-9 (doc 1). Target j is token j + 1.
  std::vector<int64_t> expected0 = {-100, -100, 3, 4, 5, -100, -100, 8, 9};
  CHECK(as_vector(batch.targets[0]) == expected0);
  // Window 5: tokens 5..14; counted: 5, 8, 9, 15-19 -> targets of tokens 6..14.
  std::vector<int64_t> expected1 = {-100, -100, 8, 9, -100, -100, -100, -100, -100};
  CHECK(as_vector(batch.targets[1]) == expected1);
  CHECK(batch.loss_tokens() == 5 + 2);
  CHECK(batch.tokens() == 2 * T);
  CHECK(loom::kIgnoreTarget == -100);

  SECTION("a damaged mask is refused naming the file") {
    const auto mask_file = dir / loom::read_prepared_manifest(dir).splits[0].shards[0].mask_file;
    std::string bytes = loom::read_file(mask_file);
    bytes[sizeof(loom::LossMaskHeader) + 2] ^= 1;
    write_bytes(mask_file, bytes);
    CHECK_THAT(loom::test::message_of([&] { loom::TokenCorpus(dir, "train"); }),
               Catch::Contains(mask_file.string()) && Catch::Contains("checksum mismatch"));
    write_bytes(mask_file, bytes.substr(0, bytes.size() - 1));
    CHECK_THAT(loom::test::message_of([&] { loom::TokenCorpus(dir, "train"); }), Catch::Contains("truncated"));
    fs::remove(mask_file);
    CHECK_THAT(loom::test::message_of([&] { loom::TokenCorpus(dir, "train"); }), Catch::Contains("loss mask is missing"));
  }
}

TEST_CASE("SFT records: prompt/response and chat messages render to counted and context pieces", "[data][prepare]") {
  const auto dir = loom::test::scratch_dir("sft-records");
  write_bytes(dir / "chat.yaml",
              "roles:\n"
              "  system: {prefix: \"<s>\", suffix: \"\\n\"}\n"
              "  user: {prefix: \"<u>\", suffix: \"\\n\"}\n"
              "  assistant: {prefix: \"<a>\", suffix: \"</a>\"}\n");
  loom::SftOptions options;
  options.enabled = true;
  auto read = [&](const std::string& line) {
    loom::SftRecordReader reader(options);
    const std::string padded = line + std::string(loom::JsonFieldReader::kJsonPadding, ' ');
    return reader.read(std::string_view(padded.data(), line.size()));
  };
  auto rendered = [](const loom::SftRecord& r) {
    std::string out;
    for (const auto& p : r.pieces) out += (p.counted ? "[+" : "[-") + p.text + "]";
    return out;
  };
  SECTION("prompt and response, no template: the prompt is context, the response counts") {
    const auto r = read(R"({"prompt": "2+2=", "response": "4"})");
    REQUIRE(r.status == loom::FieldStatus::kOk);
    CHECK(rendered(r) == "[-2+2=][+4]");
    options.prompt_field = "q";
    CHECK_THAT(read(R"({"prompt": "a", "response": "b"})").detail, Catch::Contains("no field 'q'"));
  }
  SECTION("messages through the template: prefixes never count, the assistant's content and suffix do") {
    options.chat_template = loom::read_chat_template((dir / "chat.yaml").string());
    const auto r = read(R"({"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},)"
                        R"( {"role": "assistant", "content": "hello"}]})");
    REQUIRE(r.status == loom::FieldStatus::kOk);
    CHECK(rendered(r) == "[-<s>][-be brief][-\n][-<u>][-hi][-\n][-<a>][+hello][+</a>]");
    CHECK(rendered(read(R"({"prompt": "p", "response": "r"})")) == "[-<u>][-p][-\n][-<a>][+r][+</a>]");
    CHECK_THAT(read(R"({"messages": [{"role": "tool", "content": "x"}]})").detail,
               Catch::Contains("role 'tool' is not in the chat template (its roles: assistant, system, user)"));
    CHECK(read(R"({"messages": [{"role": "user", "content": 3}]})").status == loom::FieldStatus::kNotString);
  }
  SECTION("messages without a template, bad templates") {
    CHECK_THAT(read(R"({"messages": []})").detail, Catch::Contains("needs --chat-template FILE"));
    write_bytes(dir / "bad.yaml", "roles: {user: {prefix: a, colour: b}}\n");
    CHECK_THAT(loom::test::message_of([&] { loom::read_chat_template((dir / "bad.yaml").string()); }),
               Catch::Contains("bad.yaml") && Catch::Contains("unknown key 'colour'"));
    write_bytes(dir / "bad.yaml", "roles: {user: {prefix: a}}\n");  // the default trained role is missing
    CHECK_THAT(loom::test::message_of([&] { loom::read_chat_template((dir / "bad.yaml").string()); }),
               Catch::Contains("trained role 'assistant' is not one of the roles"));
  }
}

TEST_CASE("prepare --sft: tokens are the pieces' ids + EOS, the mask counts the response and the EOS", "[prepare]") {
  const auto dir = loom::test::scratch_dir("prepare-sft");
  std::string jsonl;
  std::vector<std::pair<std::string, std::string>> records;
  for (uint64_t i = 0; i < 40; ++i) {
    records.push_back({loom::test::sentence(i), loom::test::sentence(1000 + i)});
    jsonl += R"({"question": ")" + records.back().first + R"(", "answer": ")" + records.back().second + "\"}\n";
  }
  jsonl += R"({"question": "no answer here", "answer": ""})" "\n";  // nothing to learn: skipped as empty
  write_bytes(dir / "sft.jsonl", jsonl);
  loom::PrepareOptions o;
  o.inputs = {(dir / "sft.jsonl").string()};
  o.tokenizer.model = loom::test::tiny_tokenizer().string();
  o.out = dir / "out";
  o.stream.threads = 2;
  o.stream.encode.sft.enabled = true;
  o.stream.encode.sft.prompt_field = "question";
  o.stream.encode.sft.response_field = "answer";
  const auto result = loom::prepare(o);
  CHECK(result.manifest.skipped.at("empty") == 1);
  loom::TokenizerConfig tokenizer_config;
  tokenizer_config.model = loom::test::tiny_tokenizer().string();
  const auto tokenizer = loom::open_prepare_tokenizer(tokenizer_config);
  const loom::TokenCorpus corpus(o.out, "train");
  REQUIRE(corpus.has_loss_mask());
  const auto& shard = *corpus.shards().front();
  const auto& info = result.manifest.splits[0].shards.front();
  const loom::LossMask mask(o.out / info.mask_file, shard);
  CHECK(mask.counted() == info.loss_tokens);
  // Walk the shard: each record is encode(prompt) (mask 0) + encode(response) (mask 1) + EOS (mask 1).
  int64_t at = 0, counted = 0;
  for (const auto& [prompt, response] : records) {
    auto prompt_ids = tokenizer->encode(prompt), response_ids = tokenizer->encode(response);
    std::vector<int64_t> expected_tokens(prompt_ids.begin(), prompt_ids.end());
    expected_tokens.insert(expected_tokens.end(), response_ids.begin(), response_ids.end());
    expected_tokens.push_back(*tokenizer->eos_id());
    std::vector<int64_t> expected_mask(prompt_ids.size(), 0);
    expected_mask.resize(expected_tokens.size(), 1);
    const auto n = static_cast<int64_t>(expected_tokens.size());
    CHECK(as_vector(shard.slice(at, n)) == expected_tokens);
    CHECK(as_vector(mask.slice(at, n)) == expected_mask);
    at += n;
    counted += n - static_cast<int64_t>(prompt_ids.size());
  }
  CHECK(at == shard.size());
  CHECK(counted == mask.counted());
  CHECK(loom::prepare(o).up_to_date);  // unchanged: nothing to do
  o.stream.encode.sft.response_field = "question";
  CHECK_FALSE(loom::prepare(o).up_to_date);  // SFT options are output options
}
