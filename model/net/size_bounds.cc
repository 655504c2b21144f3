// Closed-form lower bounds of a run's bytes and the refusal when a machine cannot hold them
// (size_bounds.h).
#include "model/net/size_bounds.h"

#include <algorithm>
#include <limits>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "runtime/units.h"

namespace strata::model {
namespace {

using Wide = unsigned __int128;

uint64_t saturate(Wide v) {
  return v > Wide(std::numeric_limits<uint64_t>::max()) ? std::numeric_limits<uint64_t>::max() : uint64_t(v);
}

uint64_t moment_bytes_per_param(AdamStates states) { return states == AdamStates::f32 ? 8 : 2; }

std::string budget_text(uint64_t bytes, const std::string& from) {
  return fmt::format("{} ({})", bytes == 0 ? std::string("none") : format_size(bytes), from);
}

}  // namespace

SizeFloor size_floor(const ModelConfig& c, const TrainOptions& o) {
  SizeFloor f;
  f.params = parameter_count(c);
  const uint64_t esize = dtype_size(o.dtype);
  // Working weight, fp32 gradient sum, fp32 master, moments.
  f.state_bytes_per_param = esize + 4 + 4 + moment_bytes_per_param(o.adam_states);
  f.state_bytes = saturate(Wide(f.params) * f.state_bytes_per_param);
  const Wide rows = Wide(o.micro_batch) * o.seq;  // B x T tokens
  const Wide residual = Wide(uint64_t(c.n_layer) + 1) * uint64_t(c.dim);
  f.activation_bytes = saturate(rows * (residual + uint64_t(c.vocab)) * esize);
  f.layer_bytes = saturate((Wide(uint64_t(c.qkv_rows())) + uint64_t(c.dim)) * uint64_t(c.dim) * esize);
  f.device_bytes = saturate(Wide(f.activation_bytes) + Wide(2) * f.layer_bytes);
  return f;
}

bool cheap_to_plan(const SizeFloor& f, const TrainOptions& o) {
  return f.params / std::max<uint64_t>(o.sub_group_size, 1) <= kMaxPlannedPieces;
}

Status check_size_floor(const ModelConfig& c, const TrainOptions& o, const Hardware& h, const BudgetSources& from,
                        std::string_view machine) {
  const SizeFloor f = size_floor(c, o);
  const uint64_t tiers = saturate(Wide(h.gpu_bytes) + h.cpu_bytes + h.nvme_bytes);
  const std::string budgets =
      fmt::format("gpu {}, cpu {}, nvme {}", budget_text(h.gpu_bytes, from[0]), budget_text(h.cpu_bytes, from[1]),
                  budget_text(h.nvme_bytes, from[2]));
  if (f.state_bytes > tiers) {
    std::vector<std::string> helps;
    if (o.adam_states == AdamStates::f32) {
      TrainOptions q8 = o;
      q8.adam_states = AdamStates::q8;
      const SizeFloor g = size_floor(c, q8);
      if (g.state_bytes <= tiers)
        helps.push_back(fmt::format("--optimizer-type adamw8bit (then at least {})", format_size(g.state_bytes)));
    }
    helps.push_back(fmt::format("at least {} more room, on an --nvme-path", format_size(f.state_bytes - tiers)));
    helps.push_back("smaller dimensions (--n-layer, --dim, --ffn-hidden, --vocab)");
    return error(Code::out_of_memory,
                 "{} fits no placement on {}: its {} parameters ({}) need at least {} for their working "
                 "weights, fp32 gradient sums, fp32 master weights and Adam moments ({} bytes per parameter in {} "
                 "with {} moments), wherever they are placed, but the machine's tiers hold {} together: {}. What "
                 "would help: {}",
                 c.name, machine, format_count(double(f.params)), f.params, format_size(f.state_bytes),
                 f.state_bytes_per_param, dtype_name(o.dtype), o.adam_states == AdamStates::f32 ? "fp32" : "8-bit",
                 format_size(tiers), budgets, fmt::join(helps, "; or "));
  }
  if (f.device_bytes > h.gpu_bytes)
    return error(Code::out_of_memory,
                 "{} fits no placement on {}: whatever the placement, the device needs at least {}: {} for "
                 "one micro-batch's activations with activation checkpointing (the residual stream at its {} layer "
                 "boundaries and the logits, for {} x {} tokens) and {} for one layer's attention weights and as "
                 "much for their gradients (no tiling cuts them), but the device has {}. What would help: a smaller "
                 "--micro-batch or --seq, or smaller dimensions (--n-layer, --dim, --vocab)",
                 c.name, machine, format_size(f.device_bytes), format_size(f.activation_bytes), c.n_layer + 1,
                 o.micro_batch, o.seq, format_size(f.layer_bytes), budget_text(h.gpu_bytes, from[0]));
  return Status::ok();
}

}  // namespace strata::model
