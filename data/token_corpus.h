// The tokens a language model trains or evaluates on, from what a config key names: a token file, or one
// split ("train", "valid") of a prepared directory (`loom prepare`), its shards in manifest order.
// Windows of seq_len + 1 tokens stay inside one shard (shards end at document boundaries), and are
// numbered across the shards in order, so a corpus of one file numbers them exactly as the file alone.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "data/token_file.h"

namespace loom {

class TokenCorpus {
 public:
  // path: a token file, or a prepared directory whose `split` is read. Every shard is opened and checked
  // (data/token_file.h) and must hold a token stream made with the manifest's tokenizer. Throws
  // loom::Error naming the path.
  TokenCorpus(const std::filesystem::path& path, const std::string& split);

  const std::string& name() const { return name_; }  // "DIR (train split)" or the file
  int64_t tokens() const { return tokens_; }
  int64_t vocab_size() const { return vocab_size_; }
  uint32_t tokenizer_crc() const { return tokenizer_crc_; }
  const std::vector<std::unique_ptr<TokenFile>>& shards() const { return shards_; }

  // Training windows: every start at which seq_len + 1 tokens fit inside a shard. Throws when there
  // are none (too few tokens for seq_len).
  int64_t window_starts(int64_t seq_len) const;
  // The seq_len + 1 tokens of window w in [0, window_starts(seq_len)), as int64.
  torch::Tensor window(int64_t w, int64_t seq_len) const;

  // Evaluation: consecutive non-overlapping windows (start = k * seq_len in each shard).
  int64_t eval_windows(int64_t seq_len) const;
  torch::Tensor eval_window(int64_t i, int64_t seq_len) const;

 private:
  static int64_t windows_in(const TokenFile& shard, int64_t seq_len, bool eval);
  int64_t count(int64_t seq_len, bool eval) const;
  // The shard holding window i and the window's number within that shard.
  std::pair<size_t, int64_t> locate(int64_t i, int64_t seq_len, bool eval) const;

  std::string name_;
  std::vector<std::unique_ptr<TokenFile>> shards_;
  int64_t tokens_ = 0;
  int64_t vocab_size_ = 0;
  uint32_t tokenizer_crc_ = 0;
};

}  // namespace loom
