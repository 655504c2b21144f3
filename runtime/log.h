// Logging: spdlog's default logger, writing to stderr, configured once by the CLI.
// Call sites use spdlog::info/warn/error/debug directly. The level comes from --log-level /
// STRATA_LOG_LEVEL / the "log_level" config key (trace, debug, info, warn, error, off).
// Not a metrics or tracing facility (those are --metrics and --trace).
#pragma once

#include <string_view>

#include <spdlog/spdlog.h>

#include "runtime/status.h"

namespace strata {

StatusOr<spdlog::level::level_enum> parse_log_level(std::string_view name);

// strata's log line: "[12:00:01.123] [warning] message", the time and level coloured on a terminal.
inline constexpr const char* kLogPattern = "%^[%H:%M:%S.%e] [%l]%$ %v";

// Installs the stderr logger with strata's pattern (kLogPattern) at `level`. A terminal's live
// status line under the log is runtime/status_line.h's StatusLine::install instead.
// Thread-safe after the call; call before starting worker threads.
void init_logging(spdlog::level::level_enum level);

// Logs `message` at warn level the first time it is called with a given `key`, then never again
// for that key (e.g. "pinned memory unavailable: falling back to pageable"). Thread-safe.
void warn_once(std::string_view key, std::string_view message);

}  // namespace strata
