#include "data/corpus/token_corpus.h"

#include "core/error.h"
#include "data/prepare/prepared_manifest.h"

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
    dir_ = path;
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
      LOOM_CHECK(shard.mask_file.empty() == shards.front().mask_file.empty(), path.string(),
                 ": some shards have loss masks and some do not: run loom prepare again");
      if (!shard.mask_file.empty()) {
        masks_.push_back(std::make_unique<LossMask>(path / shard.mask_file, *file));
        LOOM_CHECK(masks_.back()->counted() == shard.loss_tokens, (path / shard.mask_file).string(),
                   " is not the mask its manifest describes: run loom prepare again");
      }
      index_files_.push_back(shard.index_file);
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

int64_t TokenCorpus::loss_tokens() const {
  int64_t total = 0;
  for (const auto& mask : masks_) total += mask->counted();
  return total;
}

void TokenCorpus::read_documents(std::optional<int32_t> eos_id) {
  if (reads_documents_) return;
  if (!dir_.empty()) {
    for (size_t s = 0; s < shards_.size(); ++s)
      indexes_.push_back(std::make_unique<DocumentIndex>(dir_ / index_files_[s], *shards_[s]));
  } else {
    LOOM_CHECK(eos_id.has_value(), name_, ": data.document_mask finds the documents of a token file by their end-of-document "
               "id: set tokenizer.model (its EOS), or train on a directory made by loom prepare (it has document indexes)");
    eos_id_ = *eos_id;
  }
  reads_documents_ = true;
}

torch::Tensor TokenCorpus::positions_at(size_t shard, int64_t start, int64_t length) const {
  auto out = torch::empty({length}, torch::kLong);
  auto* p = out.data_ptr<int64_t>();
  if (!indexes_.empty()) {
    // The documents starting inside the window, from the first whose offset is past `start`.
    const DocumentIndex& index = *indexes_[shard];
    int64_t lo = 0, hi = index.documents();  // the first document starting after `start`: binary search
    while (lo < hi) {
      const int64_t mid = (lo + hi) / 2;
      if (index.offset(mid) <= start) lo = mid + 1; else hi = mid;
    }
    int64_t next = lo < index.documents() ? index.offset(lo) : -1;
    int64_t position = 0;
    for (int64_t i = 0; i < length; ++i, ++position) {
      if (start + i == next) {
        position = 0;
        ++lo;
        next = lo < index.documents() ? index.offset(lo) : -1;
      }
      p[i] = position;
    }
  } else {
    const TokenFile& file = *shards_[shard];
    int64_t position = 0;
    for (int64_t i = 0; i < length; ++i, ++position) {
      if (i > 0 && file.at(start + i - 1) == eos_id_) position = 0;  // a document starts after each EOS
      p[i] = position;
    }
  }
  return out;
}

CorpusWindow TokenCorpus::window_at(size_t shard, int64_t start, int64_t length) const {
  CorpusWindow w;
  w.tokens = shards_[shard]->slice(start, length);
  if (reads_documents_) w.positions = positions_at(shard, start, length);
  if (!masks_.empty()) w.loss_mask = masks_[shard]->slice(start, length);
  return w;
}

CorpusWindow TokenCorpus::window(int64_t w, int64_t seq_len) const {
  const auto [shard, start] = locate(w, seq_len, false);
  return window_at(shard, start, seq_len + 1);
}

int64_t TokenCorpus::eval_windows(int64_t seq_len) const { return count(seq_len, true); }

CorpusWindow TokenCorpus::eval_window(int64_t i, int64_t seq_len) const {
  const auto [shard, k] = locate(i, seq_len, true);
  return window_at(shard, k * seq_len, seq_len + 1);
}

}  // namespace loom
