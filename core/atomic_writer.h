// A file written in pieces that appears under its name only once complete: the bytes go to NAME.tmp,
// commit() fsyncs it, renames it over NAME and fsyncs the directory. A writer destroyed (or abandon()ed)
// before commit() removes NAME.tmp, so an interrupted or failed write leaves no file under NAME; a killed
// process may leave NAME.tmp, which no reader takes for the real file. write_file_atomic (core/file_io.h)
// is this writer for bytes already in memory (checkpoints, manifests).
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>

namespace loom {

class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::filesystem::path path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  // Appends bytes (buffered). A failed write (full disk, file-size limit) throws loom::Error naming the
  // file and the reason, after removing NAME.tmp.
  void append(const void* data, size_t size);
  // Overwrites bytes already written at `offset` (a header filled in at the end).
  void write_at(uint64_t offset, const void* data, size_t size);
  void commit();
  void abandon();

  uint64_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  void write_all(const char* bytes, size_t size);
  void flush_buffer();
  [[noreturn]] void fail(const std::string& what);

  std::filesystem::path path_, tmp_;
  int fd_ = -1;
  std::string buffer_;
  uint64_t size_ = 0;
};

}  // namespace loom
