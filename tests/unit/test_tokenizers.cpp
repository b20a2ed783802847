// The pieces of loom's BPE tokenizers against closed forms and hand-worked cases: UTF-8 repair (Python's
// "replace" rule), GPT-2's byte alphabet, the byte-pair merge (heap and scan paths against a brute force),
// added-token splitting (leftmost-longest, lstrip / rstrip / single_word), split behaviours, the NEL rewrite
// of \s, pattern names and presets, a hand-made tokenizer.json and .tiktoken file end to end, type detection,
// the tokenizer.special_tokens config key, and one tokenizer shared by threads. The whole tokenizers against
// Hugging Face and tiktoken are tests/e2e/test_tokenizers.sh.
#include <fstream>
#include <random>
#include <thread>

#include "core/config.h"
#include "core/error.h"
#include "data/tokenizers/added_tokens.h"
#include "data/tokenizers/bpe_merge.h"
#include "data/tokenizers/byte_level.h"
#include "data/tokenizers/hf_pre_tokenizer.h"
#include "data/tokenizers/split_regex.h"
#include "data/tokenizers/tiktoken_tokenizer.h"
#include "data/tokenizers/tokenizer.h"
#include "data/tokenizers/tokenizer_presets.h"
#include "data/tokenizers/utf8.h"
#include "test_util.h"

namespace {

std::string write(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
  return path.string();
}

std::vector<std::string> pieces(const loom::SplitRegex& regex, const std::string& text) {
  std::vector<std::string> out;
  regex.for_each_match(text, [&](size_t s, size_t e) { out.push_back(text.substr(s, e - s)); });
  return out;
}

// A hand-made tiktoken file: ranks of the 256 bytes, then "ab" (256), "abc" (257), " a" (258).
std::string tiny_ranks() {
  auto b64 = [](const std::string& s) {
    static const char* t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    for (size_t i = 0; i < s.size(); i += 3) {
      uint32_t v = static_cast<uint8_t>(s[i]) << 16;
      if (i + 1 < s.size()) v |= static_cast<uint8_t>(s[i + 1]) << 8;
      if (i + 2 < s.size()) v |= static_cast<uint8_t>(s[i + 2]);
      out += t[(v >> 18) & 63];
      out += t[(v >> 12) & 63];
      out += i + 1 < s.size() ? t[(v >> 6) & 63] : '=';
      out += i + 2 < s.size() ? t[v & 63] : '=';
    }
    return out;
  };
  std::string ranks;
  for (int b = 0; b < 256; ++b) ranks += b64(std::string(1, static_cast<char>(b))) + " " + std::to_string(b) + "\n";
  return ranks + b64("ab") + " 256\n" + b64("abc") + " 257\n" + b64(" a") + " 258\n";
}

// A hand-made tokenizer.json over bytes a, b, c, space (Ġ) with merges a b, ab c, "Ġ a", <|endoftext|> at
// id 7, added after each sequence by the post-processor.
nlohmann::json tiny_tokenizer_json() {
  nlohmann::json vocab = {{"a", 0}, {"b", 1}, {"c", 2}, {"\u0120", 3}, {"ab", 4}, {"abc", 5}, {"\u0120a", 6}};
  return {
      {"added_tokens", {{{"id", 7}, {"content", "<|endoftext|>"}, {"special", true}, {"normalized", false}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", {{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}, {{"SpecialToken", {{"id", "<|endoftext|>"}, {"type_id", 0}}}}}},
        {"special_tokens", {{"<|endoftext|>", {{"id", "<|endoftext|>"}, {"ids", {7}}, {"tokens", {"<|endoftext|>"}}}}}}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"a b", {"ab", "c"}, "\u0120 a"}}}}};
}

}  // namespace

TEST_CASE("tokenizers: invalid UTF-8 becomes U+FFFD per maximal ill-formed subpart", "[tokenizer]") {
  using loom::utf8::replace_invalid;
  const std::string r = "\xEF\xBF\xBD";
  CHECK(replace_invalid("abc \xC3\xA9") == "abc \xC3\xA9");
  CHECK(replace_invalid("a\x80z") == "a" + r + "z");
  CHECK(replace_invalid("\xC0\xAF") == r + r);                      // overlong lead bytes are single subparts
  CHECK(replace_invalid("\xE2\x82") == r);                          // a truncated sequence is one
  CHECK(replace_invalid("\xE2\x82x") == r + "x");
  CHECK(replace_invalid("\xED\xA0\x80") == r + r + r);              // a surrogate: ED then two strays
  CHECK(replace_invalid("\xF0\x9F\x98") == r);
  CHECK(replace_invalid("\xF4\x90\x80\x80") == r + r + r + r);      // above U+10FFFF
  CHECK(replace_invalid("\xFF\xFE") == r + r);
  CHECK(loom::utf8::is_valid("\xF4\x8F\xBF\xBF"));
  CHECK_FALSE(loom::utf8::is_valid("12345678\x80"));
}

