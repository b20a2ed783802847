#include "data/prepare/input_stream.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/file_io.h"

namespace loom {
namespace {

constexpr size_t kFileChunk = 1 << 20;

class PlainStream : public InputStream {
 public:
  explicit PlainStream(const std::string& name) : InputStream(name) {}
  size_t read(char* out, size_t capacity) override { return read_file(out, capacity); }
};

// zlib with automatic gzip/zlib header detection; a new member may start where one ends.
class GzipStream : public InputStream {
 public:
  explicit GzipStream(const std::string& name) : InputStream(name), in_(kFileChunk) {
    if (inflateInit2(&z_, 15 + 32) != Z_OK) fail("cannot start zlib");
  }
  ~GzipStream() override { inflateEnd(&z_); }

  size_t read(char* out, size_t capacity) override {
    z_.next_out = reinterpret_cast<Bytef*>(out);
    z_.avail_out = static_cast<uInt>(capacity);
    while (z_.avail_out == capacity) {
      if (z_.avail_in == 0 && !pending_) {
        const size_t n = read_file(in_.data(), in_.size());
        if (n == 0) {
          if (in_member_) fail("truncated gzip data (the file ends inside a compressed stream)");
          break;
        }
        z_.next_in = reinterpret_cast<Bytef*>(in_.data());
        z_.avail_in = static_cast<uInt>(n);
      }
      if (!in_member_) {
        inflateReset(&z_);
        in_member_ = true;
      }
      const int rc = inflate(&z_, Z_NO_FLUSH);
      pending_ = false;
      if (rc == Z_STREAM_END) {
        in_member_ = false;
      } else if (rc == Z_OK || rc == Z_BUF_ERROR) {
        pending_ = z_.avail_out == 0;  // a full output may leave decoded bytes inside zlib
      } else {
        fail(std::string("corrupt gzip data: ") + (z_.msg ? z_.msg : "zlib error " + std::to_string(rc)));
      }
    }
    return capacity - z_.avail_out;
  }

 private:
  z_stream z_{};
  std::vector<char> in_;
  bool in_member_ = false;  // inside a gzip member whose end has not been read
  bool pending_ = false;    // the last call filled the output: inflate again before reading more
};

class ZstdStream : public InputStream {
 public:
  explicit ZstdStream(const std::string& name) : InputStream(name), in_(ZSTD_DStreamInSize()) {
    stream_ = ZSTD_createDStream();
    if (!stream_) fail("cannot start zstd");
  }
  ~ZstdStream() override { ZSTD_freeDStream(stream_); }

  size_t read(char* out, size_t capacity) override {
    ZSTD_outBuffer output{out, capacity, 0};
    while (output.pos == 0) {
      if (input_.pos == input_.size && !pending_) {
        const size_t n = read_file(in_.data(), in_.size());
        if (n == 0) {
          if (in_frame_) fail("truncated zstd data (the file ends inside a compressed frame)");
          break;
        }
        input_ = {in_.data(), n, 0};
      }
      const size_t rc = ZSTD_decompressStream(stream_, &output, &input_);
      if (ZSTD_isError(rc)) fail(std::string("corrupt zstd data: ") + ZSTD_getErrorName(rc));
      in_frame_ = rc != 0;
      pending_ = in_frame_ && output.pos == output.size;  // a full output may leave decoded bytes inside zstd
    }
    return output.pos;
  }

 private:
  ZSTD_DStream* stream_ = nullptr;
  std::vector<char> in_;
  ZSTD_inBuffer input_{nullptr, 0, 0};
  bool in_frame_ = false;
  bool pending_ = false;
};

}  // namespace

InputStream::InputStream(const std::string& name) : name_(name) {
  fd_ = ::open(name.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) fail(std::string("cannot open: ") + std::strerror(errno));
}

InputStream::~InputStream() {
  if (fd_ >= 0) ::close(fd_);
}

void InputStream::fail(const std::string& why) const { throw Error(name_ + ": " + why); }

size_t InputStream::read_file(char* out, size_t capacity) {
  for (;;) {
    const ssize_t n = ::read(fd_, out, capacity);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(std::string("cannot read: ") + std::strerror(errno));
    file_bytes_read_ += static_cast<uint64_t>(n);
    file_crc_ = crc32(out, static_cast<size_t>(n), file_crc_);
    return static_cast<size_t>(n);
  }
}

std::unique_ptr<InputStream> InputStream::open(const InputFile& input) {
  const std::string name = input.path.string();
  switch (input.compression) {
    case Compression::kGzip: return std::make_unique<GzipStream>(name);
    case Compression::kZstd: return std::make_unique<ZstdStream>(name);
    case Compression::kNone: break;
  }
  return std::make_unique<PlainStream>(name);
}

}  // namespace loom
