#include "data/token_corpus.h"

#include "core/error.h"
#include "data/prepared_manifest.h"

namespace loom {
namespace fs = std::filesystem;
namespace {

// A pair file is a token file too, but its stream is not a text to model.
void check_stream(const TokenFile& file) {
  LOOM_CHECK(file.layout() == TokenLayout::kStream, file.path().string(), " holds ", layout_name(file.layout()),
             ": a language model trains on a token stream (loom tokenize without --target, or loom prepare)");
}

}  // namespace

TokenCorpus::TokenCorpus(const fs::path& path, const std::string& split) {
  if (!fs::is_directory(path)) {
    name_ = path.string();
    shards_.push_back(std::make_unique<TokenFile>(path));
  } else {
    name_ = path.string() + " (" + split + " split)";
    const PreparedManifest manifest = read_prepared_manifest(path);
    const bool valid = split == "valid";
    LOOM_CHECK(split == "train" || valid, path.string(), ": a prepared directory holds a train and a valid split, not '",
               split, "'");
    const auto& shards = manifest.splits[valid ? 1 : 0].shards;
    LOOM_CHECK(!shards.empty(), path.string(), " has no ", split, " documents",
               valid ? " (prepared with --valid-fraction 0?)" : "");
    for (const auto& shard : shards) {
      auto file = std::make_unique<TokenFile>(path / shard.tokens_file);
      LOOM_CHECK(file->size() == shard.tokens && file->data_crc() == shard.data_crc && 
                 file->tokenizer_crc() == manifest.tokenizer.checksum, file->path().string(),
                 " is not the shard its manifest describes: run loom prepare again");
      shards_.push_back(std::move(file));
    }
  }
  for (const auto& shard : shards_) {
    check_stream(*shard);
    tokens_ += shard->size();
    if (shard->tokenizer_crc() != shards_.front()->tokenizer_crc() || shard->vocab_size() != shards_.front()->vocab_size())
      throw Error(shard->path().string() + " and " + shards_.front()->path().string() +
                  " were made with different tokenizers");
  }
  vocab_size_ = shards_.front()->vocab_size();
  tokenizer_crc_ = shards_.front()->tokenizer_crc();
}

// Windows of one shard: training starts in [0, size - seq_len - 1], or non-overlapping evaluation windows.
int64_t TokenCorpus::windows_in(const TokenFile& shard, int64_t seq_len, bool eval) {
  return std::max<int64_t>(eval ? (shard.size() - 1) / seq_len : shard.size() - seq_len, 0);
}

std::pair<size_t, int64_t> TokenCorpus::locate(int64_t i, int64_t seq_len, bool eval) const {
  for (size_t s = 0; s < shards_.size(); ++s) {
    const int64_t n = windows_in(*shards_[s], seq_len, eval);
    if (i < n) return {s, i};
    i -= n;
  }
  throw Error(name_ + ": window outside the corpus");
}

int64_t TokenCorpus::count(int64_t seq_len, bool eval) const {
  int64_t total = 0;
  for (const auto& shard : shards_) total += windows_in(*shard, seq_len, eval);
  LOOM_CHECK(total > 0, name_, ": ", tokens_, " tokens are too few for data.seq_len=", seq_len);
  return total;
}

int64_t TokenCorpus::window_starts(int64_t seq_len) const { return count(seq_len, false); }

torch::Tensor TokenCorpus::window(int64_t w, int64_t seq_len) const {
  const auto [shard, start] = locate(w, seq_len, false);
  return shards_[shard]->slice(start, seq_len + 1);
}

int64_t TokenCorpus::eval_windows(int64_t seq_len) const { return count(seq_len, true); }

torch::Tensor TokenCorpus::eval_window(int64_t i, int64_t seq_len) const {
  const auto [shard, k] = locate(i, seq_len, true);
  return shards_[shard]->slice(k * seq_len, seq_len + 1);
}

}  // namespace loom
