// DirLock (see dir_lock.h): flock on a lock file whose lines name its holders.
#include "runtime/dir_lock.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

namespace strata {
namespace {

constexpr size_t kMaxCommandChars = 400;  // a holder's command line as written into the file
constexpr int kAcquireAttempts = 100;     // a lock file replaced under us is opened again

// This process's command line, arguments joined by spaces (no newlines: one holder per line).
std::string own_command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!all.empty() && all.back() == '\0') all.pop_back();
  std::replace(all.begin(), all.end(), '\0', ' ');
  std::replace(all.begin(), all.end(), '\n', ' ');
  if (all.size() > kMaxCommandChars) all = all.substr(0, kMaxCommandChars) + "...";
  return all.empty() ? std::string("?") : all;
}

bool process_alive(int64_t pid) { return pid > 0 && (::kill(pid_t(pid), 0) == 0 || errno == EPERM); }

// The open file `fd` is still the one named `path` (not unlinked or replaced by its last holder).
bool still_named(int fd, const std::string& path) {
  struct stat open_st {}, named_st {};
  return ::fstat(fd, &open_st) == 0 && ::stat(path.c_str(), &named_st) == 0 && open_st.st_dev == named_st.st_dev &&
         open_st.st_ino == named_st.st_ino;
}

}  // namespace

std::string describe_lock_holder(const LockHolder& h) {
  const time_t started = time_t(h.started);
  tm local{};
  char when[32] = "?";
  if (::localtime_r(&started, &local) != nullptr) std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &local);
  return fmt::format("pid {} ({}), started {}", h.pid, h.command, when);
}

std::vector<LockHolder> lock_holders(const std::string& path) {
  std::ifstream in(path);
  std::vector<LockHolder> out;
  for (std::string line; std::getline(in, line);) {
    // "pid <pid> started <seconds> mode <exclusive|shared> command <the rest>"
    std::istringstream fields(line);
    std::string k1, k2, k3, k4, mode;
    LockHolder h;
    if (!(fields >> k1 >> h.pid >> k2 >> h.started >> k3 >> mode >> k4) || k1 != "pid" || k2 != "started" ||
        k3 != "mode" || k4 != "command")
      continue;
    std::getline(fields >> std::ws, h.command);
    h.exclusive = mode == "exclusive";
    if (process_alive(h.pid)) out.push_back(std::move(h));
  }
  return out;
}

StatusOr<DirLock> DirLock::acquire(const std::string& dir, std::string_view name, LockMode mode) {
  const std::string path = dir + "/" + std::string(name);
  const bool exclusive = mode == LockMode::exclusive;
  for (int attempt = 0; attempt < kAcquireAttempts; ++attempt) {
    int fd = ::open(path.c_str(), O_RDWR | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 && !exclusive && (errno == EACCES || errno == EROFS))  // a reader of a directory it cannot write
      fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return errno_status(errno, fmt::format("opening the lock file {}", path));
    if (::flock(fd, (exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB) != 0) {
      const int err = errno;
      ::close(fd);
      if (err == ENOLCK || err == EOPNOTSUPP || err == ENOSYS)
        return error(Code::failed_precondition, "{}: this filesystem does not support flock ({})", path,
                     std::strerror(err));
      if (err != EWOULDBLOCK) return errno_status(err, fmt::format("locking {}", path));
      std::vector<std::string> who;
      for (const LockHolder& h : lock_holders(path))
        who.push_back(fmt::format("{} ({})", describe_lock_holder(h), h.exclusive ? "writing" : "reading"));
      if (who.empty()) who.push_back("a process that has not written its name yet");
      return error(Code::unavailable, "{} is held by {}", path, fmt::join(who, "; "));
    }
    if (!still_named(fd, path)) {  // its holder removed it as we opened it: open the new one
      ::close(fd);
      continue;
    }
    const std::string line = fmt::format("pid {} started {} mode {} command {}\n", ::getpid(),
                                         int64_t(std::time(nullptr)), exclusive ? "exclusive" : "shared",
                                         own_command_line());
    // The holder's line; an exclusive holder's replaces the lines of holders that are gone. The
    // file only names holders for messages: a failed write leaves the lock held all the same.
    if ((exclusive && ::ftruncate(fd, 0) != 0) || ::write(fd, line.data(), line.size()) != ssize_t(line.size()))
      spdlog::debug("could not write this process into the lock file {}: errno {}", path, errno);
    return DirLock(path, fd, mode);
  }
  return error(Code::unavailable, "{} kept being replaced while this process tried to lock it; try again", path);
}

DirLock::DirLock(DirLock&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)), mode_(other.mode_) {}

DirLock& DirLock::operator=(DirLock&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    mode_ = other.mode_;
  }
  return *this;
}

DirLock::~DirLock() { release(); }

void DirLock::release() {
  if (fd_ < 0) return;
  // A shared holder removes the file only when nobody else holds it (it can take it exclusively).
  const bool sole = mode_ == LockMode::exclusive || ::flock(fd_, LOCK_EX | LOCK_NB) == 0;
  if (sole && still_named(fd_, path_)) ::unlink(path_.c_str());
  ::close(fd_);
  fd_ = -1;
}

}  // namespace strata
