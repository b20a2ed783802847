#include "core/atomic_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/file_io.h"

namespace loom {
namespace {

constexpr size_t kBufferBytes = 1 << 20;

std::string reason(int error) {
  std::string text = std::strerror(error);
  if (error == ENOSPC || error == EDQUOT) text += " (the disk is full: free space or write elsewhere)";
  if (error == EFBIG) text += " (the file-size limit, ulimit -f, or the file system's largest file)";
  return text;
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(std::filesystem::path path) : path_(std::move(path)), tmp_(path_.string() + ".tmp") {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error("cannot create " + tmp_.string() + ": " + reason(errno));
  buffer_.reserve(kBufferBytes);
}

AtomicFileWriter::~AtomicFileWriter() { abandon(); }

void AtomicFileWriter::abandon() {
  if (fd_ < 0) return;
  ::close(fd_);
  fd_ = -1;
  std::error_code ignored;
  std::filesystem::remove(tmp_, ignored);
}

void AtomicFileWriter::fail(const std::string& what) {
  abandon();
  throw Error(what);
}

void AtomicFileWriter::append(const void* data, size_t size) {
  LOOM_CHECK(fd_ >= 0, path_.string(), ": written after commit or failure");
  const auto* bytes = static_cast<const char*>(data);
  size_ += size;
  if (buffer_.size() + size > kBufferBytes) flush_buffer();
  if (size >= kBufferBytes)
    write_all(bytes, size);  // large pieces (a whole checkpoint) go straight from the caller's memory
  else
    buffer_.append(bytes, size);
}

void AtomicFileWriter::write_all(const char* bytes, size_t size) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd_, bytes + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("cannot write " + tmp_.string() + ": " + reason(errno));
    done += static_cast<size_t>(n);
  }
}

void AtomicFileWriter::flush_buffer() {
  write_all(buffer_.data(), buffer_.size());
  buffer_.clear();
}

void AtomicFileWriter::write_at(uint64_t offset, const void* data, size_t size) {
  LOOM_CHECK(fd_ >= 0 && offset + size <= size_, path_.string(), ": write_at outside what was written");
  flush_buffer();
  const auto* bytes = static_cast<const char*>(data);
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pwrite(fd_, bytes + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("cannot write " + tmp_.string() + ": " + reason(errno));
    done += static_cast<size_t>(n);
  }
}

void AtomicFileWriter::commit() {
  LOOM_CHECK(fd_ >= 0, path_.string(), ": committed twice or after a failure");
  flush_buffer();
  if (::fsync(fd_) != 0) fail("cannot fsync " + tmp_.string() + ": " + reason(errno));
  if (::close(fd_) != 0) {  // NFS and friends report a failed write only here
    fd_ = -1;
    std::error_code ignored;
    std::filesystem::remove(tmp_, ignored);
    throw Error("cannot write " + tmp_.string() + ": " + reason(errno));
  }
  fd_ = -1;
  std::filesystem::rename(tmp_, path_);
  fsync_path(path_.parent_path().empty() ? "." : path_.parent_path());
}

}  // namespace loom
