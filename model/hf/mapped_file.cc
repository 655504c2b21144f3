// MappedFile: open + fstat + mmap(PROT_READ, MAP_PRIVATE) of a whole file; the descriptor is
// closed right after mapping (the mapping keeps the file alive). Not a writer.
#include "model/hf/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace strata::model {

StatusOr<std::shared_ptr<const MappedFile>> MappedFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_status(errno, fmt::format("opening {}", path));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    Status s = errno_status(errno, fmt::format("fstat {}", path));
    ::close(fd);
    return s;
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return error(Code::invalid_argument, "{} is not a regular file; pass a file path", path);
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  const std::byte* data = nullptr;
  if (size > 0) {
    void* p = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      Status s = errno_status(errno, fmt::format("mapping {} ({} bytes)", path, size));
      ::close(fd);
      return s;
    }
    data = static_cast<const std::byte*>(p);
  }
  ::close(fd);
  return std::shared_ptr<const MappedFile>(new MappedFile(path, data, size));
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) munmap(const_cast<std::byte*>(data_), size_);
}

}  // namespace strata::model
