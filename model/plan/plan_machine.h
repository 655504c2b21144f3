// The machine a plan is for (model/plan/planner.h's Hardware) and where each figure came from: this one
// -- the GPU's memory (or the CPU backend's arena), MemAvailable, the free space of each
// --nvme-path, and the rates this machine measured (the calibration cache, model/plan/calibration.h) --
// or the one --gpu-mem, --cpu-mem and --nvme-mem describe. Rates given as --rate-* (flags, STRATA_*
// variables, file keys) win over measured ones, and measured ones over the assumed defaults. Shared
// by `strata plan` and `strata train` (--offload auto and the end-of-run prediction); not the plan
// itself and not its printing (plan_report.h).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/plan/calibration.h"
#include "model/plan/planner.h"
#include "model/train/train_options.h"
#include "runtime/backend.h"
#include "runtime/config.h"
#include "runtime/config_schema.h"

namespace strata::model {

// The keys describe_machine reads besides every layer's: the calibration cache (calibration) and
// the step-time model's rates (rate_flops, rate_pcie, rate_nvme_read, rate_nvme_write, rate_adam).
// The rate defaults are PlanRates's (a workstation, assumed, not measured); a rate not given is
// taken from the calibration cache when this machine measured it.
void add_plan_rate_config_keys(ConfigSchema& schema);

// The backend `strata train` makes for `config` (--device cuda, cpu, or auto: CUDA when a device
// is visible) and why, in words.
BackendKind train_backend_kind(const Config& config, std::string* why);

// The calibration cache `config` names: --calibration FILE, "" for the default path
// (model::default_calibration_path of $XDG_CACHE_HOME and $HOME), "none" for no cache ("").
std::string calibration_path(const Config& config);

struct Machine {
  model::Hardware hardware;
  std::string gpu_from, cpu_from, nvme_from;  // where each budget came from, in words
  bool described = true;  // every budget given by a flag, none detected: another machine
  // Per rate (model::PlanRateKind order): "given", "assumed default" or "measured <day> by <command>".
  std::array<std::string, model::kPlanRateKinds> rate_source;
  std::string calibration;  // the cache file whose rates were used; "" when none
  std::string crc_source;   // hardware.rates.crc's: measured here for a CPU-backend run, else "assumed default"
  // The world's links (hardware.world): "given" or "assumed default"; `strata plan` only.
  std::string intra_node_source = "assumed default", inter_node_source = "assumed default";
  std::optional<uint64_t> memlock;  // RLIMIT_MEMLOCK when cpu memory is detected and it is finite
};

// The rate keys whose values are assumed defaults ("rate_flops", ...).
std::vector<std::string> assumed_rates(const Machine& machine);

// What the machine is described for: `strata plan` (this machine or a described one) or `strata
// train` (always this one: with no --gpu-mem, the arena the backend train makes would take).
enum class MachineFor : uint8_t { plan, train };

// The machine's budgets alone (gpu, cpu, nvme and where each came from), as describe_machine
// finds them, without its rates: what the closed-form size check (model/net/size_bounds.h) compares
// with. Errors: describe_machine's for the budgets.
StatusOr<Machine> describe_budgets(const Config& config, MachineFor purpose);

// The machine for a run of `o`. Problems with the calibration cache (corrupt, another version,
// another machine, another disk) are logged as warnings naming the file and the reason, and its
// rates are then not used. A described machine reads no cache unless --calibration names one,
// whose single machine's rates are then taken as the described machine's, whatever machine it is.
// With `strata plan`'s world keys (--ranks, --nodes, --rate-intra-node, --rate-inter-node) the world
// planned for, whose ranks each take a GPU's budget and the node's pinned memory and NVMe divided by
// the ranks per node. invalid_argument when a budget cannot be detected (no GPU and no --gpu-mem,
// ...) or is impossible (model::check_hardware).
StatusOr<Machine> describe_machine(const Config& config, const model::TrainOptions& o, MachineFor purpose);

}  // namespace strata::model
