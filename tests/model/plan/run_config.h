// A training run's Config as `strata train` resolves it, for the plan room's tests: every layer's
// keys and the plan rate keys (the CLI's schema less `strata plan`'s own), from (flag, value)
// pairs and "NAME=VALUE" variables. The machine is this one on the CPU backend, with no
// calibration cache (--device cpu --calibration none unless the flags say otherwise).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "model/plan/plan_machine.h"
#include "model/train/train_config_keys.h"
#include "offload/config_keys.h"
#include "runtime/config.h"
#include "runtime/config_keys.h"

namespace strata::test {

using Flags = std::vector<std::pair<std::string, std::string>>;

inline StatusOr<Config> run_config(const Flags& flags, std::vector<std::string> env = {}) {
  ConfigSchema schema;
  add_runtime_config_keys(schema);
  add_offload_config_keys(schema);
  model::add_train_config_keys(schema);
  model::add_plan_rate_config_keys(schema);
  Flags all = {{"--device", "cpu"}, {"--calibration", "none"}};
  all.insert(all.end(), flags.begin(), flags.end());
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  return resolve_config(schema, all, envp.data());
}

}  // namespace strata::test
