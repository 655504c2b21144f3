// Alignment arithmetic, defined once: round_up for sizes and offsets, and the 4 KiB page. Not an allocator (Arena,
// PinnedPool) and not a policy for which alignment a buffer needs (the NvmeStore and the arena say).
// Pure, constexpr, thread-safe.
#pragma once

#include <cstdint>

namespace strata {

// `v` rounded up to a multiple of `a` (a > 0; any a, not only powers of two). round_up(0, a) == 0.
// Overflows (wraps) for v within a - 1 of UINT64_MAX: callers size real buffers, far below that.
constexpr uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// The host page strata sizes pinned memory in: PinnedPool rounds every block up to it, and chunk
// sizes are padded to it.
inline constexpr uint64_t kHostPage = 4096;

static_assert(round_up(0, 4096) == 0);
static_assert(round_up(1, 4096) == 4096);
static_assert(round_up(4096, 4096) == 4096);
static_assert(round_up(100, 24) == 120);

}  // namespace strata
