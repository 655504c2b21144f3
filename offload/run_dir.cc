// RunDir and stale-run cleanup (see run_dir.h).
#include "offload/run_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>

#include <spdlog/spdlog.h>

#include "runtime/units.h"

namespace strata {
namespace {

constexpr int64_t kStartingGraceSeconds = 60;

bool is_run_file(std::string_view name) {
  return name == "lock" || (name.starts_with("swap") && name.ends_with(".bin"));
}

// Files of a run directory: (name, allocated bytes). Errors name the directory.
StatusOr<std::vector<std::pair<std::string, uint64_t>>> list_dir(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return errno_status(errno, "list " + dir);
  std::vector<std::pair<std::string, uint64_t>> out;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    struct stat st {};
    uint64_t bytes = ::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 ? st.st_blocks * 512ull : 0;
    out.emplace_back(name, bytes);
  }
  ::closedir(d);
  return out;
}

}  // namespace

RunDirState run_dir_state(const std::string& dir) {
  const int fd = ::open((dir + "/lock").c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0) return RunDirState::starting;  // gone meanwhile: nothing to remove
    return std::time(nullptr) - st.st_mtime > kStartingGraceSeconds ? RunDirState::stale : RunDirState::starting;
  }
  RunDirState state = ::flock(fd, LOCK_EX | LOCK_NB) == 0 ? RunDirState::stale : RunDirState::live;
  if (state == RunDirState::stale) {  // an empty lock file younger than the grace period: its run may be starting
    struct stat st {};
    if (::fstat(fd, &st) == 0 && st.st_size == 0 && std::time(nullptr) - st.st_mtime <= kStartingGraceSeconds)
      state = RunDirState::starting;
  }
  ::close(fd);
  return state;
}

StatusOr<std::unique_ptr<RunDir>> RunDir::create(const std::string& parent) {
  static std::atomic<uint32_t> counter{0};
  std::string path;
  for (int attempt = 0;; attempt++) {
    path = fmt::format("{}/{}{}-{}", parent, kRunDirPrefix, ::getpid(), counter++);
    if (::mkdir(path.c_str(), 0700) == 0) break;
    if (errno != EEXIST || attempt > 1000)
      return errno_status(errno, "create the run directory " + path).with_context("NVMe store");
  }
  int fd = ::open((path + "/lock").c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0 || ::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    Status s = errno_status(errno, "create and lock " + path + "/lock");
    if (fd >= 0) ::close(fd);
    ::unlink((path + "/lock").c_str());
    ::rmdir(path.c_str());
    return s;
  }
  std::string note = fmt::format("pid {}\nstarted {}\n", ::getpid(), static_cast<int64_t>(std::time(nullptr)));
  if (::write(fd, note.data(), note.size()) < 0) spdlog::debug("could not write {}/lock: errno {}", path, errno);
  return std::unique_ptr<RunDir>(new RunDir(path, fd));
}

RunDir::~RunDir() {
  auto files = list_dir(path_);
  if (files.is_ok()) {
    for (const auto& [name, bytes] : *files)
      if (is_run_file(name) && name != "lock") ::unlink(file(name).c_str());
  }
  ::unlink(file("lock").c_str());
  if (lock_fd_ >= 0) ::close(lock_fd_);
  if (::rmdir(path_.c_str()) != 0 && errno != ENOENT)
    spdlog::warn("could not remove the run directory {}: {} (remove it by hand)", path_, std::strerror(errno));
}

StatusOr<std::vector<StaleRun>> find_stale_runs(const std::string& parent) {
  STRATA_ASSIGN_OR_RETURN(auto entries, list_dir(parent));
  std::vector<StaleRun> out;
  for (const auto& [name, unused] : entries) {
    if (!std::string_view(name).starts_with(kRunDirPrefix)) continue;
    std::string dir = parent + "/" + name;
    struct stat st {};
    if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || run_dir_state(dir) != RunDirState::stale) continue;
    StaleRun run{dir, 0};
    if (auto files = list_dir(dir); files.is_ok())
      for (const auto& [f, bytes] : *files) run.bytes += bytes;
    out.push_back(std::move(run));
  }
  return out;
}

StatusOr<std::vector<StaleRun>> remove_stale_runs(const std::string& parent) {
  STRATA_ASSIGN_OR_RETURN(auto stale, find_stale_runs(parent));
  std::vector<StaleRun> removed;
  for (StaleRun& run : stale) {
    STRATA_ASSIGN_OR_RETURN(auto files, list_dir(run.path));
    bool foreign = false;
    for (const auto& [name, bytes] : files) {
      if (!is_run_file(name)) {
        foreign = true;
        continue;
      }
      ::unlink((run.path + "/" + name).c_str());
    }
    if (foreign || ::rmdir(run.path.c_str()) != 0) {
      spdlog::warn("left {} in place: it holds files strata did not create; remove it by hand", run.path);
      continue;
    }
    spdlog::info("removed {} left by a run that did not exit cleanly ({} freed)", run.path, format_size(run.bytes));
    removed.push_back(std::move(run));
  }
  return removed;
}

}  // namespace strata
