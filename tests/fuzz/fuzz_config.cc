// Fuzz harness: configuration parsing (runtime/config.h) over strata train's whole schema, then
// the cross-key checks (model/train/train_options.h). The first byte picks the source of the rest:
// 0 a JSON config file, 1 environment lines ("KEY=VALUE", STRATA_ added), 2 flag lines
// ("--flag value"), 3 a size and a count with units (runtime/units.h).
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "model/train/train_config_keys.h"
#include "model/train/train_options.h"
#include "offload/config_keys.h"
#include "runtime/config.h"
#include "runtime/config_keys.h"
#include "runtime/units.h"
#include "tests/fuzz/fuzz_target.h"

namespace {

const strata::ConfigSchema& schema() {
  static const strata::ConfigSchema s = [] {
    strata::ConfigSchema out;
    strata::add_runtime_config_keys(out);
    strata::add_offload_config_keys(out);
    strata::model::add_train_config_keys(out);
    return out;
  }();
  return s;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line) && out.size() < 64;) out.push_back(line);
  return out;
}

void check(const std::vector<std::pair<std::string, std::string>>& flags, std::vector<std::string> env) {
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  strata::StatusOr<strata::Config> c = strata::resolve_config(schema(), flags, envp.data());
  if (c.is_ok()) (void)strata::model::train_options_from_config(*c);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 4) {
    case 0: {
      const std::string path = std::filesystem::temp_directory_path() / ("strata-fuzz-config-" + std::to_string(getpid()) + ".json");
      std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
      check({{"--config", path}}, {});
      std::remove(path.c_str());
      break;
    }
    case 1: {
      std::vector<std::string> env;
      for (const std::string& line : lines_of(text)) env.push_back("STRATA_" + line);
      check({}, env);
      break;
    }
    case 2: {
      std::vector<std::pair<std::string, std::string>> flags;
      for (const std::string& line : lines_of(text)) {
        const size_t space = line.find(' ');
        flags.emplace_back(line.substr(0, space), space == std::string::npos ? "" : line.substr(space + 1));
      }
      check(flags, {});
      break;
    }
    default:
      (void)strata::parse_size(text);
      (void)strata::parse_count(text);
  }
  return 0;
}
