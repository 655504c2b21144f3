// Logger setup and warn_once.
#include "runtime/log.h"

#include <set>
#include <string>

#include <spdlog/sinks/stdout_color_sinks.h>

#include "runtime/mutex.h"

namespace strata {

StatusOr<spdlog::level::level_enum> parse_log_level(std::string_view name) {
  static const std::pair<std::string_view, spdlog::level::level_enum> levels[] = {
      {"trace", spdlog::level::trace}, {"debug", spdlog::level::debug}, {"info", spdlog::level::info},
      {"warn", spdlog::level::warn},   {"warning", spdlog::level::warn}, {"error", spdlog::level::err},
      {"off", spdlog::level::off}};
  for (const auto& [n, l] : levels)
    if (n == name) return l;
  return error(Code::invalid_argument, "unknown log level '{}' (use trace, debug, info, warn, error or off)", name);
}

void init_logging(spdlog::level::level_enum level) {
  spdlog::drop("strata");
  auto logger = spdlog::stderr_color_mt("strata");
  logger->set_pattern(kLogPattern);
  logger->set_level(level);
  spdlog::set_default_logger(std::move(logger));
}

void warn_once(std::string_view key, std::string_view message) {
  static Mutex mu;
  static std::set<std::string, std::less<>> seen GUARDED_BY(mu);
  {
    MutexLock lock(mu);
    if (!seen.emplace(key).second) return;
  }
  spdlog::warn("{}", message);
}

}  // namespace strata
