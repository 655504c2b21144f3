// The first repeated key of a JSON text (json_duplicates.h), found with nlohmann's parse events.
#include "runtime/json_duplicates.h"

#include <set>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata {

std::optional<std::string> first_duplicate_json_key(std::string_view text) {
  if (!nlohmann::json::accept(text.begin(), text.end())) return std::nullopt;  // the caller's parse reports it
  struct Frame {
    bool array = false;
    std::string path;  // of this object or array
    std::set<std::string> keys;
    std::string key;   // the object's key being read
  };
  std::vector<Frame> frames;
  std::optional<std::string> duplicate;
  const auto join = [](const std::string& path, const std::string& name) {
    return path.empty() ? name : path + "." + name;
  };
  const auto child_path = [&]() -> std::string {
    if (frames.empty()) return "";
    const Frame& f = frames.back();
    return f.array ? f.path + "[]" : join(f.path, f.key);
  };
  using Event = nlohmann::json::parse_event_t;
  const nlohmann::json::parser_callback_t walk = [&](int, Event event, nlohmann::json& parsed) {
    switch (event) {
      case Event::object_start:
      case Event::array_start:
        frames.push_back(Frame{.array = event == Event::array_start, .path = child_path(), .keys = {}, .key = {}});
        break;
      case Event::object_end:
      case Event::array_end:
        if (!frames.empty()) frames.pop_back();
        break;
      case Event::key:
        if (!frames.empty() && parsed.is_string()) {
          Frame& f = frames.back();
          f.key = parsed.get<std::string>();
          if (!f.keys.insert(f.key).second && !duplicate) duplicate = join(f.path, f.key);
        }
        break;
      case Event::value:
        break;
    }
    return true;  // keep every value: a discarded object reports no end, which would lose the path
  };
  const nlohmann::json ignored = nlohmann::json::parse(text.begin(), text.end(), walk, /*allow_exceptions=*/false);
  return duplicate;
}

}  // namespace strata
