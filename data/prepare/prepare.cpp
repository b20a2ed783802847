#include "data/prepare/prepare.h"

#include <spdlog/spdlog.h>

#include <regex>

#include "core/error.h"
#include "core/file_io.h"
#include "data/prepare/input_stream.h"

namespace loom {
namespace fs = std::filesystem;
namespace {

constexpr const char* kTrainedTokenizer = "tokenizer.model";

const char* split_option(DocumentSplit split) {
  switch (split) {
    case DocumentSplit::kBlankLines: return "blank_lines";
    case DocumentSplit::kWholeFile: return "file";
    case DocumentSplit::kLines: break;
  }
  return "lines";
}

// Every option that changes what is written (not the thread count: it does not).
nlohmann::json output_options(const PrepareOptions& o) {
  const auto& s = o.stream;
  nlohmann::json j = {{"field", s.encode.field},
                      {"documents", split_option(s.text_split)},
                      {"valid_fraction", s.encode.valid_fraction},
                      {"on_error", s.encode.stop_at_problem ? "fail" : "skip"},
                      {"shard_tokens", s.shard_tokens},
                      {"max_document_bytes", s.max_document_bytes},
                      {"train_tokenizer", nullptr},
                      {"sft", nullptr}};
  if (s.encode.sft.enabled) {  // the template's text, not its path: an edited template prepares again
    const auto& sft = s.encode.sft;
    nlohmann::json chat = nullptr;
    if (sft.chat_template) {
      chat = {{"roles", nlohmann::json::object()}, {"trained_roles", sft.chat_template->trained_roles}};
      for (const auto& [role, r] : sft.chat_template->roles)
        chat["roles"][role] = {{"prefix", r.prefix}, {"suffix", r.suffix}};
    }
    j["sft"] = {{"prompt_field", sft.prompt_field}, {"response_field", sft.response_field},
                {"messages_field", sft.messages_field}, {"chat_template", chat}};
  }
  if (o.train_tokenizer)
    j["train_tokenizer"] = {{"type", "sentencepiece"},
                            {"vocab_size", o.tokenizer_training.vocab_size},
                            {"sample_bytes", o.tokenizer_training.sample_bytes}};
  return j;
}

std::vector<PreparedInput> describe_inputs(const std::vector<InputFile>& inputs) {
  std::vector<PreparedInput> out;
  for (const auto& i : inputs)
    out.push_back({fs::absolute(i.path).lexically_normal().string(), format_name(i.format),
                   compression_name(i.compression), i.bytes, 0});
  return out;
}

// Why DIR's manifest does not describe what this run would write; nothing when it does.
std::optional<std::string> stale_because(const fs::path& dir, const PreparedManifest& old,
                                         const std::vector<PreparedInput>& inputs, const nlohmann::json& options,
                                         uint32_t tokenizer_checksum) {
  if (old.options != options) return "the options changed";
  if (old.tokenizer.checksum != tokenizer_checksum) return "the tokenizer changed";
  if (old.inputs.size() != inputs.size()) return "the list of inputs changed";
  for (size_t i = 0; i < inputs.size(); ++i)
    if (old.inputs[i].path != inputs[i].path || old.inputs[i].bytes != inputs[i].bytes)
      return inputs[i].path + " is new or changed size";
  const uint64_t width = token_bytes_for(old.tokenizer.vocab_size);
  for (const auto& split : old.splits)
    for (const auto& shard : split.shards) {
      std::error_code e;
      if (fs::file_size(dir / shard.tokens_file, e) != sizeof(TokenFileHeader) + width * shard.tokens ||
          fs::file_size(dir / shard.index_file, e) != sizeof(DocumentIndexHeader) + 8 * shard.documents ||
          (!shard.mask_file.empty() && fs::file_size(dir / shard.mask_file, e) != sizeof(LossMaskHeader) + shard.tokens))
        return shard.tokens_file + " or its index is missing or damaged";
    }
  for (size_t i = 0; i < inputs.size(); ++i)  // last: it reads every input
    if (crc32_file(inputs[i].path) != old.inputs[i].crc32) return inputs[i].path + " changed (checksum)";
  return std::nullopt;
}

bool written_by_prepare(const std::string& name) {
  static const std::regex pattern(R"((train|valid)-\d{5}\.(bin|idx|mask)(\.tmp)?|manifest\.json\.tmp|tokenizer\.model\.tmp)");
  return std::regex_match(name, pattern);
}

// Removes the shards (and leftovers of an interrupted run) that a prepare wrote into dir. Never throws (it
// also cleans up after a failure): a file it cannot remove is one no manifest describes.
void remove_prepared_files(const fs::path& dir) {
  std::error_code ignored;
  std::vector<fs::path> doomed;  // collected first: removing while iterating skips entries
  for (const auto& entry : fs::directory_iterator(dir, ignored))
    if (written_by_prepare(entry.path().filename().string())) doomed.push_back(entry.path());
  for (const auto& path : doomed) fs::remove(path, ignored);
}

// Until dismissed, removes this run's shards when it fails (the manifest is written last, so no manifest
// ever describes them).
class RemoveOnFailure {
 public:
  explicit RemoveOnFailure(fs::path dir) : dir_(std::move(dir)) {}
  ~RemoveOnFailure() {
    if (armed_) remove_prepared_files(dir_);
  }
  void dismiss() { armed_ = false; }

