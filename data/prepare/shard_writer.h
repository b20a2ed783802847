// Writes one split of a prepared directory (`loom prepare`) as it streams in: token shards
// DIR/<split>-00000.bin, -00001.bin, ... (loom token files, data/corpus/token_file.h), each beside its document
// index <split>-NNNNN.idx (data/corpus/document_index.h) and, for SFT data, its loss mask <split>-NNNNN.mask
// (data/corpus/loss_mask.h). A shard is closed once it holds shard_tokens tokens or
// the next document would take it past that; a document never straddles two shards. Memory stays one
// write buffer whatever the shard size: tokens go to disk as they come, the header last.
// Each file is written under a temporary name and renamed once complete (core/atomic_writer.h).
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/atomic_writer.h"
#include "data/corpus/document_index.h"
#include "data/corpus/loss_mask.h"

namespace loom {

struct ShardInfo {
  std::string tokens_file;  // names inside the directory
  std::string index_file;
  int64_t tokens = 0;
  int64_t documents = 0;
  uint32_t data_crc = 0;
  std::string mask_file;    // SFT: the loss mask's name; empty: none (every token is a target)
  int64_t loss_tokens = 0;  // with a mask: the tokens it counts
};

class ShardWriter {
 public:
  // with_loss_mask: every document comes with its loss mask, written beside each shard.
  ShardWriter(std::filesystem::path dir, std::string split, int64_t vocab_size, uint32_t tokenizer_crc,
              int64_t shard_tokens, bool with_loss_mask = false);
  ~ShardWriter();

  // One document's tokens, its EOS included, and with a loss mask its `count` mask bytes.
  void add_document(const int32_t* tokens, size_t count, const uint8_t* mask = nullptr);
  // Closes the last shard and returns every shard of the split (none when no document came).
  std::vector<ShardInfo> finish();

  // "<split>-00012.bin"
  static std::string shard_name(const std::string& split, size_t number, const char* extension);

 private:
  void open_shard();
  void close_shard();

  std::filesystem::path dir_;
  std::string split_;
  int64_t vocab_size_;
  uint32_t tokenizer_crc_;
  int64_t shard_tokens_;
  bool with_loss_mask_;
  uint32_t token_bytes_;
  std::vector<ShardInfo> shards_;
  std::unique_ptr<AtomicFileWriter> tokens_;  // the open shard, if any
  std::unique_ptr<DocumentIndexWriter> index_;
  std::unique_ptr<LossMaskWriter> mask_;
  ShardInfo current_;
  std::vector<char> packed_;  // one document in the file's token width
};

}  // namespace loom
