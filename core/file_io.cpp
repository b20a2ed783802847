#include "core/file_io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace loom {
namespace {

std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
  return table;
}

std::string os_error(const std::string& what, const std::filesystem::path& path) {
  return what + " " + path.string() + ": " + std::strerror(errno);
}

}  // namespace

uint32_t crc32(const void* data, size_t size, uint32_t crc) {
  static const auto table = make_crc_table();
  const auto* bytes = static_cast<const uint8_t*>(data);
  crc = ~crc;
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ bytes[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
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
  const auto tmp = path.string() + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  LOOM_CHECK(fd >= 0, os_error("cannot create", tmp));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string message = os_error("cannot write", tmp);
      ::close(fd);
      std::filesystem::remove(tmp);
      throw Error(message);
    }
    done += static_cast<size_t>(n);
  }
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  if (!synced) {
    std::filesystem::remove(tmp);
    throw Error(os_error("cannot fsync", tmp));
  }
  std::filesystem::rename(tmp, path);
  fsync_path(path.parent_path().empty() ? "." : path.parent_path());
}

}  // namespace loom
