// io_uring probe: ring setup and one NOP round trip, with the reason when either fails.
// Not an I/O engine (offload/ has that).
#include "runtime/io_uring_probe.h"

#include <liburing.h>

#include <fmt/format.h>

#include "runtime/status.h"
#include "runtime/sysfs.h"

namespace strata {
namespace {

std::string setup_failure_reason(int err, int disabled_setting) {
  switch (err) {
    case ENOSYS: return "kernel without io_uring (io_uring_setup: ENOSYS)";
    case EPERM:
      if (disabled_setting == 2) return "disabled by kernel.io_uring_disabled=2";
      if (disabled_setting == 1)
        return "disabled by kernel.io_uring_disabled=1 for processes outside kernel.io_uring_group";
      return "disabled by seccomp or kernel.io_uring_disabled (io_uring_setup: EPERM)";
    case ENOMEM:
      return "io_uring_setup: out of memory; raise the locked-memory limit (ulimit -l) on kernels before 5.12";
    default: return errno_status(err, "io_uring_queue_init").message();
  }
}

}  // namespace

IoUringProbe probe_io_uring() {
  IoUringProbe probe;
  probe.kernel_disabled_setting =
      static_cast<int>(read_sysfs_int("/proc/sys/kernel/io_uring_disabled").value_or(-1));

  io_uring ring{};
  int rc = io_uring_queue_init(4, &ring, 0);
  if (rc < 0) {
    probe.reason = setup_failure_reason(-rc, probe.kernel_disabled_setting);
    return probe;
  }
  io_uring_sqe* sqe = io_uring_get_sqe(&ring);
  if (!sqe) {
    io_uring_queue_exit(&ring);
    probe.reason = "a new ring had no free submission entry";
    return probe;
  }
  io_uring_prep_nop(sqe);
  rc = io_uring_submit(&ring);
  if (rc != 1) {
    probe.reason = rc < 0 ? errno_status(rc, "io_uring_submit of a NOP").message()
                          : fmt::format("io_uring_submit of a NOP submitted {} entries", rc);
    io_uring_queue_exit(&ring);
    return probe;
  }
  io_uring_cqe* cqe = nullptr;
  rc = io_uring_wait_cqe(&ring, &cqe);
  if (rc < 0) {
    probe.reason = errno_status(rc, "waiting for the NOP's completion").message();
  } else if (cqe->res < 0) {
    probe.reason = errno_status(cqe->res, "the NOP completed with an error").message();
  } else {
    probe.works = true;
  }
  if (cqe) io_uring_cqe_seen(&ring, cqe);
  io_uring_queue_exit(&ring);
  return probe;
}

}  // namespace strata
