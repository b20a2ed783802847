// IncrementalDecoder (data/tokenizers/incremental_decoder.h): what `loom generate` prints token by token adds up to
// decode_lines of the whole sequence (EOS as a line break), for real encodings (each piece whole UTF-8,
// none held back longer than a character needs) and for random ids, over a SentencePiece BPE with byte
// fallback and over a byte-level BPE tokenizer.json (cut-off characters, lone continuation bytes,
// end-of-sequence tokens, ids past the tokenizer's vocabulary as a model's padded rows sample them).
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "data/tokenizers/byte_level.h"
#include "data/tokenizers/incremental_decoder.h"
#include "data/tokenizers/tokenizer.h"
#include "test_util.h"

namespace {

const std::vector<std::string> kWords = {"and", "the", "earth", "was", "without", "form", "café", "naïve",
                                         "日本", "語", "🙂", "👍🏽", "über", "Ωmega", "void", "light"};

// A small SentencePiece BPE with byte fallback over text with accents, CJK and emoji (rare enough that some
// of them are left to byte tokens), trained once per test binary.
const loom::Tokenizer& sentencepiece() {
  static const std::unique_ptr<loom::Tokenizer> trained = [] {
    const auto dir = loom::test::scratch_dir("incremental-decoder");
    std::ofstream corpus(dir / "corpus.txt");
    const auto& words = kWords;
    std::mt19937 random(11);
    for (int line = 0; line < 400; ++line) {
      for (int w = 0; w < 12; ++w) corpus << words[random() % words.size()] << (w == 11 ? "\n" : " ");
    }
    corpus.close();
    const std::string command = "spm_train --input=" + (dir / "corpus.txt").string() + " --model_prefix=" +
                                (dir / "spm").string() +
                                " --model_type=bpe --vocab_size=320 --byte_fallback=true --character_coverage=0.98 "
                                "--minloglevel=2 > /dev/null 2>&1";
    REQUIRE(std::system(command.c_str()) == 0);
    loom::TokenizerConfig config;
    config.model = (dir / "spm.model").string();
    return loom::load_tokenizer(config);
  }();
  return *trained;
}

// A byte-level BPE tokenizer.json (GPT-2 style): the 256 byte tokens, then each word and " word" merged byte
// by byte from the left, so its multi-byte characters pass through tokens that end inside a character.
const loom::Tokenizer& byte_level_tokenizer() {
  static const std::unique_ptr<loom::Tokenizer> made = [] {
    const auto dir = loom::test::scratch_dir("incremental-decoder-byte-level");
    nlohmann::json vocab = nlohmann::json::object(), merges = nlohmann::json::array();
    for (int b = 0; b < 256; ++b) vocab[loom::byte_level::from_bytes(std::string(1, static_cast<char>(b)))] = b;
    std::set<std::string> merged;
    for (const auto& word : kWords)
      for (const std::string& bytes : {word, " " + word})
        for (size_t n = 2; n <= bytes.size(); ++n) {
          const std::string left = loom::byte_level::from_bytes(bytes.substr(0, n - 1));
          const std::string right = loom::byte_level::from_bytes(bytes.substr(n - 1, 1));
          if (!merged.insert(left + right).second) continue;
          vocab[left + right] = vocab.size();
          merges.push_back(left + " " + right);
        }
    const nlohmann::json spec = {
        {"added_tokens", {{{"id", vocab.size()}, {"content", "<|endoftext|>"}, {"special", true}}}},
        {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
        {"decoder", {{"type", "ByteLevel"}}},
        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
    std::ofstream(dir / "tokenizer.json") << spec.dump();
    loom::TokenizerConfig config;
    config.model = (dir / "tokenizer.json").string();
    return loom::load_tokenizer(config);
  }();
  return *made;
}

bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) return false;
    i += n;
  }
  return true;
}

}  // namespace

TEST_CASE("incremental decoder: a real encoding streams whole characters that add up to the decode", "[data]") {
  const bool spm = GENERATE(true, false);
  INFO((spm ? "sentencepiece" : "byte-level BPE"));
  const auto& tok = spm ? sentencepiece() : byte_level_tokenizer();
  const std::string text = "the earth was 日本語 café 🙂👍🏽 and über light";
  const auto context = tok.encode("and the");
  const auto ids = tok.encode(text);
  REQUIRE(ids.size() > 10);
  loom::IncrementalDecoder decoder(tok, context);
  std::string streamed;
  int64_t nonempty = 0;
  for (int32_t id : ids) {
    const std::string piece = decoder.add(id);
    CHECK(valid_utf8(piece));
    nonempty += !piece.empty();
    streamed += piece;
  }
  streamed += decoder.finish();
  std::vector<int32_t> all = context;
  all.insert(all.end(), ids.begin(), ids.end());
  CHECK(loom::decode_lines(tok, context) + streamed == loom::decode_lines(tok, all));
  CHECK(nonempty > static_cast<int64_t>(ids.size()) / 2);  // streamed as it came, not all at the end
}

TEST_CASE("incremental decoder: random ids add up to the decode of the whole sequence", "[data]") {
  const bool spm = GENERATE(true, false);
  INFO((spm ? "sentencepiece" : "byte-level BPE"));
  const auto& tok = spm ? sentencepiece() : byte_level_tokenizer();
  std::mt19937 random(5);
  const int64_t vocab = tok.vocab_size() + 8;  // 8 padded rows: ids the tokenizer does not have
  for (int sample = 0; sample < 2000; ++sample) {
    const auto context = tok.encode(sample % 2 ? "the earth" : "");
    std::vector<int32_t> ids(1 + random() % 60);
    for (auto& id : ids) id = static_cast<int32_t>(random() % vocab);
    loom::IncrementalDecoder decoder(tok, context);
    std::string streamed = loom::decode_lines(tok, context);
    for (int32_t id : ids) streamed += decoder.add(id);
    streamed += decoder.finish();
    std::vector<int32_t> all = context;
    all.insert(all.end(), ids.begin(), ids.end());
    INFO("sample " << sample << ", " << ids.size() << " ids");
    REQUIRE(streamed == loom::decode_lines(tok, all));
  }
}