TEST_CASE("tokenizers: GPT-2's byte alphabet maps all 256 bytes one to one", "[tokenizer]") {
  CHECK(loom::byte_level::char_of(' ') == U'\u0120');   // Ġ
  CHECK(loom::byte_level::char_of('\n') == U'\u010A');  // Ċ
  CHECK(loom::byte_level::char_of('A') == U'A');
  CHECK(loom::byte_level::char_of(0xAD) == U'\u0143');  // the last of the shifted ones
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  CHECK(loom::byte_level::to_bytes(loom::byte_level::from_bytes(all)) == all);
  CHECK(loom::byte_level::to_bytes("\xC4\xA0hello") == std::string(" hello"));
  CHECK_FALSE(loom::byte_level::to_bytes("\xE4\xB8\xAD").has_value());  // 中 is not in the alphabet
}

TEST_CASE("tokenizers: the byte-pair merge takes the lowest rank, leftmost first, on both paths", "[tokenizer]") {
  // Ranks over letters: rank(pair) = table lookup; merged id = 100 + rank.
  const std::map<std::string, int32_t> rank = {{"ab", 0}, {"bc", 1}, {"abc", 2}, {"aa", 3}, {"aaaa", 4}, {"ca", 5}};
  auto run = [&](const std::string& text) {
    std::vector<loom::BpeSymbol> symbols;
    for (uint32_t i = 0; i < text.size(); ++i) symbols.push_back({i, i + 1, text[i]});
    loom::bpe_merge(symbols, [&](const loom::BpeSymbol& a, const loom::BpeSymbol& b) {
      const auto it = rank.find(text.substr(a.start, b.end - a.start));
      return it == rank.end() ? loom::PairTable::Merge{} : loom::PairTable::Merge{it->second, 100 + it->second};
    });
    std::vector<std::string> out;
    for (const auto& s : symbols) out.push_back(text.substr(s.start, s.end - s.start));
    return out;
  };
  CHECK(run("abc") == std::vector<std::string>{"abc"});         // ab (0) first, then ab+c (2)
  CHECK(run("bcab") == std::vector<std::string>{"bc", "ab"});
  CHECK(run("aaa") == std::vector<std::string>{"aa", "a"});      // equal ranks: the leftmost
  CHECK(run("aaaa") == std::vector<std::string>{"aaaa"});
  // Long pieces take the heap path: random ones split exactly as a naive rescan of strings does.
  auto naive = [&](const std::string& text) {
    std::vector<std::string> parts;
    for (char c : text) parts.push_back(std::string(1, c));
    while (true) {
      size_t best = SIZE_MAX;
      int32_t best_rank = INT32_MAX;
      for (size_t i = 0; i + 1 < parts.size(); ++i) {
        const auto it = rank.find(parts[i] + parts[i + 1]);
        if (it != rank.end() && it->second < best_rank) best_rank = it->second, best = i;
      }
      if (best == SIZE_MAX) return parts;
      parts[best] += parts[best + 1];
      parts.erase(parts.begin() + static_cast<long>(best) + 1);
    }
  };
  uint64_t x = 12345;
  for (int trial = 0; trial < 20; ++trial) {
    std::string text;
    for (int i = 0; i < 300; ++i) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      text += "abc"[(x >> 33) % 3];
    }
    INFO(text);
    CHECK(run(text) == naive(text));
  }
}

TEST_CASE("tokenizers: added tokens match leftmost-longest with Hugging Face's flags", "[tokenizer]") {
  std::vector<loom::AddedToken> tokens = {{"<s>", 1, true}, {"<s>x", 2, true}, {"<mask>", 3, true}, {"ony", 4}};
  tokens[2].lstrip = true;
  tokens[2].rstrip = true;
  tokens[3].single_word = true;
  std::vector<std::string> patterns;
  for (const auto& t : tokens) patterns.push_back(t.content);
  const loom::AddedTokenMatcher matcher(tokens, patterns);
  auto split = [&](const std::string& text, bool skip_special) {
    std::vector<std::string> out;
    matcher.split(
        text, skip_special, [&](std::string_view s) { out.push_back("[" + std::string(s) + "]"); },
        [&](int32_t id) { out.push_back(std::to_string(id)); });
    return out;
  };
  CHECK(split("a<s>xb<s>", false) == std::vector<std::string>{"[a]", "2", "[b]", "1"});
  CHECK(split("Hi  <mask>\t there", false) == std::vector<std::string>{"[Hi]", "3", "[there]"});
  CHECK(split("Anthony ony tony", false) == std::vector<std::string>{"[Anthony ]", "4", "[ tony]"});
  CHECK(split("a<s>b", true) == std::vector<std::string>{"[a<s>b]"});  // special tokens as text
  CHECK(split("", false).empty());
}

