#include "data/corpus/loss_mask.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace loom {
namespace {
constexpr char kMaskMagic[8] = {'L', 'O', 'O', 'M', 'M', 'S', 'K', '\0'};
constexpr uint32_t kMaskVersion = 1;
}  // namespace

LossMaskWriter::LossMaskWriter(const std::filesystem::path& path) : file_(path) {
  const LossMaskHeader blank{};  // filled in by finish()
  file_.append(&blank, sizeof blank);
}

void LossMaskWriter::add(const uint8_t* mask, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    LOOM_CHECK(mask[i] <= 1, "a loss mask byte is 0 or 1, not ", int(mask[i]));
    counted_ += mask[i];
  }
  file_.append(mask, count);
  crc_ = crc32(mask, count, crc_);
  tokens_ += count;
}

void LossMaskWriter::finish(uint64_t tokens, uint32_t shard_data_crc) {
  LOOM_CHECK(tokens == tokens_, "loss mask of ", tokens_, " bytes for a shard of ", tokens, " tokens");
  LossMaskHeader header{};
  std::memcpy(header.magic, kMaskMagic, sizeof kMaskMagic);
  header.version = kMaskVersion;
  header.tokens = tokens;
  header.counted = counted_;
  header.shard_data_crc = shard_data_crc;
  header.mask_crc = crc_;
  file_.write_at(0, &header, sizeof header);
  file_.commit();
}

LossMask::LossMask(const std::filesystem::path& path, const TokenFile& shard) : path_(path) {
  const std::string name = path.string();
  auto fail = [&](const std::string& why) { throw Error(name + ": " + why + ": re-run loom prepare --sft"); };
  if (!std::filesystem::is_regular_file(path)) fail("the shard's loss mask is missing");
  file_ = std::make_unique<MappedFile>(path);
  if (file_->size() < sizeof(LossMaskHeader)) fail("not a loom loss mask (too short)");
  LossMaskHeader header{};
  std::memcpy(&header, file_->data(), sizeof header);
  if (std::memcmp(header.magic, kMaskMagic, sizeof kMaskMagic) != 0) fail("not a loom loss mask (bad magic)");
  if (header.version != kMaskVersion)
    fail("loss mask version " + std::to_string(header.version) + ", not " + std::to_string(kMaskVersion));
  const auto* reserved = header.reserved;
  if (header.reserved0 != 0 || std::any_of(reserved, reserved + sizeof header.reserved, [](uint8_t b) { return b; }))
    fail("corrupt: reserved header bytes are not zero");
  const size_t body = file_->size() - sizeof header;
  if (header.tokens != body) fail("truncated or padded: the header promises " + std::to_string(header.tokens) + " tokens");
  bytes_ = reinterpret_cast<const uint8_t*>(file_->data()) + sizeof header;
  if (crc32(bytes_, body) != header.mask_crc) fail("corrupt: mask checksum mismatch");
  if (header.tokens != static_cast<uint64_t>(shard.size()) || header.shard_data_crc != shard.data_crc())
    fail("masks another shard than " + shard.path().string());
  uint64_t counted = 0;
  for (size_t i = 0; i < body; ++i) {
    if (bytes_[i] > 1) fail("corrupt: byte " + std::to_string(i) + " is " + std::to_string(bytes_[i]) + ", not 0 or 1");
    counted += bytes_[i];
  }
  if (counted != header.counted) fail("corrupt: the header counts " + std::to_string(header.counted) + " targets");
  tokens_ = header.tokens;
  counted_ = counted;
}

torch::Tensor LossMask::slice(int64_t start, int64_t length) const {
  TORCH_CHECK(start >= 0 && length >= 0 && static_cast<uint64_t>(start + length) <= tokens_, "loss mask slice [", start,
              ", ", start + length, ") outside ", path_.string());
  auto out = torch::empty({length}, torch::kBool);
  std::memcpy(out.data_ptr<bool>(), bytes_ + start, static_cast<size_t>(length));
  return out;
}

}  // namespace loom
