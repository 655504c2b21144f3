// FaultEngine implementation (see fault_engine.h).
#include "offload/fault_engine.h"

#include <cerrno>
#include <cstring>
#include <thread>

#include "offload/posix_engine.h"

namespace strata {
namespace {

constexpr std::byte kGarbage{0xEE};

std::string where(IoOp op, const std::string& path, uint64_t offset, uint64_t length) {
  return fmt::format("{} {} at offset {} ({} bytes)", io_op_name(op), path, offset, length);
}

}  // namespace

std::string_view fault_kind_name(FaultKind kind) {
  switch (kind) {
    case FaultKind::eio: return "EIO";
    case FaultKind::short_transfer: return "short transfer";
    case FaultKind::enospc: return "ENOSPC";
    case FaultKind::torn_write: return "torn write";
    case FaultKind::latency: return "latency";
  }
  return "unknown";
}

FaultEngine::FaultEngine(std::unique_ptr<IoEngine> inner, FaultEngineOptions options)
    : inner_(std::move(inner)),
      options_(std::move(options)),
      name_(fmt::format("fault({})", inner_->name())),
      rng_(options_.seed),
      matched_(options_.rules.size(), 0),
      fired_(options_.rules.size(), 0) {}

FaultEngine::~FaultEngine() { tickets_.wait_idle(); }

FaultEngine::Decision FaultEngine::decide(IoOp op, FileId file, uint64_t length, bool reservation) {
  MutexLock lock(mu_);
  for (size_t i = 0; i < options_.rules.size(); i++) {
    const FaultRule& r = options_.rules[i];
    if (r.op && *r.op != op) continue;
    if (op == IoOp::read && (r.kind == FaultKind::enospc || r.kind == FaultKind::torn_write)) continue;
    if (reservation && r.kind != FaultKind::enospc) continue;
    if (++matched_[i] <= r.skip || fired_[i] >= r.limit) continue;
    if (std::uniform_real_distribution<double>(0.0, 1.0)(rng_) >= r.probability) continue;
    fired_[i]++;
    injected_[static_cast<size_t>(r.kind)]++;
    uint64_t unit = inner_->is_direct(file) ? 4096 : 1;
    uint64_t units = length / unit;
    uint64_t keep = units > 1 ? (rng_() % units) * unit : 0;  // strictly less than length
    return Decision{&r, keep};
  }
  return Decision{};
}

Status FaultEngine::allocate(FileId file, uint64_t offset, uint64_t length) {
  Decision d = decide(IoOp::write, file, length, /*reservation=*/true);
  if (d.rule != nullptr && d.rule->kind == FaultKind::enospc)
    return errno_status(ENOSPC, fmt::format("reserve {} bytes at offset {} of {} (injected)", length, offset, path(file)));
  return inner_->allocate(file, offset, length);
}

Status FaultEngine::start(const IoRequest& r, const Decision& d, IoCallback finish) {
  if (d.rule == nullptr) return inner_->submit(r, std::move(finish));
  const std::string w = where(r.op, inner_->path(r.file), r.offset, r.length);
  const uint64_t keep = d.keep;
  // Serves the first `keep` bytes (all of a read) and then ends with `injected` if they went well.
  auto serve_then = [&](uint64_t bytes, Status injected, bool scribble) -> Status {
    if (bytes == 0) {
      finish(injected);
      return Status();
    }
    IoRequest part = r;
    part.length = bytes;
    return inner_->submit(part, [r, keep, scribble, injected, finish](const Status& s) {
      if (scribble) std::memset(r.buffer + keep, static_cast<int>(kGarbage), r.length - keep);
      finish(s.is_ok() ? injected : s);
    });
  };
  switch (d.rule->kind) {
    case FaultKind::latency: {
      auto delay = d.rule->latency;
      return inner_->submit(r, [delay, finish](const Status& s) {
        std::this_thread::sleep_for(delay);
        finish(s);
      });
    }
    case FaultKind::eio:
      if (r.op == IoOp::read) {
        return inner_->submit(r, [r, w, finish](const Status& s) {
          std::memset(r.buffer, static_cast<int>(kGarbage), r.length);
          finish(s.is_ok() ? errno_status(EIO, w + " (injected)") : s);
        });
      }
      return serve_then(keep, errno_status(EIO, w + " (injected)"), false);
    case FaultKind::short_transfer: {
      Status s(Code::io_error, fmt::format("{}: only {} of {} bytes were transferred, the rest failed (injected "
                                           "short {})", w, keep, r.length, io_op_name(r.op)));
      return serve_then(r.op == IoOp::read ? r.length : keep, s, r.op == IoOp::read);
    }
    case FaultKind::enospc:
      return serve_then(0, errno_status(ENOSPC, w + " (injected)"), false);
    case FaultKind::torn_write:
      return serve_then(keep, Status(), false);
  }
  return error(Code::internal, "unknown fault kind {}", static_cast<int>(d.rule->kind));
}

StatusOr<IoTicket> FaultEngine::submit(const IoRequest& request) {
  STRATA_RETURN_IF_ERROR(check_request(request));
  Decision d = decide(request.op, request.file, request.length, /*reservation=*/false);
  IoTicket t = tickets_.open(1);
  Status s = start(request, d, [this, t](const Status& st) { tickets_.piece_done(t, st); });
  if (!s.is_ok()) {
    tickets_.forget(t);
    return s;
  }
  return t;
}

Status FaultEngine::submit(const IoRequest& request, IoCallback done) {
  STRATA_RETURN_IF_ERROR(check_request(request));
  Decision d = decide(request.op, request.file, request.length, /*reservation=*/false);
  IoTicket t = tickets_.open(1, std::move(done));
  Status s = start(request, d, [this, t](const Status& st) { tickets_.piece_done(t, st); });
  if (!s.is_ok()) tickets_.forget(t);
  return s;
}

uint64_t FaultEngine::injected(FaultKind kind) const {
  MutexLock lock(mu_);
  return injected_[static_cast<size_t>(kind)];
}

uint64_t FaultEngine::injected_total() const {
  MutexLock lock(mu_);
  uint64_t n = 0;
  for (uint64_t v : injected_) n += v;
  return n;
}

}  // namespace strata
