// The decompressed bytes of one corpus file, read in pieces: plain, gzip (zlib; concatenated members
// too) or zstd (libzstd; concatenated frames too). Memory is a fixed buffer whatever the file's size.
// Also counts and checksums the file's own (compressed) bytes as they are read: the progress bar's
// position and the manifest's checksum come from the same single pass. Damaged data (a corrupt or
// truncated stream) and read errors throw loom::Error naming the file.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "data/prepare/prepare_inputs.h"

namespace loom {

class InputStream {
 public:
  static std::unique_ptr<InputStream> open(const InputFile& input);
  virtual ~InputStream();

  // Up to `capacity` bytes of text into `out`; 0 only at the end of the file.
  virtual size_t read(char* out, size_t capacity) = 0;

  uint64_t file_bytes_read() const { return file_bytes_read_; }
  uint32_t file_crc() const { return file_crc_; }  // CRC-32 of the file's bytes read so far
  const std::string& name() const { return name_; }

 protected:
  explicit InputStream(const std::string& name);
  // The next piece of the file itself; 0 at its end.
  size_t read_file(char* out, size_t capacity);
  [[noreturn]] void fail(const std::string& why) const;

 private:
  std::string name_;
  int fd_ = -1;
  uint64_t file_bytes_read_ = 0;
  uint32_t file_crc_ = 0;
};

}  // namespace loom
