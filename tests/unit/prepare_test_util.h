// Helpers of the `loom prepare` tests: deterministic pseudo-English text, files written plain, gzip or
// zstd compressed, and a small SentencePiece model trained once per test process on that text (by
// loom's own --train-tokenizer path).
#pragma once
#include <zlib.h>
#include <zstd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "data/prepare/tokenizer_training.h"
#include "fuzz_util.h"
#include "test_util.h"

namespace loom::test {

// Sentence i of a fixed pseudo-random text: 3 to 14 words of a small vocabulary.
inline std::string sentence(uint64_t i) {
  static const std::vector<std::string> words = {
      "in",    "the",  "beginning", "god",    "created", "heaven", "and",   "earth",  "was",   "without",
      "form",  "void", "darkness",  "upon",   "face",    "of",     "deep",  "spirit", "moved", "waters",
      "said",  "let",  "there",     "be",     "light",   "saw",    "that",  "it",     "good",  "divided",
      "from",  "day",  "night",     "called", "evening", "morning", "first", "second", "fruit", "tree"};
  uint64_t x = i * 0x9E3779B97F4A7C15ull + 12345;
  auto next = [&x] {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    return x;
  };
  std::string s;
  const uint64_t n = 3 + next() % 12;
  for (uint64_t w = 0; w < n; ++w) s += (w ? " " : "") + words[next() % words.size()];
  return s + ".";
}

inline std::string gzip_bytes(const std::string& text) {
  z_stream z{};
  deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);  // + 16: a gzip header
  std::string out(deflateBound(&z, text.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

inline std::string zstd_bytes(const std::string& text) {
  std::string out(ZSTD_compressBound(text.size()), '\0');
  out.resize(ZSTD_compress(out.data(), out.size(), text.data(), text.size(), 3));
  return out;
}

// A 300-piece SentencePiece BPE model, trained once per process.
inline std::filesystem::path tiny_tokenizer() {
  static const std::filesystem::path model = [] {
    const auto dir = scratch_dir("prepare-tokenizer");
    std::string text;
    for (uint64_t i = 0; i < 3000; ++i) text += sentence(i) + "\n";
    write_bytes(dir / "corpus.txt", text);
    const std::vector<InputFile> inputs = {{dir / "corpus.txt", InputFormat::kText, Compression::kNone, text.size()}};
    TokenizerTrainingOptions options;
    options.vocab_size = 300;
    train_sentencepiece(inputs, options, dir / "tokenizer.model");
    return dir / "tokenizer.model";
  }();
  return model;
}

}  // namespace loom::test