TEST_CASE("tokenizers: split behaviours and ByteLevel's prefix space", "[tokenizer]") {
  const loom::SplitRegex digits("[0-9]+", loom::RegexDialect::kHuggingFace, "test");
  auto spans = [&](loom::SplitBehavior b, bool invert) {
    const std::string text = "ab12cd345";
    std::vector<loom::TextPiece> out;
    loom::split_spans(digits, b, invert, text, 0, static_cast<uint32_t>(text.size()), out);
    std::vector<std::string> words;
    for (const auto& p : out) words.push_back(text.substr(p.start, p.end - p.start));
    return words;
  };
  using B = loom::SplitBehavior;
  CHECK(spans(B::kIsolated, false) == std::vector<std::string>{"ab", "12", "cd", "345"});
  CHECK(spans(B::kRemoved, false) == std::vector<std::string>{"ab", "cd"});
  CHECK(spans(B::kMergedWithPrevious, false) == std::vector<std::string>{"ab12", "cd345"});
  CHECK(spans(B::kMergedWithNext, false) == std::vector<std::string>{"ab", "12cd", "345"});
  CHECK(spans(B::kRemoved, true) == std::vector<std::string>{"12", "345"});

  const loom::HfPreTokenizer byte_level(nlohmann::json{{"type", "ByteLevel"}, {"add_prefix_space", true}}, "test");
  std::vector<loom::TextPiece> out;
  byte_level.split("hello world", out);
  REQUIRE(out.size() == 2);
  CHECK((out[0].space_before && out[0].start == 0 && out[0].end == 5));  // " hello"
  CHECK((!out[1].space_before && out[1].start == 5 && out[1].end == 11));  // " world"
}

TEST_CASE("tokenizers: whitespace takes NEL and word characters take marks and joiners as Rust and Oniguruma do, "
          "and $ follows each dialect", "[tokenizer]") {
  CHECK(loom::with_reference_classes(R"(\s+(?!\S)|[^\s\p{L}])") == R"([\s\x{85}]+(?![^\s\x{85}])|[^\s\x{85}\p{L}])");
  CHECK(loom::with_reference_classes(R"([]\s]\\s)") == R"([]\s\x{85}]\\s)");
  // "a" + COMBINING DIAERESIS, ZERO WIDTH JOINER, "b", THAI CHARACTER SARA AM (Lo) + MAI EK (Mn): one word each side
  // of the space, which PCRE2's own \w would cut at the mark and the joiner.
  const loom::SplitRegex word(R"(\w+|[^\w\s]+)", loom::RegexDialect::kHuggingFace, "test");
  CHECK(pieces(word, "a\xCC\x88\xE2\x80\x8D" "b \xE0\xB8\xB3\xE0\xB9\x88!") ==
        std::vector<std::string>{"a\xCC\x88\xE2\x80\x8D" "b", "\xE0\xB8\xB3\xE0\xB9\x88", "!"});
  const loom::SplitRegex space(R"(\s+)", loom::RegexDialect::kTiktoken, "test");
  CHECK(pieces(space, "a\xC2\x85 b") == std::vector<std::string>{"\xC2\x85 "});
  const loom::SplitRegex end_tiktoken(R"(x$)", loom::RegexDialect::kTiktoken, "test");
  const loom::SplitRegex end_hf(R"(x$)", loom::RegexDialect::kHuggingFace, "test");
  CHECK(pieces(end_tiktoken, "x\nx").size() == 1);  // $: the end of the text only
  CHECK(pieces(end_hf, "x\nx").size() == 2);        // $: the end of each line
  CHECK_THROWS_WITH(loom::SplitRegex("(", loom::RegexDialect::kTiktoken, "here"),
                    Catch::Matchers::Contains("here: the split pattern does not compile"));
}

