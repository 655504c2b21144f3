// Keys given twice in one JSON object. nlohmann::json, like most JSON parsers, keeps the last of
// them without a word, so a config file or a config.json that sets a key twice would be read
// last-wins silently; their readers ask this first and refuse such a file, naming the key. Not a
// parser of its own (nlohmann's parse callbacks walk the text) and not a validator of anything else.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace strata {

// The path of the first key found a second time in one object of `text` ("lr",
// "optimizer.params.lr", "layers[].name": array elements are "[]"), or nullopt when no object
// repeats a key. Text that does not parse gives nullopt too (the caller's own parse reports it).
std::optional<std::string> first_duplicate_json_key(std::string_view text);

}  // namespace strata
