#include "data/corpus/document_index.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/file_io.h"

namespace loom {
namespace {
constexpr char kIndexMagic[8] = {'L', 'O', 'O', 'M', 'D', 'O', 'C', '\0'};
constexpr uint32_t kIndexVersion = 1;
}  // namespace

DocumentIndexWriter::DocumentIndexWriter(const std::filesystem::path& path) : file_(path) {
  const DocumentIndexHeader blank{};  // filled in by finish()
  file_.append(&blank, sizeof blank);
}

void DocumentIndexWriter::add(uint64_t offset) {
  file_.append(&offset, sizeof offset);  // little-endian host
  crc_ = crc32(&offset, sizeof offset, crc_);
  ++documents_;
}

void DocumentIndexWriter::finish(uint64_t tokens, uint32_t shard_data_crc) {
  DocumentIndexHeader header{};
  std::memcpy(header.magic, kIndexMagic, sizeof kIndexMagic);
  header.version = kIndexVersion;
  header.documents = documents_;
  header.tokens = tokens;
  header.shard_data_crc = shard_data_crc;
  header.offsets_crc = crc_;
  file_.write_at(0, &header, sizeof header);
  file_.commit();
}

DocumentIndex::DocumentIndex(const std::filesystem::path& path, const TokenFile& shard) {
  const std::string name = path.string();
  const std::string bytes = read_file(path);
  auto fail = [&](const std::string& why) { throw Error(name + ": " + why + ": re-run loom prepare"); };
  if (bytes.size() < sizeof(DocumentIndexHeader)) fail("not a loom document index (too short)");
  DocumentIndexHeader header{};
  std::memcpy(&header, bytes.data(), sizeof header);
  if (std::memcmp(header.magic, kIndexMagic, sizeof kIndexMagic) != 0) fail("not a loom document index (bad magic)");
  if (header.version != kIndexVersion) fail("document index version " + std::to_string(header.version) + ", not " +
                                       std::to_string(kIndexVersion));
  // Reserved bytes are zero (a later version that uses them bumps `version`): anything else is damage.
  const auto* reserved = reinterpret_cast<const unsigned char*>(header.reserved);
  if (header.reserved0 != 0 || std::any_of(reserved, reserved + sizeof header.reserved, [](unsigned char b) { return b; }))
    fail("corrupt: reserved header bytes are not zero");
  const size_t body = bytes.size() - sizeof header;
  // Compared in entries, not bytes: a damaged count times 8 could wrap around to the file size.
  if (body % 8 != 0 || header.documents != body / 8)
    fail("truncated or padded: the header promises " + std::to_string(header.documents) + " documents");
  const char* data = bytes.data() + sizeof header;
  if (crc32(data, body) != header.offsets_crc) fail("corrupt: offsets checksum mismatch");
  if (header.tokens != static_cast<uint64_t>(shard.size()) || header.shard_data_crc != shard.data_crc())
    fail("indexes another shard than " + shard.path().string());
  offsets_.resize(header.documents);
  std::memcpy(offsets_.data(), data, body);
  tokens_ = header.tokens;
  for (size_t i = 0; i < offsets_.size(); ++i) {
    const bool increasing = i == 0 ? offsets_[0] == 0 : offsets_[i] > offsets_[i - 1];
    if (!increasing || offsets_[i] >= tokens_)
      fail("corrupt: document " + std::to_string(i) + " starts at token " + std::to_string(offsets_[i]));
  }
  if (offsets_.empty() && tokens_ > 0) fail("corrupt: no documents in a shard of " + std::to_string(tokens_) + " tokens");
}

int64_t DocumentIndex::length(int64_t document) const {
  const auto i = static_cast<size_t>(document);
  const uint64_t end = i + 1 < offsets_.size() ? offsets_.at(i + 1) : tokens_;
  return static_cast<int64_t>(end - offsets_.at(i));
}

}  // namespace loom