TEST_CASE("tokenizers: pattern names and special-token presets", "[tokenizer]") {
  CHECK(loom::pattern_names() == "gpt2, cl100k_base, o200k_base, llama3");
  const loom::SplitRegex gpt2(*loom::named_pattern("gpt2"), loom::RegexDialect::kTiktoken, "gpt2");
  CHECK(pieces(gpt2, "I'm here  123!!") == std::vector<std::string>{"I", "'m", " here", " ", " 123", "!!"});
  const loom::SplitRegex llama3(*loom::named_pattern("llama3"), loom::RegexDialect::kTiktoken, "llama3");
  CHECK(pieces(llama3, "I'M 12345") == std::vector<std::string>{"I", "'M", " ", "123", "45"});
  CHECK_FALSE(loom::named_pattern("gpt3").has_value());
  const auto llama = loom::special_token_preset("llama3", 128000);
  REQUIRE(llama);
  CHECK(llama->tokens.size() == 256);
  CHECK(llama->tokens[9].text == "<|eot_id|>");
  CHECK(llama->tokens[9].id == 128009);
  CHECK(llama->tokens.back().text == "<|reserved_special_token_250|>");
  CHECK(llama->tokens.back().id == 128255);
  CHECK(*llama->bos == 128000);
  CHECK(*llama->eos == 128001);
  CHECK(loom::special_token_preset("cl100k_base", 0)->tokens.back().id == 100276);
  CHECK(loom::special_token_preset("o200k_base", 0)->tokens[0].id == 199999);
}

TEST_CASE("tokenizers: a hand-made tiktoken file and tokenizer.json encode as worked out by hand", "[tokenizer]") {
  const auto dir = loom::test::scratch_dir("tokenizers");
  const std::string path = write(dir / "tiny.tiktoken", tiny_ranks());
  CHECK(loom::detect_tokenizer_type(path) == loom::TokenizerType::kTiktoken);
  loom::TokenizerConfig config;
  config.model = path;
  CHECK_THROWS_WITH(loom::load_tokenizer(config), Catch::Matchers::Contains("gpt2, cl100k_base"));
  config.pattern = "gpt2";
  config.special_tokens.ids = {{"<|endoftext|>", 259}};
  const auto tiktoken = loom::load_tokenizer(config);
  CHECK(tiktoken->vocab_size() == 260);
  CHECK(*tiktoken->eos_id() == 259);
  // " abd": "ab" (256) merges before " a" (258), and " " + "ab" is no rank.
  CHECK(tiktoken->encode("abc abd<|endoftext|>") == std::vector<int32_t>{257, ' ', 256, 'd', 259});
  CHECK(tiktoken->encode(" ad") == std::vector<int32_t>{258, 'd'});
  CHECK(tiktoken->encode("abc<|endoftext|>", {false, false}).size() == 14);  // 1 + the special's 13 bytes
  CHECK(tiktoken->decode({257, 258, 259}) == "abc a<|endoftext|>");
  CHECK_THROWS(tiktoken->decode({260}));
  config.special_tokens.ids = {{"<|x|>", 256}};
  CHECK_THROWS_WITH(loom::load_tokenizer(config), Catch::Matchers::Contains("already a rank"));

  const nlohmann::json spec = tiny_tokenizer_json();
  const std::string json_path = write(dir / "tokenizer.json", spec.dump());
  config = {};
  config.model = json_path;
  const auto hf = loom::load_tokenizer(config);
  CHECK(hf->type() == loom::TokenizerType::kHuggingFace);
  CHECK(hf->vocab_size() == 8);
  // " ab": a b (rank 0) before Ġ a (rank 2), and Ġ + ab is no merge.
  CHECK(hf->encode("abc ab<|endoftext|>") == std::vector<int32_t>{5, 3, 4, 7});
  CHECK(hf->encode(" ac") == std::vector<int32_t>{6, 2});
  CHECK(hf->encode("ab", {true, true}) == std::vector<int32_t>{4, 7});
  CHECK(hf->encode("zab") == std::vector<int32_t>{4});  // z is not in the vocabulary and there is no unk
  CHECK(hf->decode({5, 3, 4, 7}) == "abc ab<|endoftext|>");
  CHECK(hf->decode({6, 2}) == " ac");
  CHECK(*hf->eos_id() == 7);
  config.pattern = "gpt2";
  CHECK_THROWS_AS(loom::load_tokenizer(config), loom::ConfigError);  // a pattern is for .tiktoken files only

  // Damaged ids are refused naming the file before they size a table (2^32 + 7 must not wrap to 7).
  config.pattern.clear();
  auto damaged = [&](const char* name, auto&& edit) {
    nlohmann::json copy = spec;
    edit(copy);
    config.model = write(dir / name, copy.dump());
    CHECK_THROWS_WITH(loom::load_tokenizer(config), Catch::Matchers::Contains(config.model));
  };
  damaged("huge-added.json", [](nlohmann::json& j) { j["added_tokens"][0]["id"] = (int64_t{1} << 32) + 7; });
  damaged("far-added.json", [](nlohmann::json& j) { j["added_tokens"][0]["id"] = 8 + loom::kMaxTokenIdGap; });
  damaged("far-vocab.json", [](nlohmann::json& j) { j["model"]["vocab"]["abc"] = 7 + loom::kMaxTokenIdGap; });
  damaged("post-id.json", [](nlohmann::json& j) {
    j["post_processor"]["special_tokens"]["<|endoftext|>"]["ids"] = {8};  // one past the vocabulary
  });
}

