// Path probe: statfs for the filesystem and space, st_dev -> /sys/dev/block/MAJ:MIN for the block
// device (a partition is reported as its whole disk), and a one-block O_DIRECT write+read in a
// temporary file. Not a benchmark and not a mount table reader.
#include "runtime/fs_probe.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

#include "runtime/sysfs.h"

namespace strata {
namespace {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// Closes the descriptor on every return path.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

// The NUMA node of the device at sysfs path `sys`: the first numa_node file up its path (a block
// device's PCI function: /sys/devices/pci0000:00/0000:00:01.1/0000:01:00.0/nvme/nvme0/nvme0n1 ->
// 0000:01:00.0/numa_node); -1 where none is found or it says -1 (one node, or unknown).
int device_numa_node(std::filesystem::path sys) {
  std::error_code ec;
  for (; !sys.empty() && sys != sys.root_path() && sys.string().starts_with("/sys/devices"); sys = sys.parent_path())
    if (std::filesystem::exists(sys / "numa_node", ec))
      return static_cast<int>(read_sysfs_int((sys / "numa_node").string()).value_or(-1));
  return -1;
}

// Name, logical block size, rotational flag, model and NUMA node of the block device holding `dev`.
void probe_block_device(dev_t dev, PathInfo* info) {
  std::error_code ec;
  const std::string link = fmt::format("/sys/dev/block/{}:{}", major(dev), minor(dev));
  std::filesystem::path sys = std::filesystem::canonical(link, ec);
  if (ec) return;  // no block device: tmpfs, overlay, btrfs subvolumes, network filesystems
  if (std::filesystem::exists(sys / "partition", ec)) sys = sys.parent_path();
  info->block_device = sys.filename().string();
  if (auto lbs = read_sysfs_int((sys / "queue/logical_block_size").string()); lbs && *lbs > 0)
    info->logical_block_size = static_cast<uint32_t>(*lbs);
  info->rotational = read_sysfs_int((sys / "queue/rotational").string()).value_or(0) != 0;
  info->device_model = read_sysfs_line((sys / "device/model").string()).value_or("");
  info->numa_node = device_numa_node(sys);
}

}  // namespace

std::string filesystem_name(uint64_t magic) {
  struct Fs {
    uint64_t magic;
    const char* name;
  };
  // From linux/magic.h and the filesystems' own headers. ext2/ext3 share ext4's magic.
  static constexpr Fs kFilesystems[] = {
      {0xEF53, "ext4"},         {0x58465342, "xfs"},      {0x9123683E, "btrfs"},
      {0x01021994, "tmpfs"},    {0x858458F6, "ramfs"},    {0x794C7630, "overlay"},
      {0x6969, "nfs"},          {0xF2F52010, "f2fs"},     {0x2FC12FC1, "zfs"},
      {0xCA451A4E, "bcachefs"}, {0x65735546, "fuse"},     {0xFF534D42, "cifs"},
      {0xFE534D42, "smb2"},     {0x5346544E, "ntfs"},     {0x2011BAB0, "exfat"},
      {0x4D44, "vfat"},         {0x0BD00BD0, "lustre"},   {0x47504653, "gpfs"},
      {0x00C36400, "ceph"},     {0x01021997, "9p"},       {0x73717368, "squashfs"},
      {0x9660, "iso9660"},      {0x9FA0, "proc"},         {0x62656572, "sysfs"},
      {0x1373, "devfs"},        {0x63677270, "cgroup2"},
  };
  for (const Fs& fs : kFilesystems)
    if (fs.magic == magic) return fs.name;
  return fmt::format("0x{:x}", magic);
}

ODirectProbe probe_o_direct(const std::string& dir, uint32_t block_size) {
  static std::atomic<uint64_t> counter{0};
  const std::string file = fmt::format("{}/.strata-odirect-probe-{}-{}", dir, ::getpid(), counter++);
  FdCloser fd{::open(file.c_str(), O_CREAT | O_EXCL | O_RDWR | O_DIRECT | O_CLOEXEC, 0600)};
  if (fd.fd < 0) {
    Status s = errno_status(errno, "open with O_DIRECT");
    return {false, s.message()};
  }
  ::unlink(file.c_str());

  std::unique_ptr<void, FreeDeleter> out(std::aligned_alloc(block_size, block_size));
  std::unique_ptr<void, FreeDeleter> in(std::aligned_alloc(block_size, block_size));
  if (!out || !in) return {false, fmt::format("allocating two aligned {}-byte buffers failed", block_size)};
  auto* bytes = static_cast<unsigned char*>(out.get());
  for (uint32_t i = 0; i < block_size; ++i) bytes[i] = static_cast<unsigned char>(i * 131 + 7);
  std::memset(in.get(), 0, block_size);

  ssize_t wrote = ::pwrite(fd.fd, out.get(), block_size, 0);
  if (wrote < 0) return {false, errno_status(errno, "O_DIRECT write").message()};
  if (wrote != static_cast<ssize_t>(block_size))
    return {false, fmt::format("O_DIRECT write of {} bytes wrote only {}", block_size, wrote)};
  ssize_t got = ::pread(fd.fd, in.get(), block_size, 0);
  if (got < 0) return {false, errno_status(errno, "O_DIRECT read").message()};
  if (got != static_cast<ssize_t>(block_size))
    return {false, fmt::format("O_DIRECT read of {} bytes returned {}", block_size, got)};
  if (std::memcmp(in.get(), out.get(), block_size) != 0)
    return {false, "the block read back with O_DIRECT differs from the one written"};
  return {true, ""};
}

StatusOr<PathInfo> probe_path(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    int err = errno;
    if (err == ENOENT)
      return Status(Code::not_found, fmt::format("{} does not exist; create the directory or pass an existing one",
                                                 dir), err);
    return errno_status(err, fmt::format("cannot inspect {}", dir));
  }
  if (!S_ISDIR(st.st_mode))
    return error(Code::invalid_argument, "{} is not a directory; pass the directory strata should write its files in",
                 dir);
  if (::access(dir.c_str(), W_OK) != 0) {
    int err = errno;
    return Status(err == EROFS ? Code::permission_denied : code_from_errno(err),
                  fmt::format("{} is not writable ({}); choose a directory this user can write to", dir,
                              std::strerror(err)),
                  err);
  }
  struct statfs fs {};
  if (::statfs(dir.c_str(), &fs) != 0) return errno_status(errno, fmt::format("statfs {}", dir));

  PathInfo info;
  info.path = dir;
  info.fs_type = filesystem_name(static_cast<uint64_t>(fs.f_type));
  const uint64_t unit = fs.f_frsize ? fs.f_frsize : fs.f_bsize;
  info.total_bytes = static_cast<uint64_t>(fs.f_blocks) * unit;
  info.free_bytes = static_cast<uint64_t>(fs.f_bavail) * unit;
  probe_block_device(st.st_dev, &info);
  ODirectProbe od = probe_o_direct(dir, std::max<uint32_t>(info.logical_block_size, 4096));
  info.o_direct = od.works;
  info.o_direct_reason = od.reason;
  return info;
}

}  // namespace strata
