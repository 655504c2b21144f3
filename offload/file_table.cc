// FileTable implementation (see file_table.h).
#include "offload/file_table.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "runtime/log.h"

namespace strata {

FileTable::~FileTable() {
  for (const OpenFile& f : slots_)
    if (f.fd >= 0) ::close(f.fd);
}

StatusOr<FileId> FileTable::open(const std::string& path, const OpenOptions& options) {
  int flags = O_CLOEXEC | O_NOFOLLOW | (options.writable ? O_RDWR : O_RDONLY);
  if (options.create) flags |= O_CREAT | O_EXCL;
  bool direct = options.direct;
  int fd = ::open(path.c_str(), flags | (direct ? O_DIRECT : 0), 0600);
  if (fd < 0 && errno == EINVAL && direct && buffered_fallback_) {
    warn_once("o_direct:" + path, fmt::format("{} does not accept O_DIRECT (a filesystem such as tmpfs); using "
                                              "buffered I/O for it, which goes through the page cache", path));
    direct = false;
    fd = ::open(path.c_str(), flags, 0600);
  }
  if (fd < 0) {
    int err = errno;
    std::string what = fmt::format("open {}{}", path, direct ? " with O_DIRECT" : "");
    if (err == ELOOP) what += " (it is a symbolic link, which strata refuses to follow)";
    if (err == EINVAL && direct) what += " (this filesystem has no direct I/O; use io_engine=posix or a path on a disk)";
    return errno_status(err, what);
  }
  MutexLock lock(mu_);
  size_t slot = 0;
  while (slot < slots_.size() && slots_[slot].fd >= 0) slot++;
  if (slot == slots_.size()) slots_.emplace_back();
  slots_[slot] = OpenFile{fd, path, direct};
  return static_cast<FileId>(slot);
}

StatusOr<int> FileTable::take(FileId file) {
  MutexLock lock(mu_);
  if (file >= slots_.size() || slots_[file].fd < 0)
    return error(Code::invalid_argument, "file id {} is not open", file);
  int fd = slots_[file].fd;
  slots_[file] = OpenFile{};
  return fd;
}

Status FileTable::close(FileId file) {
  std::string p = path(file);
  STRATA_ASSIGN_OR_RETURN(int fd, take(file));
  if (::close(fd) != 0) return errno_status(errno, "close " + p);
  return Status();
}

StatusOr<OpenFile> FileTable::get(FileId file) const {
  MutexLock lock(mu_);
  if (file >= slots_.size() || slots_[file].fd < 0)
    return error(Code::invalid_argument, "file id {} is not open", file);
  return slots_[file];
}

Status FileTable::allocate(FileId file, uint64_t offset, uint64_t length) const {
  STRATA_ASSIGN_OR_RETURN(OpenFile f, get(file));
  if (length == 0) return Status();
  int rc = ::fallocate(f.fd, 0, static_cast<off_t>(offset), static_cast<off_t>(length));
  int err = rc != 0 ? errno : 0;
  if (err == EOPNOTSUPP)  // no fallocate here: glibc reserves by writing zeros
    err = ::posix_fallocate(f.fd, static_cast<off_t>(offset), static_cast<off_t>(length));
  if (err != 0) {
    return errno_status(err, fmt::format("reserve {} bytes at offset {} of {}", length, offset, f.path));
  }
  return Status();
}

StatusOr<uint64_t> FileTable::size(FileId file) const {
  STRATA_ASSIGN_OR_RETURN(OpenFile f, get(file));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) return errno_status(errno, "stat " + f.path);
  return static_cast<uint64_t>(st.st_size);
}

bool FileTable::is_direct(FileId file) const {
  auto f = get(file);
  return f.is_ok() && f->direct;
}

std::string FileTable::path(FileId file) const {
  auto f = get(file);
  return f.is_ok() ? f->path : fmt::format("<file id {}>", file);
}

}  // namespace strata
