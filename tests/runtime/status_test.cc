// Status, StatusOr, the errno mapping and the STRATA_RETURN_IF_ERROR / STRATA_ASSIGN_OR_RETURN macros.
#include "runtime/status.h"

#include <cerrno>
#include <cstring>

#include <gtest/gtest.h>

namespace strata {
namespace {

TEST(Status, DefaultIsOk) {
  Status s;
  EXPECT_TRUE(s.is_ok());
  EXPECT_EQ(s.code(), Code::ok);
  EXPECT_EQ(s.message(), "");
  EXPECT_EQ(s.sys_errno(), 0);
  EXPECT_EQ(s.to_string(), "ok");
  EXPECT_TRUE(Status::ok().is_ok());
  // A Status built with Code::ok is ok, whatever the message.
  EXPECT_TRUE(Status(Code::ok, "ignored").is_ok());
}

TEST(Status, CarriesCodeMessageAndErrno) {
  Status s(Code::io_error, "read /mnt/a/x.swp at offset 4096", EIO);
  EXPECT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), Code::io_error);
  EXPECT_EQ(s.message(), "read /mnt/a/x.swp at offset 4096");
  EXPECT_EQ(s.sys_errno(), EIO);
  EXPECT_EQ(s.to_string(), "I/O error: read /mnt/a/x.swp at offset 4096");
}

TEST(Status, ErrorFormats) {
  Status s = error(Code::out_of_range, "{} must be in [{}, {}]", "aio_queue_depth", 1, 4096);
  EXPECT_EQ(s.code(), Code::out_of_range);
  EXPECT_EQ(s.message(), "aio_queue_depth must be in [1, 4096]");
  EXPECT_EQ(fmt::format("{}", s), "out of range: aio_queue_depth must be in [1, 4096]");
}

TEST(Status, WithContextPrefixesAndKeepsCodeAndErrno) {
  Status s = errno_status(ENOSPC, "write /mnt/a/x.swp").with_context("checkpoint step 7");
  EXPECT_EQ(s.code(), Code::no_space);
  EXPECT_EQ(s.sys_errno(), ENOSPC);
  EXPECT_EQ(s.message().rfind("checkpoint step 7: write /mnt/a/x.swp: ", 0), 0u) << s.message();
  EXPECT_TRUE(Status::ok().with_context("anything").is_ok());
}

TEST(Status, CopiesShareTheSameValue) {
  Status a(Code::corruption, "crc mismatch in extent 3");
  Status b = a;
  EXPECT_EQ(b.code(), Code::corruption);
  EXPECT_EQ(b.message(), a.message());
}

TEST(ErrnoStatus, MapsEachErrnoFamily) {
  const std::pair<int, Code> cases[] = {
      {ENOSPC, Code::no_space},          {EDQUOT, Code::no_space},
      {ENOENT, Code::not_found},         {ENODEV, Code::not_found},
      {EACCES, Code::permission_denied}, {EPERM, Code::permission_denied},
      {EROFS, Code::permission_denied},  {ENOMEM, Code::out_of_memory},
      {EINVAL, Code::invalid_argument},  {EISDIR, Code::invalid_argument},
      {EEXIST, Code::already_exists},    {EAGAIN, Code::unavailable},
      {ENOSYS, Code::unavailable},       {EOPNOTSUPP, Code::unavailable},
      {ECANCELED, Code::cancelled},      {EIO, Code::io_error},
      {EBADF, Code::io_error},
  };
  for (const auto& [err, code] : cases) {
    EXPECT_EQ(code_from_errno(err), code) << std::strerror(err);
    EXPECT_EQ(code_from_errno(-err), code) << "negative " << std::strerror(err);
  }
}

TEST(ErrnoStatus, MessageNamesWhatStrerrorAndNumber) {
  Status s = errno_status(-ENOENT, "open /mnt/a/x.swp");  // io_uring's negative res convention
  EXPECT_EQ(s.code(), Code::not_found);
  EXPECT_EQ(s.sys_errno(), ENOENT);
  EXPECT_EQ(s.message(), fmt::format("open /mnt/a/x.swp: {} (errno {})", std::strerror(ENOENT), ENOENT));
}

TEST(CodeName, EveryCodeHasAName) {
  for (int c = static_cast<int>(Code::ok); c <= static_cast<int>(Code::internal); c++) {
    EXPECT_NE(code_name(static_cast<Code>(c)), "unknown") << c;
    EXPECT_FALSE(code_name(static_cast<Code>(c)).empty()) << c;
  }
  EXPECT_EQ(code_name(Code::no_space), "no space");
}

TEST(StatusOr, HoldsAValueOrAStatus) {
  StatusOr<std::string> v = std::string("gpu_mem");
  ASSERT_TRUE(v.is_ok());
  EXPECT_TRUE(v.status().is_ok());
  EXPECT_EQ(*v, "gpu_mem");
  EXPECT_EQ(v->size(), 7u);

  StatusOr<std::string> e = Status(Code::not_found, "no such key");
  ASSERT_FALSE(e.is_ok());
  EXPECT_EQ(e.status().code(), Code::not_found);
  EXPECT_EQ(e.status().message(), "no such key");
  EXPECT_THROW(e.value(), std::bad_variant_access);
}

TEST(StatusOr, MovesTheValueOut) {
  StatusOr<std::vector<int>> v = std::vector<int>{1, 2, 3};
  std::vector<int> taken = std::move(v).value();
  EXPECT_EQ(taken, (std::vector<int>{1, 2, 3}));
}

Status fail_if(bool fail) { return fail ? error(Code::invalid_argument, "bad input") : Status::ok(); }

Status run_two(bool fail_first, int* reached) {
  STRATA_RETURN_IF_ERROR(fail_if(fail_first));
  *reached = 1;
  STRATA_RETURN_IF_ERROR(fail_if(false));
  *reached = 2;
  return Status::ok();
}

TEST(Macros, ReturnIfErrorStopsAtTheFirstError) {
  int reached = 0;
  Status s = run_two(true, &reached);
  EXPECT_EQ(s.code(), Code::invalid_argument);
  EXPECT_EQ(reached, 0);
  EXPECT_TRUE(run_two(false, &reached).is_ok());
  EXPECT_EQ(reached, 2);
}

StatusOr<int> half(int x) {
  if (x % 2 != 0) return error(Code::invalid_argument, "{} is odd", x);
  return x / 2;
}

StatusOr<int> quarter(int x) {
  STRATA_ASSIGN_OR_RETURN(int h, half(x));
  STRATA_ASSIGN_OR_RETURN(const int q, half(h));  // two on one function: distinct temporaries
  return q;
}

TEST(Macros, AssignOrReturnPropagates) {
  EXPECT_EQ(*quarter(12), 3);
  StatusOr<int> odd = quarter(6);  // 6 / 2 = 3 is odd
  ASSERT_FALSE(odd.is_ok());
  EXPECT_EQ(odd.status().code(), Code::invalid_argument);
  EXPECT_EQ(odd.status().message(), "3 is odd");
}

}  // namespace
}  // namespace strata
