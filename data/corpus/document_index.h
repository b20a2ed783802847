// The document index of a token shard (`loom prepare` writes SHARD.idx beside SHARD.bin): where each
// document's first token is. A document is its tokens followed by the tokenizer's EOS, as in every loom
// token stream, so document i spans [offset(i), offset(i + 1)) (the last one ends at the shard's end) and
// its last token is EOS. What uses it (packing with document masks, per-document sampling) needs the
// boundaries without scanning for EOS, which a document may also contain as text.
//
// Layout: a 64-byte header, then `documents` little-endian uint64 offsets, increasing from 0, each below
// `tokens`. The header carries the shard's token count and data CRC, so an index never pairs with
// another shard, and a CRC of the offsets. Later per-token side files (an SFT loss mask) follow the same
// pattern: their own magic, the shard's CRC, their own checksum.
#pragma once
#include <cstdint>
#include <filesystem>
#include <vector>

#include "core/atomic_writer.h"
#include "data/corpus/token_file.h"

namespace loom {

struct DocumentIndexHeader {
  char magic[8];  // "LOOMDOC\0"
  uint32_t version;
  uint32_t reserved0;
  uint64_t documents;
  uint64_t tokens;          // tokens of the shard it indexes
  uint32_t shard_data_crc;  // that shard's TokenFileHeader::data_crc
  uint32_t offsets_crc;     // CRC-32 of the offsets
  uint8_t reserved[24];
};
static_assert(sizeof(DocumentIndexHeader) == 64, "document index header must stay 64 bytes");

// Streams offsets into an AtomicFileWriter: the header goes in last, at finish().
class DocumentIndexWriter {
 public:
  explicit DocumentIndexWriter(const std::filesystem::path& path);
  void add(uint64_t offset);
  // The shard's token count and data CRC; commits the file.
  void finish(uint64_t tokens, uint32_t shard_data_crc);
  uint64_t documents() const { return documents_; }

 private:
  AtomicFileWriter file_;
  uint64_t documents_ = 0;
  uint32_t crc_ = 0;
};

// Reads and checks an index against its shard; throws loom::Error naming the index file.
class DocumentIndex {
 public:
  DocumentIndex(const std::filesystem::path& path, const TokenFile& shard);
  int64_t documents() const { return static_cast<int64_t>(offsets_.size()); }
  int64_t offset(int64_t document) const { return static_cast<int64_t>(offsets_.at(static_cast<size_t>(document))); }
  // Tokens of document i, its EOS included.
  int64_t length(int64_t document) const;

 private:
  std::vector<uint64_t> offsets_;
  uint64_t tokens_ = 0;
};

}  // namespace loom
