#include "data/prepare/shard_writer.h"

#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "core/file_io.h"
#include "data/corpus/token_file.h"

namespace loom {

ShardWriter::ShardWriter(std::filesystem::path dir, std::string split, int64_t vocab_size, uint32_t tokenizer_crc,
                         int64_t shard_tokens, bool with_loss_mask)
    : dir_(std::move(dir)),
      split_(std::move(split)),
      vocab_size_(vocab_size),
      tokenizer_crc_(tokenizer_crc),
      shard_tokens_(shard_tokens),
      with_loss_mask_(with_loss_mask),
      token_bytes_(token_bytes_for(vocab_size)) {
  LOOM_CHECK(shard_tokens_ > 0, "shard size must be > 0 tokens");
}

ShardWriter::~ShardWriter() = default;  // an unfinished shard's writers remove their temporary files

std::string ShardWriter::shard_name(const std::string& split, size_t number, const char* extension) {
  char name[32];
  std::snprintf(name, sizeof name, "-%05zu.%s", number, extension);
  return split + name;
}

void ShardWriter::open_shard() {
  current_ = ShardInfo{};
  current_.tokens_file = shard_name(split_, shards_.size(), "bin");
  current_.index_file = shard_name(split_, shards_.size(), "idx");
  tokens_ = std::make_unique<AtomicFileWriter>(dir_ / current_.tokens_file);
  const TokenFileHeader blank{};  // the real header once the data's size and CRC are known
  tokens_->append(&blank, sizeof blank);
  index_ = std::make_unique<DocumentIndexWriter>(dir_ / current_.index_file);
  if (with_loss_mask_) {
    current_.mask_file = shard_name(split_, shards_.size(), "mask");
    mask_ = std::make_unique<LossMaskWriter>(dir_ / current_.mask_file);
  }
}

void ShardWriter::close_shard() {
  const TokenFileHeader header = make_token_file_header(static_cast<uint64_t>(current_.tokens), vocab_size_,
                                                        tokenizer_crc_, current_.data_crc);
  tokens_->write_at(0, &header, sizeof header);
  tokens_->commit();
  index_->finish(static_cast<uint64_t>(current_.tokens), current_.data_crc);
  if (mask_) mask_->finish(static_cast<uint64_t>(current_.tokens), current_.data_crc);
  tokens_.reset();
  index_.reset();
  mask_.reset();
  shards_.push_back(current_);
}

void ShardWriter::add_document(const int32_t* tokens, size_t count, const uint8_t* mask) {
  LOOM_CHECK((mask != nullptr) == with_loss_mask_, with_loss_mask_ ? "an SFT shard needs each document's loss mask"
                                                                   : "a loss mask for a shard written without one");
  if (tokens_ && current_.tokens > 0 && current_.tokens + static_cast<int64_t>(count) > shard_tokens_) close_shard();
  if (!tokens_) open_shard();
  packed_.resize(count * token_bytes_);
  for (size_t i = 0; i < count; ++i) {
    LOOM_CHECK(tokens[i] >= 0 && tokens[i] < vocab_size_, "token id ", tokens[i], " outside the vocabulary of ",
               vocab_size_);
    const auto v = static_cast<uint32_t>(tokens[i]);
    std::memcpy(&packed_[i * token_bytes_], &v, token_bytes_);  // little-endian host
  }
  index_->add(static_cast<uint64_t>(current_.tokens));
  if (mask_) {
    mask_->add(mask, count);
    for (size_t i = 0; i < count; ++i) current_.loss_tokens += mask[i];
  }
  tokens_->append(packed_.data(), packed_.size());
  current_.data_crc = crc32(packed_.data(), packed_.size(), current_.data_crc);
  current_.tokens += static_cast<int64_t>(count);
  current_.documents += 1;
}

std::vector<ShardInfo> ShardWriter::finish() {
  if (tokens_) close_shard();
  return shards_;
}

}  // namespace loom