TEST_CASE("tokenizers: tokenizer.special_tokens takes a preset or a map, and round-trips", "[tokenizer][config]") {
  const auto preset = loom::parse_config("tokenizer:\n  special_tokens: llama3\n", "a.yaml");
  CHECK(preset.tokenizer.special_tokens.preset == "llama3");
  const auto map = loom::parse_config("tokenizer:\n  special_tokens: {\"<|endoftext|>\": 50256}\n", "b.yaml");
  CHECK(map.tokenizer.special_tokens.ids.at("<|endoftext|>") == 50256);
  CHECK(loom::parse_config(loom::to_yaml(map), "c.yaml").tokenizer.special_tokens.ids == map.tokenizer.special_tokens.ids);
  CHECK_THROWS_AS(loom::parse_config("tokenizer:\n  special_tokens: {x: -1}\n", "d.yaml"), loom::ConfigError);
  CHECK_THROWS_AS(loom::parse_config("tokenizer:\n  special_tokens: [1]\n", "e.yaml"), loom::ConfigError);
  CHECK_THROWS_AS(loom::parse_config("tokenizer:\n  type: wordpiece\n", "f.yaml"), loom::ConfigError);
}

TEST_CASE("tokenizers: encode from several threads at once gives one thread's ids", "[tokenizer]") {
  const auto dir = loom::test::scratch_dir("tokenizer-threads");
  loom::TokenizerConfig tiktoken_config, hf_config;
  tiktoken_config.model = write(dir / "tiny.tiktoken", tiny_ranks());
  tiktoken_config.pattern = "gpt2";
  tiktoken_config.special_tokens.ids = {{"<|endoftext|>", 259}};
  hf_config.model = write(dir / "tokenizer.json", tiny_tokenizer_json().dump());
  const auto tiktoken = loom::load_tokenizer(tiktoken_config);
  const auto hf = loom::load_tokenizer(hf_config);
  // Texts of words from a small alphabet, many repeated (the per-thread piece caches fill and are read).
  std::mt19937 random(7);
  const char* words[] = {"a", "ab", "abc", "abd", "cab", "bca", "aaaa", "<|endoftext|>", "12", "  "};
  std::vector<std::string> texts(400);
  for (auto& text : texts)
    for (int w = 0; w < 12; ++w) text += std::string(w ? " " : "") + words[random() % std::size(words)];
  const auto encode_all = [&](const loom::Tokenizer& tokenizer) {
    std::vector<std::vector<int32_t>> ids;
    for (const auto& text : texts) ids.push_back(tokenizer.encode(text));
    return ids;
  };
  // One thread, the two tokenizers alternating (each owns the thread's piece cache in turn).
  std::vector<std::vector<int32_t>> alternating_tiktoken, alternating_hf;
  for (const auto& text : texts) {
    alternating_tiktoken.push_back(tiktoken->encode(text));
    alternating_hf.push_back(hf->encode(text));
  }
  const auto expected_tiktoken = encode_all(*tiktoken), expected_hf = encode_all(*hf);
  CHECK(alternating_tiktoken == expected_tiktoken);
  CHECK(alternating_hf == expected_hf);
  CHECK(expected_hf[0].size() > 12);  // the texts are not trivially short
  // Eight threads, four sharing each tokenizer.
  std::vector<std::vector<std::vector<int32_t>>> got(8);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < got.size(); ++t)
    threads.emplace_back([&, t] { got[t] = encode_all(t % 2 ? *hf : *tiktoken); });
  for (auto& thread : threads) thread.join();
  for (size_t t = 0; t < got.size(); ++t) CHECK(got[t] == (t % 2 ? expected_hf : expected_tiktoken));
}