 private:
  fs::path dir_;
  bool armed_ = true;
};

}  // namespace

std::unique_ptr<Tokenizer> open_prepare_tokenizer(const TokenizerConfig& config) { return load_tokenizer(config); }

PrepareResult prepare(const PrepareOptions& options, const std::function<void(const StreamProgress&)>& progress) {
  const fs::path& dir = options.out;
  LOOM_CHECK(!dir.empty(), "loom prepare: --out DIR is missing");
  LOOM_CHECK(!fs::exists(dir) || fs::is_directory(dir), dir.string(), " exists and is not a directory: --out names "
             "the directory the prepared data goes to");
  LOOM_CHECK(options.train_tokenizer != !options.tokenizer.model.empty(), "loom prepare: give either --tokenizer FILE or "
             "--train-tokenizer sentencepiece --vocab N");
  const std::vector<InputFile> inputs = expand_inputs(options.inputs);
  if (options.stream.encode.sft.enabled)
    for (const auto& input : inputs)
      if (input.format != InputFormat::kJsonl)
        throw ConfigError("loom prepare --sft: " + input.path.string() + " is not JSON Lines: SFT records are JSONL "
                          "with prompt/response fields or messages (docs/data.md, \"Supervised fine-tuning\")");
  PreparedManifest manifest;
  manifest.inputs = describe_inputs(inputs);
  manifest.options = output_options(options);
  TokenizerConfig tokenizer_config = options.tokenizer;
  if (options.train_tokenizer) {
    tokenizer_config = TokenizerConfig{};
    tokenizer_config.model = (dir / kTrainedTokenizer).string();
    tokenizer_config.type = TokenizerType::kSentencePiece;
  }
  const fs::path tokenizer_path = tokenizer_config.model;
  LOOM_CHECK(options.train_tokenizer || fs::is_regular_file(tokenizer_path), tokenizer_path.string(),
             ": no tokenizer there (--tokenizer FILE)");
  // A given tokenizer is loaded first: its checksum (a tiktoken's covers the pattern and special tokens
  // too) says whether DIR is up to date. One --train-tokenizer trained is loaded from DIR.
  std::unique_ptr<Tokenizer> tokenizer;
  if (!options.train_tokenizer) tokenizer = open_prepare_tokenizer(tokenizer_config);

  if (is_prepared_dir(dir)) {
    std::optional<std::string> why = "its manifest is damaged";
    try {
      const PreparedManifest old = read_prepared_manifest(dir);
      if (options.train_tokenizer && fs::is_regular_file(tokenizer_path))
        tokenizer = open_prepare_tokenizer(tokenizer_config);
      why = tokenizer ? stale_because(dir, old, manifest.inputs, manifest.options, tokenizer->checksum())
                      : std::optional<std::string>("its tokenizer is missing");
      if (!why) {
        spdlog::info("{} is up to date (same inputs, options and tokenizer): nothing to do", dir.string());
        return {true, old};
      }
    } catch (const Error& e) {
      spdlog::warn("{}", e.what());
    }
    spdlog::info("preparing {} again: {}", dir.string(), *why);
    fs::remove(dir / kManifestName);
  }
  fs::create_directories(dir);
  remove_prepared_files(dir);
  RemoveOnFailure cleanup(dir);

  if (options.train_tokenizer) {
    spdlog::info("training a SentencePiece tokenizer ({} pieces) on a sample of up to {} MB of the inputs",
                 options.tokenizer_training.vocab_size, options.tokenizer_training.sample_bytes >> 20);
    const auto sample = train_sentencepiece(inputs, options.tokenizer_training, tokenizer_path);
    spdlog::info("{}: trained on {} documents ({:.1f} MB)", tokenizer_path.string(), sample.documents,
                 static_cast<double>(sample.bytes) / 1e6);
    tokenizer = open_prepare_tokenizer(tokenizer_config);
  }
  manifest.tokenizer = {options.train_tokenizer ? std::string(kTrainedTokenizer)
                                                : fs::absolute(tokenizer_path).lexically_normal().string(),
                        tokenizer->checksum(), tokenizer->vocab_size(), tokenizer->require_eos(), options.train_tokenizer};
  StreamOutcome outcome = tokenize_corpus(inputs, *tokenizer, options.stream, dir, progress);
  manifest.splits = std::move(outcome.splits);
  manifest.skipped = std::move(outcome.skipped);
  for (size_t i = 0; i < inputs.size(); ++i) manifest.inputs[i].crc32 = outcome.input_crcs[i];
  write_prepared_manifest(dir, manifest);
  cleanup.dismiss();
  return {false, manifest};
}

}  // namespace loom
