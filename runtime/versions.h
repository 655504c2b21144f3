// The versions of the libraries this binary runs with, for `strata info` and bug reports:
// liburing, hwloc, oneTBB, OpenBLAS, spdlog, fmt, nlohmann-json, and the CUDA libraries when the
// CUDA backend is built (strata::cuda_library_versions). Runtime versions where the library can
// report one, else the version of the headers built against. Not a compatibility check.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace strata {

// ("hwloc", "2.9.0"), ("oneTBB", "2021.8.0"), ... in a fixed order, CUDA libraries last.
std::vector<std::pair<std::string, std::string>> library_versions();

}  // namespace strata
