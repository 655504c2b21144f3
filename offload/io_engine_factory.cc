// Engine choice and pinned-pool registration (see io_engine_factory.h).
#include "offload/io_engine_factory.h"

#include <spdlog/spdlog.h>

#include "offload/posix_engine.h"
#include "offload/uring_engine.h"
#include "runtime/fs_probe.h"
#include "runtime/io_uring_probe.h"
#include "runtime/log.h"
#include "runtime/pinned_pool.h"

namespace strata {

std::string_view io_engine_kind_name(IoEngineKind kind) {
  switch (kind) {
    case IoEngineKind::auto_select: return "auto";
    case IoEngineKind::io_uring: return "io_uring";
    case IoEngineKind::posix: return "posix";
  }
  return "unknown";
}

StatusOr<IoEngineKind> parse_io_engine_kind(std::string_view text) {
  if (text == "auto") return IoEngineKind::auto_select;
  if (text == "io_uring") return IoEngineKind::io_uring;
  if (text == "posix") return IoEngineKind::posix;
  return error(Code::invalid_argument, "io_engine must be one of auto, io_uring, posix (got '{}')", text);
}

StatusOr<IoEngineChoice> make_io_engine(const IoEngineConfig& config, const std::vector<std::string>& paths) {
  IoEngineChoice choice;
  if (config.kind != IoEngineKind::posix) {
    std::string why_not;
    IoUringProbe probe = probe_io_uring();
    if (!probe.works) why_not = "io_uring does not work here: " + probe.reason;
    for (const std::string& p : paths) {
      if (!why_not.empty()) break;
      ODirectProbe direct = probe_o_direct(p);
      if (!direct.works) why_not = fmt::format("{} does not accept O_DIRECT ({})", p, direct.reason);
    }
    if (why_not.empty()) {
      auto uring = UringEngine::create(UringEngineOptions{.shape = config.shape});
      if (uring.is_ok()) {
        choice.engine = std::move(*uring);
        return choice;
      }
      why_not = uring.status().message();
    }
    if (config.kind == IoEngineKind::io_uring)
      return Status(Code::unavailable, "io_engine=io_uring was asked for, but " + why_not +
                                           "; use io_engine=auto or posix (pread/pwrite threads)");
    choice.fallback_reason = why_not;
    spdlog::warn("I/O engine: using the posix fallback (pread/pwrite threads) because {}", why_not);
  }
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<PosixEngine> posix, PosixEngine::create(config.shape));
  choice.engine = std::move(posix);
  return choice;
}

void register_pinned_pool(IoEngine& engine, PinnedPool& pool) {
  auto add = [&engine](size_t index, std::span<std::byte> slab) {
    Status s = engine.register_memory(slab);
    if (!s.is_ok())
      warn_once("pinned-register", fmt::format("pinned slab {} stays unregistered (plain reads/writes, a little "
                                               "slower): {}", index, s.message()));
  };
  pool.set_slab_listener(add);
  std::vector<std::span<std::byte>> slabs = pool.slabs();
  for (size_t i = 0; i < slabs.size(); i++) add(i, slabs[i]);
}

}  // namespace strata
