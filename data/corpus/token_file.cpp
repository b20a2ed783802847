#include "data/corpus/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <limits>

#include "core/error.h"
#include "core/file_io.h"

namespace loom {
namespace {
constexpr char kTokenFileMagic[8] = {'L', 'O', 'O', 'M', 'T', 'O', 'K', '\0'};
constexpr uint32_t kTokenFileVersion = 1;
}  // namespace

const char* layout_name(TokenLayout layout) {
  switch (layout) {
    case TokenLayout::kStream: return "a token stream";
    case TokenLayout::kPairs: return "translation pairs";
  }
  return "an unknown layout";
}

TokenFile::TokenFile(const std::filesystem::path& path) : path_(path) {
  const std::string name = path.string();
  const int fd = ::open(name.c_str(), O_RDONLY);
  LOOM_CHECK(fd >= 0, name, ": cannot open the token file (make it with scripts/prepare_kjv.sh or loom tokenize)");
  struct stat st {};
  ::fstat(fd, &st);
  map_size_ = static_cast<size_t>(st.st_size);
  if (map_size_ < sizeof(TokenFileHeader)) {
    ::close(fd);
    throw Error(name + ": not a loom token file (only " + std::to_string(map_size_) + " bytes)");
  }
  map_ = ::mmap(nullptr, map_size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  LOOM_CHECK(map_ != MAP_FAILED, name, ": cannot mmap the token file");
  std::memcpy(&header_, map_, sizeof header_);
  data_ = static_cast<const uint8_t*>(map_) + sizeof header_;

  auto fail = [&](const std::string& why) {
    ::munmap(map_, map_size_);
    map_ = nullptr;
    throw Error(name + ": " + why);
  };
  if (std::memcmp(header_.magic, kTokenFileMagic, sizeof kTokenFileMagic) != 0) fail("not a loom token file (bad magic)");
  if (header_.version != kTokenFileVersion)
    fail("token file version " + std::to_string(header_.version) + ", this loom reads version " +
         std::to_string(kTokenFileVersion) + ": re-create it with loom tokenize");
  if (header_.layout > static_cast<uint32_t>(TokenLayout::kPairs))
    fail("unknown layout " + std::to_string(header_.layout) + ": re-create it with loom tokenize");
  if (header_.token_bytes != 2 && header_.token_bytes != 4)
    fail("bad token width " + std::to_string(header_.token_bytes));
  // Compared in tokens, not bytes: a damaged count times the width could wrap around to the file size.
  const size_t data_bytes = map_size_ - sizeof header_;
  if (header_.count != data_bytes / header_.token_bytes || data_bytes % header_.token_bytes != 0)
    fail("truncated or padded: the header promises " + std::to_string(header_.count) + " tokens of " +
         std::to_string(header_.token_bytes) + " bytes but the file holds " + std::to_string(data_bytes) +
         " bytes of tokens: re-create it with loom tokenize");
  if (crc32(data_, data_bytes) != header_.data_crc)
    fail("corrupt: token data checksum mismatch: re-create it with loom tokenize");
  // Token ids are int32 (write_token_file): a larger vocabulary is a damaged header, not a model to build.
  if (header_.vocab_size == 0 || header_.vocab_size > static_cast<uint64_t>(std::numeric_limits<int32_t>::max()))
    fail("corrupt: vocabulary size " + std::to_string(header_.vocab_size) +
         " in the header: re-create it with loom tokenize");
  // A header whose vocabulary is smaller than its ids would index past the model's embedding.
  for (int64_t i = 0; i < size(); ++i)
    if (static_cast<uint64_t>(at(i)) >= header_.vocab_size)
      fail("corrupt: token " + std::to_string(i) + " is id " + std::to_string(at(i)) + ", outside the vocabulary of " +
           std::to_string(header_.vocab_size) + " in the header: re-create it with loom tokenize");
}

TokenFile::~TokenFile() {
  if (map_ != nullptr) ::munmap(map_, map_size_);
}

int64_t TokenFile::at(int64_t index) const {
  if (header_.token_bytes == 2) {
    uint16_t v;
    std::memcpy(&v, data_ + index * 2, 2);
    return v;
  }
  uint32_t v;
  std::memcpy(&v, data_ + index * 4, 4);
  return v;
}

torch::Tensor TokenFile::slice(int64_t start, int64_t length) const {
  TORCH_CHECK(start >= 0 && length >= 0 && start + length <= size(), "token slice [", start, ", ", start + length,
              ") outside ", path_.string(), " of ", size(), " tokens");
  auto out = torch::empty({length}, torch::kLong);
  auto* dst = out.data_ptr<int64_t>();
  for (int64_t i = 0; i < length; ++i) dst[i] = at(start + i);
  return out;
}

uint32_t token_bytes_for(int64_t vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

TokenFileHeader make_token_file_header(uint64_t count, int64_t vocab_size, uint32_t tokenizer_crc, uint32_t data_crc,
                                       TokenLayout layout) {
  TokenFileHeader header{};
  std::memcpy(header.magic, kTokenFileMagic, sizeof kTokenFileMagic);
  header.version = kTokenFileVersion;
  header.token_bytes = token_bytes_for(vocab_size);
  header.count = count;
  header.vocab_size = static_cast<uint64_t>(vocab_size);
  header.tokenizer_crc = tokenizer_crc;
  header.data_crc = data_crc;
  header.layout = static_cast<uint32_t>(layout);
  return header;
}

void write_token_file(const std::filesystem::path& path, const std::vector<int32_t>& tokens, int64_t vocab_size,
                      uint32_t tokenizer_crc, TokenLayout layout) {
  const uint32_t width = token_bytes_for(vocab_size);
  std::string data(tokens.size() * width, '\0');
  for (size_t i = 0; i < tokens.size(); ++i) {
    LOOM_CHECK(tokens[i] >= 0 && tokens[i] < vocab_size, "token id ", tokens[i], " outside vocabulary of ", vocab_size);
    const uint32_t v = static_cast<uint32_t>(tokens[i]);
    std::memcpy(&data[i * width], &v, width);  // little-endian host
  }
  const TokenFileHeader header =
      make_token_file_header(tokens.size(), vocab_size, tokenizer_crc, crc32(data.data(), data.size()), layout);
  std::string bytes(reinterpret_cast<const char*>(&header), sizeof header);
  write_file_atomic(path, bytes + data);
}

}  // namespace loom
