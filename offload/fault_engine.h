// FaultEngine: wraps another IoEngine and makes chosen requests fail the way disks and kernels
// do -- EIO, a short read or write that cannot be completed, ENOSPC, a torn write (only a prefix
// reaches the disk, yet the write reports success, as after a power cut), or added latency.
// Which requests are hit is decided by rules and a seeded generator in submission order, so a
// test run is reproducible. For tests only: nothing here makes I/O more reliable.
// Thread-safety and contract: see io_engine.h (the wrapped engine's threads run the callbacks).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "offload/io_engine.h"
#include "offload/io_tickets.h"
#include "runtime/mutex.h"

namespace strata {

enum class FaultKind : uint8_t { eio, short_transfer, enospc, torn_write, latency };
inline constexpr size_t kFaultKinds = 5;
std::string_view fault_kind_name(FaultKind kind);  // "EIO", "short transfer", ...

struct FaultRule {
  FaultKind kind = FaultKind::eio;
  std::optional<IoOp> op;     // which requests it applies to; nullopt = reads and writes
  double probability = 1.0;   // chance per matching request, drawn from the seeded generator
  uint32_t skip = 0;          // the first `skip` matching requests pass untouched
  uint32_t limit = std::numeric_limits<uint32_t>::max();  // at most this many injections
  std::chrono::microseconds latency{0};  // FaultKind::latency: delay before completion
};

// What each kind does to a request of n bytes (k: a random multiple of 4096 below n, or of 1
// byte for buffered files):
//   eio            read: fails with EIO and the buffer is overwritten with garbage;
//                  write: the first k bytes land, then EIO.
//   short_transfer read: only k bytes are good, the rest of the buffer is garbage, io_error;
//                  write: only k bytes land, io_error.
//   enospc         write: nothing lands, ENOSPC (no_space); allocate() fails the same way.
//   torn_write     write: only k bytes land, and the write reports success.
//   latency        the request is served normally and completes `latency` later.
// Reads are never hit by enospc or torn_write rules.
struct FaultEngineOptions {
  uint64_t seed = 1;
  std::vector<FaultRule> rules;  // the first rule that fires for a request wins
};

class FaultEngine final : public IoEngine {
 public:
  FaultEngine(std::unique_ptr<IoEngine> inner, FaultEngineOptions options);
  ~FaultEngine() override;

  std::string_view name() const override { return name_; }
  StatusOr<FileId> open(const std::string& path, const OpenOptions& options) override {
    return inner_->open(path, options);
  }
  Status close(FileId file) override { return inner_->close(file); }
  Status allocate(FileId file, uint64_t offset, uint64_t length) override;
  StatusOr<uint64_t> file_size(FileId file) override { return inner_->file_size(file); }
  bool is_direct(FileId file) const override { return inner_->is_direct(file); }
  std::string path(FileId file) const override { return inner_->path(file); }
  Status register_memory(std::span<std::byte> m) override { return inner_->register_memory(m); }
  Status unregister_memory(std::span<std::byte> m) override { return inner_->unregister_memory(m); }
  StatusOr<IoTicket> submit(const IoRequest& request) override;
  Status submit(const IoRequest& request, IoCallback done) override;
  Status wait(IoTicket ticket) override { return tickets_.wait(ticket); }
  bool done(IoTicket ticket) const override { return tickets_.complete(ticket); }

  IoEngine& inner() { return *inner_; }
  uint64_t injected(FaultKind kind) const EXCLUDES(mu_);
  uint64_t injected_total() const EXCLUDES(mu_);

 private:
  struct Decision {
    const FaultRule* rule = nullptr;  // nullptr: no fault
    uint64_t keep = 0;                // k: bytes that stay good
  };
  // `reservation`: an allocate() call, which only enospc rules see (and count).
  Decision decide(IoOp op, FileId file, uint64_t length, bool reservation) EXCLUDES(mu_);
  Status start(const IoRequest& request, const Decision& d, IoCallback finish);

  // Constant after construction.
  std::unique_ptr<IoEngine> inner_;
  const FaultEngineOptions options_;
  const std::string name_;

  IoTickets tickets_;  // locks itself

  // State below is protected by mu_.
  mutable Mutex mu_;
  std::mt19937_64 rng_ GUARDED_BY(mu_);
  std::vector<uint32_t> matched_ GUARDED_BY(mu_);  // per rule
  std::vector<uint32_t> fired_ GUARDED_BY(mu_);    // per rule
  std::array<uint64_t, kFaultKinds> injected_ GUARDED_BY(mu_){};
};

}  // namespace strata
