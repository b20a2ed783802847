#include "core/file_io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/atomic_writer.h"
#include "core/error.h"

namespace loom {
namespace {

std::string os_error(const std::string& what, const std::filesystem::path& path) {
  return what + " " + path.string() + ": " + std::strerror(errno);
}

}  // namespace

uint32_t crc32(const void* data, size_t size, uint32_t crc) {
  return static_cast<uint32_t>(::crc32_z(crc, static_cast<const Bytef*>(data), size));
}

uint32_t crc32_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  LOOM_CHECK(in, "cannot open ", path.string());
  std::array<char, 1 << 16> buffer{};
  uint32_t crc = 0;
  while (in) {
    in.read(buffer.data(), buffer.size());
    crc = crc32(buffer.data(), static_cast<size_t>(in.gcount()), crc);
  }
  return crc;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  LOOM_CHECK(in, "cannot open ", path.string());
  std::stringstream out;
  out << in.rdbuf();
  return out.str();
}

MappedFile::MappedFile(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw Error(os_error("cannot open", path));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const std::string why = os_error("cannot stat", path);
    ::close(fd);
    throw Error(why);
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) map_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  const std::string why = map_ == MAP_FAILED ? os_error("cannot map", path) : "";
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw Error(why);
  }
}

MappedFile::~MappedFile() {
  if (map_ != nullptr) ::munmap(map_, size_);
}

void fsync_path(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  LOOM_CHECK(fd >= 0, os_error("cannot open", path));
  const int rc = ::fsync(fd);
  ::close(fd);
  LOOM_CHECK(rc == 0, os_error("cannot fsync", path));
}

void write_file_atomic(const std::filesystem::path& path, const std::string& bytes) {
  AtomicFileWriter file(path);
  file.append(bytes.data(), bytes.size());
  file.commit();
}

}  // namespace loom
