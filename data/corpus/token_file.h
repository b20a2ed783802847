// Token files: a 64-byte header (magic, version, token width, count, vocabulary size, CRC-32 of the
// tokenizer model and of the token data, layout) followed by little-endian token ids, 2 or 4 bytes each.
// Opened read-only through mmap, so training reads tokens, never text. Text -> tokens is `loom tokenize`.
// Layouts: a stream of documents each ended by EOS (language modelling), or translation pairs, the
// same stream read as source, EOS, target, EOS per pair (data/pairs/pair_file.h indexes it).
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace loom {

enum class TokenLayout : uint32_t { kStream = 0, kPairs = 1 };
const char* layout_name(TokenLayout layout);

struct TokenFileHeader {
  char magic[8];
  uint32_t version;
  uint32_t token_bytes;  // 2 or 4
  uint64_t count;
  uint64_t vocab_size;
  uint32_t tokenizer_crc;
  uint32_t data_crc;
  uint32_t layout;  // TokenLayout; files written before it existed hold 0 (a stream) there
  uint8_t reserved[20];
};
static_assert(sizeof(TokenFileHeader) == 64, "token file header must stay 64 bytes");

class TokenFile {
 public:
  // Maps the file and checks header, size and data checksum; throws loom::Error naming the file.
  explicit TokenFile(const std::filesystem::path& path);
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  int64_t size() const { return static_cast<int64_t>(header_.count); }
  int64_t vocab_size() const { return static_cast<int64_t>(header_.vocab_size); }
  uint32_t tokenizer_crc() const { return header_.tokenizer_crc; }
  uint32_t data_crc() const { return header_.data_crc; }
  TokenLayout layout() const { return static_cast<TokenLayout>(header_.layout); }
  const std::filesystem::path& path() const { return path_; }

  int64_t at(int64_t index) const;
  // tokens[start, start + length) as an int64 tensor.
  torch::Tensor slice(int64_t start, int64_t length) const;

 private:
  std::filesystem::path path_;
  TokenFileHeader header_{};
  const uint8_t* data_ = nullptr;  // first token
  void* map_ = nullptr;
  size_t map_size_ = 0;
};

// Token width of a file for this vocabulary: 2 bytes up to 65536 ids, else 4.
uint32_t token_bytes_for(int64_t vocab_size);

// The header of a file of `count` tokens whose data (count * token_bytes_for(vocab_size) bytes) has CRC-32
// data_crc: what a writer that streams the data (data/prepare/shard_writer.h) puts in front of it once it is done.
TokenFileHeader make_token_file_header(uint64_t count, int64_t vocab_size, uint32_t tokenizer_crc, uint32_t data_crc,
                                       TokenLayout layout = TokenLayout::kStream);

void write_token_file(const std::filesystem::path& path, const std::vector<int32_t>& tokens, int64_t vocab_size,
                      uint32_t tokenizer_crc, TokenLayout layout = TokenLayout::kStream);

}  // namespace loom
