// Translation pairs in a token file (layout TokenLayout::kPairs, written by
// `loom tokenize --tokenizer M --out F.bin --target TARGET.txt SOURCE.txt`): the token stream is
//   source_0 EOS target_0 EOS source_1 EOS target_1 EOS ...
// with the sentencepiece ids of data/pairs/seq2seq_batch.h (EOS = 2; sentencepiece never emits it for text,
// so it delimits unambiguously). Same header, checksums and mmap as every token file; opening indexes
// where each pair starts (one pass over the tokens), so a pair is then two slices of the mapping.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <vector>

#include "data/corpus/token_file.h"

namespace loom {

class PairFile {
 public:
  // Opens and checks the file (TokenFile's checks, then the layout and the EOS structure); throws
  // loom::Error naming the file.
  explicit PairFile(const std::filesystem::path& path);

  int64_t size() const { return static_cast<int64_t>(starts_.size()) - 1; }  // number of pairs
  int64_t source_length(int64_t pair) const { return middles_[pair] - starts_[pair]; }  // without EOS
  int64_t target_length(int64_t pair) const { return starts_[pair + 1] - 1 - (middles_[pair] + 1); }  // without EOS
  torch::Tensor source(int64_t pair) const;  // (source_length) int64
  torch::Tensor target(int64_t pair) const;  // (target_length) int64

  int64_t vocab_size() const { return tokens_.vocab_size(); }
  uint32_t tokenizer_crc() const { return tokens_.tokenizer_crc(); }
  const std::filesystem::path& path() const { return tokens_.path(); }
  const TokenFile& tokens() const { return tokens_; }

 private:
  TokenFile tokens_;
  std::vector<int64_t> starts_;   // pair i's source starts at starts_[i]; starts_[size()] = end of data
  std::vector<int64_t> middles_;  // position of the EOS ending pair i's source
};

// Writes a pair file; sources[i] and targets[i] are the token ids of pair i without EOS (each
// non-empty, and without EOS inside).
void write_pair_file(const std::filesystem::path& path, const std::vector<std::vector<int32_t>>& sources,
                     const std::vector<std::vector<int32_t>>& targets, int64_t vocab_size, uint32_t tokenizer_crc);

}  // namespace loom
