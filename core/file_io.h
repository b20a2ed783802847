// Durable file I/O: CRC-32 checksums, whole-file reads, read-only mappings, and writes that are either
// complete or absent (temp file, fsync, rename, fsync of the directory).
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>

namespace loom {

// CRC-32 (zlib's: several GB/s), continued from `crc` over more bytes.
uint32_t crc32(const void* data, size_t size, uint32_t crc = 0);
uint32_t crc32_file(const std::filesystem::path& path);

std::string read_file(const std::filesystem::path& path);

// A whole file mapped read-only (MAP_PRIVATE) for as long as the object lives: a reader that validates a
// header can then touch only the bytes it needs, and never holds a second copy of a large file. An empty
// file maps to data() == nullptr, size() == 0. Errors name the file.
class MappedFile {
 public:
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const char* data() const { return static_cast<const char*>(map_); }
  size_t size() const { return size_; }

 private:
  void* map_ = nullptr;
  size_t size_ = 0;
};

// Writes `bytes` to path.tmp, fsyncs, renames over path and fsyncs the directory (core/atomic_writer.h in one
// piece: a failed write throws naming the file and leaves no path.tmp).
void write_file_atomic(const std::filesystem::path& path, const std::string& bytes);

void fsync_path(const std::filesystem::path& path);

}  // namespace loom
