// The tokens a language model trains or evaluates on, from what a config key names: a token file, or one
// split ("train", "valid") of a prepared directory (`loom prepare`), its shards in manifest order.
// Windows of seq_len + 1 tokens stay inside one shard (shards end at document boundaries), and are
// numbered across the shards in order, so a corpus of one file numbers them exactly as the file alone.
// A window may cross documents: with read_documents() it also says where each starts (a prepared
// directory's document indexes, or a token file's EOS ids), as each token's position in its document
// (data.document_mask). An SFT directory (`loom prepare --sft`) has a loss mask per shard, read always.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/corpus/document_index.h"
#include "data/corpus/loss_mask.h"
#include "data/corpus/token_file.h"

namespace loom {

// seq_len + 1 consecutive tokens of a corpus and what packing and SFT know about them.
struct CorpusWindow {
  torch::Tensor tokens;     // (seq_len + 1) int64
  // With read_documents(): (seq_len + 1) int64, each token's position in its document, counted from the
  // window's start for the document the window begins inside. Undefined otherwise.
  torch::Tensor positions;
  // SFT data: (seq_len + 1) bool, true where the token counts as a target. Undefined: every token does.
  torch::Tensor loss_mask;
};

class TokenCorpus {
 public:
  // path: a token file, or a prepared directory whose `split` is read. Every shard is opened and checked
  // (data/corpus/token_file.h) and must hold a token stream made with the manifest's tokenizer. Throws
  // loom::Error naming the path.
  TokenCorpus(const std::filesystem::path& path, const std::string& split);

  const std::string& name() const { return name_; }  // "DIR (train split)" or the file
  int64_t tokens() const { return tokens_; }
  int64_t vocab_size() const { return vocab_size_; }
  uint32_t tokenizer_crc() const { return tokenizer_crc_; }
  const std::vector<std::unique_ptr<TokenFile>>& shards() const { return shards_; }
  // Whether the shards carry loss masks (SFT data), and how many tokens they count.
  bool has_loss_mask() const { return !masks_.empty(); }
  int64_t loss_tokens() const;

  // From now on windows carry positions. A prepared directory's documents come from its indexes; a token
  // file's end at each `eos_id` (none given: throws saying what to set).
  void read_documents(std::optional<int32_t> eos_id);
  bool reads_documents() const { return reads_documents_; }

  // Training windows: every start at which seq_len + 1 tokens fit inside a shard. Throws when there
  // are none (too few tokens for seq_len).
  int64_t window_starts(int64_t seq_len) const;
  // The seq_len + 1 tokens of window w in [0, window_starts(seq_len)).
  CorpusWindow window(int64_t w, int64_t seq_len) const;

  // Evaluation: consecutive non-overlapping windows (start = k * seq_len in each shard).
  int64_t eval_windows(int64_t seq_len) const;
  CorpusWindow eval_window(int64_t i, int64_t seq_len) const;

 private:
  static int64_t windows_in(const TokenFile& shard, int64_t seq_len, bool eval);
  int64_t count(int64_t seq_len, bool eval) const;
  // The shard holding window i and the window's number within that shard.
  std::pair<size_t, int64_t> locate(int64_t i, int64_t seq_len, bool eval) const;
  CorpusWindow window_at(size_t shard, int64_t start, int64_t length) const;
  // (length) int64 positions of tokens [start, start + length) of a shard in their documents.
  torch::Tensor positions_at(size_t shard, int64_t start, int64_t length) const;

  std::string name_;
  std::filesystem::path dir_;  // a prepared directory's; empty for a token file
  std::vector<std::string> index_files_;  // a prepared directory's, per shard
  std::vector<std::unique_ptr<TokenFile>> shards_;
  std::vector<std::unique_ptr<LossMask>> masks_;  // per shard, or none
  std::vector<std::unique_ptr<DocumentIndex>> indexes_;  // per shard once read_documents() on a directory
  bool reads_documents_ = false;
  int32_t eos_id_ = -1;  // a token file's document end
  int64_t tokens_ = 0;
  int64_t vocab_size_ = 0;
  uint32_t tokenizer_crc_ = 0;
};

}  // namespace loom
