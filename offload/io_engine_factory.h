// make_io_engine: picks and builds the IoEngine for a run from the io_engine setting
// (auto | io_uring | posix). auto takes io_uring when it works in this process and every NVMe
// path accepts O_DIRECT, else the posix engine, logging the one reason why. Asking for io_uring
// where it cannot work is an error (unavailable) that says why and how to fall back.
// Also: register_pinned_pool, which keeps a pinned pool's slabs registered with an engine.
// Not the engines themselves (uring_engine.h, posix_engine.h).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "offload/io_engine.h"

namespace strata {

class PinnedPool;

enum class IoEngineKind : uint8_t { auto_select, io_uring, posix };
std::string_view io_engine_kind_name(IoEngineKind kind);  // "auto", "io_uring", "posix"
StatusOr<IoEngineKind> parse_io_engine_kind(std::string_view text);

struct IoEngineConfig {
  IoEngineKind kind = IoEngineKind::auto_select;
  IoShape shape;
};

struct IoEngineChoice {
  std::unique_ptr<IoEngine> engine;
  std::string fallback_reason;  // why auto did not take io_uring; empty otherwise
};

// `paths`: the directories the engine will serve (checked for O_DIRECT under auto).
StatusOr<IoEngineChoice> make_io_engine(const IoEngineConfig& config, const std::vector<std::string>& paths);

// Registers every slab `pool` has and every slab it reserves later with `engine` (fixed buffers
// for io_uring). A slab that cannot be registered still works, unfixed (one warning). The engine
// must outlive the pool's use of the listener: call pool.set_slab_listener(nullptr) before
// destroying the engine.
void register_pinned_pool(IoEngine& engine, PinnedPool& pool);

}  // namespace strata
