// Small text helpers shared by the parsers of user input (units, config values): trimming
// whitespace and ASCII lower-casing. Not locale-aware and not a string library.
#pragma once

#include <string>
#include <string_view>

namespace strata {

// `s` without leading and trailing whitespace (a view into `s`).
std::string_view trim(std::string_view s);
// ASCII lower case ("GiB" -> "gib"); other bytes unchanged.
std::string to_lower(std::string_view s);

}  // namespace strata
