// Library versions: runtime queries (TBB_runtime_version, hwloc's API version,
// openblas_get_config, io_uring_major/minor_version where liburing has them) and header versions
// for the header-only or static ones. Not a compatibility check.
#include "runtime/versions.h"

#include <liburing.h>

#include <fmt/format.h>
#include <hwloc.h>
#include <nlohmann/json.hpp>
#include <spdlog/version.h>
#include <tbb/version.h>

#include "runtime/backend.h"

extern "C" char* openblas_get_config(void);  // declared in OpenBLAS's cblas.h, not in every cblas.h

namespace strata {
namespace {

std::string liburing_version() {
#ifdef IO_URING_VERSION_MAJOR
  return fmt::format("{}.{}", io_uring_major_version(), io_uring_minor_version());
#else
  // liburing before 2.4 has no runtime version query: this is the version built against.
  return STRATA_LIBURING_VERSION;
#endif
}

// hwloc reports only its API version at run time (2.9.x implements API 2.8): print the release
// built against, and the runtime API when it differs from the headers' one.
std::string hwloc_version() {
  const unsigned runtime_api = hwloc_get_api_version();
  if (runtime_api == HWLOC_API_VERSION) return HWLOC_VERSION;
  return fmt::format("{} (runtime API {}.{})", HWLOC_VERSION, runtime_api >> 16, (runtime_api >> 8) & 0xff);
}

}  // namespace

std::vector<std::pair<std::string, std::string>> library_versions() {
  std::vector<std::pair<std::string, std::string>> out = {
      {"liburing", liburing_version()},
      {"hwloc", hwloc_version()},
      {"oneTBB", TBB_runtime_version()},
      {"OpenBLAS", openblas_get_config()},
      {"spdlog", fmt::format("{}.{}.{}", SPDLOG_VER_MAJOR, SPDLOG_VER_MINOR, SPDLOG_VER_PATCH)},
      {"fmt", fmt::format("{}.{}.{}", FMT_VERSION / 10000, FMT_VERSION / 100 % 100, FMT_VERSION % 100)},
      {"nlohmann-json", fmt::format("{}.{}.{}", NLOHMANN_JSON_VERSION_MAJOR, NLOHMANN_JSON_VERSION_MINOR,
                                    NLOHMANN_JSON_VERSION_PATCH)},
  };
  for (auto& v : cuda_library_versions()) out.push_back(std::move(v));
  return out;
}

}  // namespace strata
