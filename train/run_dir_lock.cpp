#include "train/run_dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>

#include "core/error.h"

namespace loom {
namespace {

constexpr int64_t kLockMessageBytes = 1024;  // what rank 0 tells the others: empty when the lock is taken

std::string now_utc() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

std::string host_name() {
  char name[256] = {};
  return gethostname(name, sizeof name - 1) == 0 ? name : "an unknown host";
}

std::string holder_of(int fd) {
  char text[256] = {};
  const ssize_t n = pread(fd, text, sizeof text - 1, 0);
  std::string holder = n > 0 ? std::string(text, static_cast<size_t>(n)) : "";
  while (!holder.empty() && (holder.back() == '\n' || holder.back() == '\0')) holder.pop_back();
  return holder.empty() ? "another loom process" : holder;
}

// Rank 0's part: "" once the lock is held (fd set), else why not.
std::string take_lock(const std::filesystem::path& run_dir, int& fd) {
  if (std::filesystem::exists(run_dir) && !std::filesystem::is_directory(run_dir))
    return "run.dir " + run_dir.string() + " is a file, not a directory: set run.dir to a new or existing run directory";
  std::error_code error;
  std::filesystem::create_directories(run_dir, error);
  if (error) return "run.dir " + run_dir.string() + ": cannot create it: " + error.message();
  const auto path = run_dir / ".lock";
  fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return "run.dir " + run_dir.string() + ": cannot open " + path.string() + ": " + std::strerror(errno);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const std::string why = errno == EWOULDBLOCK
                                ? "run.dir " + run_dir.string() + " is in use by " + holder_of(fd) +
                                      ": wait for it to finish or stop it, or train into another run.dir"
                                : "run.dir " + run_dir.string() + ": cannot lock " + path.string() + ": " + std::strerror(errno);
    ::close(fd);
    fd = -1;
    return why;
  }
  const std::string holder = "loom pid " + std::to_string(::getpid()) + " on host " + host_name() + " since " + now_utc() + "\n";
  // The lock holds either way; a failed write only leaves the next trainer's message without the holder.
  if (::ftruncate(fd, 0) == 0) (void)!::pwrite(fd, holder.data(), holder.size(), 0);
  return "";
}

}  // namespace

RunDirLock::RunDirLock(const std::filesystem::path& run_dir, Communicator& world) {
  auto message = torch::zeros({kLockMessageBytes}, torch::kByte);
  if (world.rank() == 0) {
    const std::string why = take_lock(run_dir, fd_).substr(0, kLockMessageBytes - 1);
    std::memcpy(message.data_ptr(), why.data(), why.size());
  }
  world.broadcast(message, 0);
  const std::string why(static_cast<const char*>(message.data_ptr()));
  if (!why.empty()) throw ConfigError(why);
}

RunDirLock::~RunDirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

}  // namespace loom
