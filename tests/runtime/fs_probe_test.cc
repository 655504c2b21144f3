// probe_path on this machine's directories: a disk-backed build directory (filesystem, space,
// O_DIRECT, block device), /dev/shm (tmpfs, compared with what the kernel does), the O_DIRECT
// failure reason, and the errors for a missing path and a file.
#include "runtime/fs_probe.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>

#include <gtest/gtest.h>

namespace strata {
namespace {

namespace fs = std::filesystem;

// A fresh directory under the build tree (a disk, unlike /tmp on some machines), removed at the end.
class ScratchDir {
 public:
  ScratchDir() : path_(fs::path(STRATA_BINARY_DIR) / "test-scratch" / ("fs_probe." + std::to_string(::getpid()))) {
    fs::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

bool directory_is_empty(const std::string& dir) { return fs::directory_iterator(dir) == fs::directory_iterator(); }

// What the kernel says about O_DIRECT in `dir`, asked directly (the oracle for tmpfs, whose answer
// changed in Linux 6.6).
bool kernel_accepts_o_direct(const std::string& dir) {
  std::string file = dir + "/oracle-XXXXXX";
  int fd = ::mkostemp(file.data(), O_DIRECT);
  if (fd < 0) return false;
  ::unlink(file.c_str());
  std::unique_ptr<void, decltype(&std::free)> buf(std::aligned_alloc(4096, 4096), &std::free);
  bool ok = ::pwrite(fd, buf.get(), 4096, 0) == 4096;
  ::close(fd);
  return ok;
}

TEST(FsProbe, DiskDirectoryHasFilesystemSpaceAndODirect) {
  ScratchDir dir;
  auto info = probe_path(dir.str());
  ASSERT_TRUE(info.is_ok()) << info.status().to_string();
  EXPECT_EQ(info->path, dir.str());
  const std::set<std::string> disk_filesystems = {"ext4", "xfs", "btrfs", "overlay", "f2fs", "zfs", "bcachefs"};
  EXPECT_TRUE(disk_filesystems.count(info->fs_type)) << info->fs_type;
  EXPECT_GT(info->free_bytes, 0u);
  EXPECT_GE(info->total_bytes, info->free_bytes);
  EXPECT_EQ(info->o_direct, kernel_accepts_o_direct(dir.str()));
  EXPECT_TRUE(info->o_direct_reason.empty() == info->o_direct) << info->o_direct_reason;
  EXPECT_TRUE(info->logical_block_size == 512 || info->logical_block_size == 4096) << info->logical_block_size;
  EXPECT_TRUE(directory_is_empty(dir.str())) << "the O_DIRECT probe left a file behind";
}

TEST(FsProbe, WorkAcceptsODirectOnItsBlockDevice) {
  if (!fs::is_directory("/work")) GTEST_SKIP() << "/work does not exist on this machine";
  auto info = probe_path("/work");
  ASSERT_TRUE(info.is_ok()) << info.status().to_string();
  EXPECT_TRUE(info->o_direct) << info->o_direct_reason;
  if (info->fs_type == "ext4" || info->fs_type == "xfs") {
    EXPECT_FALSE(info->block_device.empty());
    EXPECT_TRUE(fs::exists("/sys/block/" + info->block_device)) << info->block_device;
  }
}

TEST(FsProbe, TmpfsIsReportedWithoutABlockDevice) {
  if (!fs::is_directory("/dev/shm")) GTEST_SKIP() << "no /dev/shm on this machine";
  auto info = probe_path("/dev/shm");
  ASSERT_TRUE(info.is_ok()) << info.status().to_string();
  if (info->fs_type != "tmpfs") GTEST_SKIP() << "/dev/shm is " << info->fs_type << " here, not tmpfs";
  EXPECT_TRUE(info->block_device.empty()) << info->block_device;
  // tmpfs refused O_DIRECT (EINVAL) before Linux 6.6 and accepts it since.
  EXPECT_EQ(info->o_direct, kernel_accepts_o_direct("/dev/shm"));
  if (!info->o_direct) {
    EXPECT_NE(info->o_direct_reason.find("O_DIRECT"), std::string::npos);
  }
}

TEST(FsProbe, ODirectFailureCarriesTheReason) {
  // /proc accepts no new files: the probe fails at open and says so.
  ODirectProbe probe = probe_o_direct("/proc");
  EXPECT_FALSE(probe.works);
  EXPECT_NE(probe.reason.find("open with O_DIRECT"), std::string::npos) << probe.reason;
  EXPECT_NE(probe.reason.find("errno"), std::string::npos) << probe.reason;
}

TEST(FsProbe, MissingPathIsNotFound) {
  ScratchDir dir;
  const std::string missing = dir.str() + "/no-such-dir";
  auto info = probe_path(missing);
  ASSERT_FALSE(info.is_ok());
  EXPECT_EQ(info.status().code(), Code::not_found);
  EXPECT_NE(info.status().message().find(missing + " does not exist"), std::string::npos) << info.status().message();
}

TEST(FsProbe, FileIsInvalidArgument) {
  ScratchDir dir;
  const std::string file = dir.str() + "/a-file";
  std::ofstream(file) << "x";
  auto info = probe_path(file);
  ASSERT_FALSE(info.is_ok());
  EXPECT_EQ(info.status().code(), Code::invalid_argument);
  EXPECT_NE(info.status().message().find(file + " is not a directory"), std::string::npos) << info.status().message();
}

TEST(FsProbe, FilesystemNamesFromMagic) {
  EXPECT_EQ(filesystem_name(0xEF53), "ext4");
  EXPECT_EQ(filesystem_name(0x58465342), "xfs");
  EXPECT_EQ(filesystem_name(0x01021994), "tmpfs");
  EXPECT_EQ(filesystem_name(0x794C7630), "overlay");
  EXPECT_EQ(filesystem_name(0x12345678), "0x12345678");
}

}  // namespace
}  // namespace strata
