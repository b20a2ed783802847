// The loss mask of a token shard (`loom prepare --sft` writes SHARD.mask beside SHARD.bin): one byte per
// token, 1 where the token is a target the loss counts (a response token, or the EOS after a response),
// 0 where it is only context (a prompt, a system message, a chat template's text). Training makes the
// targets of 0 tokens loom::kIgnoreIndex (data/corpus/lm_sampler.h), so the loss is the mean over response tokens.
//
// Layout: a 64-byte header, then `tokens` bytes, each 0 or 1. As the document index (data/corpus/document_index.h)
// does, the header carries the shard's token count and data CRC, so a mask never pairs with another shard,
// and a CRC of the mask bytes.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>

#include "core/atomic_writer.h"
#include "core/file_io.h"
#include "data/corpus/token_file.h"

namespace loom {

struct LossMaskHeader {
  char magic[8];  // "LOOMMSK\0"
  uint32_t version;
  uint32_t reserved0;
  uint64_t tokens;          // tokens of the shard it masks
  uint64_t counted;         // tokens whose byte is 1
  uint32_t shard_data_crc;  // that shard's TokenFileHeader::data_crc
  uint32_t mask_crc;        // CRC-32 of the mask bytes
  uint8_t reserved[24];
};
static_assert(sizeof(LossMaskHeader) == 64, "loss mask header must stay 64 bytes");

// Streams mask bytes into an AtomicFileWriter: the header goes in last, at finish().
class LossMaskWriter {
 public:
  explicit LossMaskWriter(const std::filesystem::path& path);
  // One document's bytes (0 or 1 each).
  void add(const uint8_t* mask, size_t count);
  // The shard's token count and data CRC; commits the file.
  void finish(uint64_t tokens, uint32_t shard_data_crc);

 private:
  AtomicFileWriter file_;
  uint64_t tokens_ = 0, counted_ = 0;
  uint32_t crc_ = 0;
};

// Maps and checks a mask against its shard; throws loom::Error naming the mask file.
class LossMask {
 public:
  LossMask(const std::filesystem::path& path, const TokenFile& shard);
  int64_t counted() const { return static_cast<int64_t>(counted_); }
  // Bytes [start, start + length) as a bool tensor: true where the token counts as a target.
  torch::Tensor slice(int64_t start, int64_t length) const;

 private:
  std::filesystem::path path_;
  std::unique_ptr<MappedFile> file_;
  const uint8_t* bytes_ = nullptr;
  uint64_t tokens_ = 0, counted_ = 0;
};

}  // namespace loom
