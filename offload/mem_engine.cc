// MemEngine implementation (see mem_engine.h).
#include "offload/mem_engine.h"

#include <cerrno>
#include <cstring>

#include "offload/posix_engine.h"

namespace strata {

StatusOr<FileId> MemEngine::open(const std::string& path, const OpenOptions& options) {
  MutexLock lock(mu_);
  auto it = files_.find(path);
  if (options.create && it != files_.end()) return errno_status(EEXIST, "open " + path);
  if (!options.create && it == files_.end()) return errno_status(ENOENT, "open " + path);
  if (it == files_.end()) it = files_.emplace(path, std::make_shared<std::vector<std::byte>>()).first;
  FileId id = next_id_++;
  open_[id] = Open{it->second, path, options.direct, options.writable};
  return id;
}

const MemEngine::Open* MemEngine::find_locked(FileId file) const {
  auto it = open_.find(file);
  return it == open_.end() ? nullptr : &it->second;
}

Status MemEngine::close(FileId file) {
  MutexLock lock(mu_);
  if (open_.erase(file) == 0) return error(Code::invalid_argument, "file id {} is not open", file);
  return Status();
}

Status MemEngine::allocate(FileId file, uint64_t offset, uint64_t length) {
  MutexLock lock(mu_);
  const Open* f = find_locked(file);
  if (f == nullptr) return error(Code::invalid_argument, "file id {} is not open", file);
  if (f->bytes->size() < offset + length) f->bytes->resize(offset + length);
  return Status();
}

StatusOr<uint64_t> MemEngine::file_size(FileId file) {
  MutexLock lock(mu_);
  const Open* f = find_locked(file);
  if (f == nullptr) return error(Code::invalid_argument, "file id {} is not open", file);
  return static_cast<uint64_t>(f->bytes->size());
}

bool MemEngine::is_direct(FileId file) const {
  MutexLock lock(mu_);
  const Open* f = find_locked(file);
  return f != nullptr && f->direct;
}

std::string MemEngine::path(FileId file) const {
  MutexLock lock(mu_);
  const Open* f = find_locked(file);
  return f ? f->path : fmt::format("<file id {}>", file);
}

std::vector<std::byte>* MemEngine::contents(const std::string& path) {
  MutexLock lock(mu_);
  auto it = files_.find(path);
  return it == files_.end() ? nullptr : it->second.get();
}

Status MemEngine::remove(const std::string& path) {
  MutexLock lock(mu_);
  auto it = files_.find(path);
  if (it == files_.end()) return errno_status(ENOENT, "remove " + path);
  for (const auto& [id, f] : open_)
    if (f.path == path) return error(Code::failed_precondition, "remove {}: the file is still open", path);
  files_.erase(it);
  return Status();
}

Status MemEngine::transfer(const IoRequest& r) {
  MutexLock lock(mu_);
  const Open* f = find_locked(r.file);
  if (f == nullptr) return error(Code::invalid_argument, "file id {} is not open", r.file);
  std::string where = fmt::format("{} {} at offset {} ({} bytes)", io_op_name(r.op), f->path, r.offset, r.length);
  uint64_t a = options_.alignment;
  if (f->direct && a > 1 &&
      (r.offset % a != 0 || r.length % a != 0 || reinterpret_cast<uintptr_t>(r.buffer) % a != 0))
    return errno_status(EINVAL, where + fmt::format(" (direct I/O needs {}-byte alignment)", a));
  std::vector<std::byte>& bytes = *f->bytes;
  if (r.op == IoOp::read) {
    if (r.offset + r.length > bytes.size())
      return Status(Code::io_error, where + ": end of file (the file is shorter than the request)");
    std::memcpy(r.buffer, bytes.data() + r.offset, r.length);
  } else {
    if (!f->writable) return errno_status(EBADF, where);
    if (bytes.size() < r.offset + r.length) bytes.resize(r.offset + r.length);
    std::memcpy(bytes.data() + r.offset, r.buffer, r.length);
  }
  return Status();
}

Status MemEngine::check_submit(const IoRequest& request) const {
  STRATA_RETURN_IF_ERROR(check_request(request));
  MutexLock lock(mu_);
  if (find_locked(request.file) == nullptr) return error(Code::invalid_argument, "file id {} is not open", request.file);
  return Status();
}

StatusOr<IoTicket> MemEngine::submit(const IoRequest& request) {
  STRATA_RETURN_IF_ERROR(check_submit(request));
  IoTicket t = tickets_.open(1);
  tickets_.piece_done(t, transfer(request));
  return t;
}

Status MemEngine::submit(const IoRequest& request, IoCallback done) {
  STRATA_RETURN_IF_ERROR(check_submit(request));
  IoTicket t = tickets_.open(1, std::move(done));
  tickets_.piece_done(t, transfer(request));
  return Status();
}

}  // namespace strata
