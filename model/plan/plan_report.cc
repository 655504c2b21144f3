// The text and JSON of a plan (plan_report.h).
#include "model/plan/plan_report.h"

#include <algorithm>
#include <iterator>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "model/plan/tiling.h"
#include "runtime/units.h"

namespace strata::model {
namespace {

using model::PlanRateKind;
using model::PlanState;

std::string si_gb(uint64_t bytes) { return fmt::format("{:.1f} GB", double(bytes) / 1e9); }
// A shortfall: GB from 1 GB on (the suggestions' unit), below it exact ("821 KiB", not "0.0 GB").
std::string missing_amount(uint64_t bytes) { return bytes >= 1'000'000'000 ? si_gb(bytes) : format_size(bytes); }
std::string cell(uint64_t bytes) { return bytes == 0 ? "-" : format_size(bytes); }

const std::string& source(const Machine& m, PlanRateKind kind) { return m.rate_source[size_t(kind)]; }

void append_bytes(std::string& out, const model::Plan& p) {
  const model::PlanBytes& b = p.chosen.bytes;
  auto row = std::back_inserter(out);
  fmt::format_to(row, "\n{:<13}{:>14}{:>14}{:>14}\n", "bytes", "gpu", "cpu (pinned)", "nvme");
  for (size_t s = 0; s < model::kPlanStates; ++s)
    fmt::format_to(row, "{:<13}{:>14}{:>14}{:>14}\n", model::plan_state_name(PlanState(s)),
                   cell(b.at(Tier::device, PlanState(s))), cell(b.at(Tier::cpu, PlanState(s))),
                   cell(b.at(Tier::nvme, PlanState(s))));
  fmt::format_to(row, "{:<13}{:>14}{:>14}{:>14}\n", "total", format_size(b.tier(Tier::device)),
                 format_size(b.tier(Tier::cpu)), cell(b.tier(Tier::nvme)));
  const model::Hardware& h = p.hardware;
  fmt::format_to(row, "{:<13}{:>14}{:>14}{:>14}\n", "budget", format_size(h.gpu_bytes), format_size(h.cpu_bytes),
                 h.nvme_bytes ? format_size(h.nvme_bytes) : "none");
  if (model::cpu_updated_parameters(p.chosen.model, p.chosen.options) < p.params)
    out += "(split update: the resident layers' fp32 masters, moments and gradient sums are in the gpu column, "
           "updated there; the cpu column's masters and moments are every chunk's: the paged chunks' state and the "
           "resident layers' pinned mirror, for checkpoints)\n";
  if (p.chosen.options.optimizer_home == Tier::device)
    out += p.chosen.options.dtype == DType::f32
               ? "(optimizer gpu: AdamW runs on the device, whose fp32 weights are the masters and which holds the "
                 "moments; the cpu column's masters and moments are their pinned mirror, for checkpoints)\n"
               : "(optimizer gpu: AdamW runs on the device, which holds the fp32 masters and the moments; the cpu "
                 "column's masters and moments are their pinned mirror, for checkpoints)\n";
}

void append_time(std::string& out, const model::Plan& p, const Machine& m) {
  const model::StepTime& t = p.chosen.time;
  const model::StepTraffic& x = p.chosen.traffic;
  const model::PlanRates& r = p.hardware.rates;
  const double flops = r.flops > 0 ? r.flops : model::default_flops(p.chosen.options.dtype);
  auto line = std::back_inserter(out);
  const bool cpu_adam = p.chosen.options.optimizer_home != Tier::device;
  if (r.shared_cores)
    out += "\nstep time (the CPU backend: compute, copies, cpu adam and checksums share the cores, and the nvme time "
           "adds to them: the step is the sum):\n";
  else if (cpu_adam && !p.chosen.options.overlap_optimizer)
    out += "\nstep time (the transfers overlap the compute; cpu adam runs after them without --overlap-optimizer):\n";
  else if (cpu_adam)
    fmt::format_to(line,
                   "\nstep time (the transfers overlap the compute; cpu adam overlaps the first forward, {:.3g} s, "
                   "which waits for each chunk's update):\n",
                   t.forward_s);
  else
    out += "\nstep time (the transfers overlap the compute: the step is the largest):\n";
  fmt::format_to(line, "  compute   {:>9.3g} s  model FLOPs{} at {:.3g} TFLOP/s ({})\n", t.compute_s,
                 p.chosen.options.activation_checkpointing ? " x 4/3 (checkpointing recomputes the forward)" : "",
                 flops / 1e12, source(m, PlanRateKind::flops));
  fmt::format_to(line, "  pcie      {:>9.3g} s  h2d {}, d2h {} at {:.3g} GB/s each way ({})\n", t.pcie_s, si_gb(x.h2d),
                 si_gb(x.d2h), r.pcie / 1e9, source(m, PlanRateKind::pcie));
  fmt::format_to(line, "  nvme      {:>9.3g} s  read {} at {:.3g} GB/s ({}), write {} at {:.3g} GB/s ({})\n", t.nvme_s,
                 si_gb(x.nvme_read), r.nvme_read / 1e9, source(m, PlanRateKind::nvme_read), si_gb(x.nvme_write),
                 r.nvme_write / 1e9, source(m, PlanRateKind::nvme_write));
  const model::World& w = p.hardware.world;
  const uint64_t on_cpu = model::cpu_updated_parameters(p.chosen.model, p.chosen.options);
  if (w.single() && on_cpu < p.params)
    fmt::format_to(line, "  cpu adam  {:>9.3g} s  {} parameters at {:.3g} G/s ({}); the {} resident layers' {} "
                   "update on the gpu (split)\n", t.adam_s, format_count(double(on_cpu)), r.adam / 1e9,
                   source(m, PlanRateKind::adam), p.chosen.options.resident_layers,
                   format_count(double(p.params - on_cpu)));
  else if (w.single())
    fmt::format_to(line, "  cpu adam  {:>9.3g} s  {} parameters at {:.3g} G/s ({})\n", t.adam_s,
                   format_count(double(p.params)), r.adam / 1e9, source(m, PlanRateKind::adam));
  else
    fmt::format_to(line, "  cpu adam  {:>9.3g} s  {} parameters (a rank's 1/{}), x {} ranks on the node's CPU, at "
                   "{:.3g} G/s ({})\n", t.adam_s, format_count(double(p.params) / w.ranks), w.ranks,
                   w.ranks_per_node(), r.adam / 1e9, source(m, PlanRateKind::adam));
  if (!w.single()) {
    fmt::format_to(line, "  intra-node{:>9.3g} s  {} from the {} other ranks on its node at {:.3g} GB/s ({})\n",
                   t.intra_node_s, si_gb(x.network.intra_node), w.ranks_per_node() - 1, w.intra_node / 1e9,
                   m.intra_node_source);
    fmt::format_to(line, "  inter-node{:>9.3g} s  {} from the {} ranks on other nodes at {:.3g} GB/s ({})\n",
                   t.inter_node_s, si_gb(x.network.inter_node), w.ranks - w.ranks_per_node(), w.inter_node / 1e9,
                   m.inter_node_source);
  }
  if (r.shared_cores)
    fmt::format_to(line, "  crc32c    {:>9.3g} s  the NVMe bytes' checksums at {:.3g} GB/s ({})\n", t.crc_s, r.crc / 1e9,
                   m.crc_source);
  fmt::format_to(line, "  step      {:>9.3g} s  bottleneck: {}; {} tokens/s{}\n", t.step_s, t.bottleneck,
                 format_count(double(p.chosen.options.tokens_per_step()) / t.step_s),
                 w.single() ? "" : " over all ranks");
  if (assumed_rates(m).empty()) return;
  if (m.described)
    out += "rates marked \"assumed default\" describe a typical workstation, not the machine described: pass "
           "--rate-* for it, or --calibration FILE with a cache recorded on it (`strata plan --calibrate` there)\n";
  else
    out += "rates marked \"assumed default\" describe a typical workstation, not this machine: nothing was "
           "measured; run `strata plan --calibrate` (or the `strata bench` commands) to measure them, or pass "
           "--rate-*\n";
}

// The world a plan across ranks is for: ranks, nodes, the links assumed and the scheme.
void append_world(std::string& out, const model::Plan& p, const Machine& m) {
  const model::World& w = p.hardware.world;
  auto line = std::back_inserter(out);
  fmt::format_to(line,
                 "world: {}, ZeRO-3: each rank homes 1/{} of every chunk (weights, gradient sums, masters, moments) "
                 "and all-gathers a chunk whole to use it; every figure below is one rank's\n",
                 model::world_summary(w), w.ranks);
  fmt::format_to(line,
                 "links: intra-node {:.3g} GB/s per GPU each way ({}; the default is H100 SXM NVLink 4), "
                 "inter-node {:.3g} GB/s per GPU each way ({}; the default is one 400 Gb/s InfiniBand/RoCE NIC per "
                 "GPU)\n",
                 w.intra_node / 1e9, m.intra_node_source, w.inter_node / 1e9, m.inter_node_source);
}

// A rank's bytes per step on each link, what limits the step, and what `strata train` runs today.
void append_rank_traffic(std::string& out, const model::Plan& p) {
  const model::World& w = p.hardware.world;
  const model::StepTraffic& x = p.chosen.traffic;
  const model::StepTime& t = p.chosen.time;
  auto line = std::back_inserter(out);
  fmt::format_to(line, "\nbytes a rank moves per step ({} micro-batch{} of its own):\n",
                 p.chosen.options.grad_accum / w.ranks, p.chosen.options.grad_accum / w.ranks == 1 ? "" : "es");
  fmt::format_to(line, "  pcie        h2d {}, d2h {} (its own shards, the batches, a cpu optimizer's gradient shards)\n",
                 si_gb(x.h2d), si_gb(x.d2h));
  fmt::format_to(line,
                 "  network     received {} (all-gathers {}, fp32 gradient reduce-scatters {}), as much sent\n",
                 si_gb(x.network.gathered + x.network.reduced), si_gb(x.network.gathered), si_gb(x.network.reduced));
  fmt::format_to(line, "    intra-node {} ({}/{} of each collective's chunk: the ranks on its node)\n",
                 si_gb(x.network.intra_node), w.ranks_per_node() - 1, w.ranks);
  fmt::format_to(line,
                 "    inter-node {} ({}/{}: the ranks on other nodes, as an all-to-all moves it; for the gathers an "
                 "upper bound, a ring crosses nodes less)\n",
                 si_gb(x.network.inter_node), w.ranks - w.ranks_per_node(), w.ranks);
  fmt::format_to(line, "  nvme        read {}, write {} (the node's drives serve its {} ranks)\n", si_gb(x.nvme_read),
                 si_gb(x.nvme_write), w.ranks_per_node());
  // The parts, the largest (the bottleneck) first.
  std::vector<std::pair<double, std::string_view>> parts = {
      {t.compute_s, "compute"}, {t.pcie_s, "pcie"},   {t.nvme_s, "nvme"},
      {t.adam_s, "cpu_adam"},   {t.crc_s, "crc32c"},  {t.intra_node_s, "intra_node"},
      {t.inter_node_s, "inter_node"}};  // StepTime::bottleneck's names and order
  std::stable_sort(parts.begin(), parts.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string then;
  for (size_t i = 1; i < parts.size() && parts[i].first > 0; ++i)
    then += fmt::format("{}{} {:.3g} s", then.empty() ? "; then " : ", ", parts[i].second, parts[i].first);
  fmt::format_to(line, "limit: {} {:.3g} s{} (the step: {:.3g} s)\n", parts[0].second, parts[0].first, then,
                 t.step_s);
  const model::TrainAcrossRanks today = model::train_across_ranks_today(p.chosen.options);
  fmt::format_to(line, "today: {}; this placement: {}\n", today.text, today.verdict);
}

}  // namespace

std::string plan_shortfall(const model::Plan& p) {
  std::string out = fmt::format("does not fit: the closest placement ({}) needs", model::candidate_summary(p.chosen));
  for (size_t t = 0; t < kTiers; ++t)
    if (p.chosen.missing[t] > 0)
      out += fmt::format(" {} more {}", missing_amount(p.chosen.missing[t]), model::plan_tier_name(Tier(t)));
  return out;
}

std::string plan_text(const model::Plan& p, const Machine& m) {
  std::string out;
  auto line = std::back_inserter(out);
  const model::TrainOptions& o = p.chosen.options;
  fmt::format_to(line, "model: {} ({} parameters), {}, micro-batch {} x seq {} x grad-accum {} = {} tokens per step, {}\n",
                 p.config.name, format_count(double(p.params)), dtype_name(o.dtype), o.micro_batch, o.seq,
                 o.grad_accum, o.tokens_per_step(),
                 o.adam_states == AdamStates::q8 ? "AdamW with 8-bit moments" : "AdamW with fp32 moments");
  const model::Hardware& h = p.hardware;
  fmt::format_to(line, "machine{}: gpu {} ({}), cpu {} pinned ({}), nvme {} ({})\n", m.described ? " (described)" : "",
                 format_size(h.gpu_bytes), m.gpu_from, format_size(h.cpu_bytes), m.cpu_from,
                 h.nvme_bytes ? si_gb(h.nvme_bytes) : "none", m.nvme_from);
  if (!m.calibration.empty()) fmt::format_to(line, "measured rates from {}\n", m.calibration);
  if (!p.hardware.world.single()) append_world(out, p, m);
  if (p.fits)
    fmt::format_to(line, "\nfits: {}\n  strata train {}\n", model::placement_summary(o), model::placement_flags(o));
  if (p.fits && !model::tiling_flags(p.chosen.model, model::TrainOptions{}).empty()) {
    const std::string flags = model::tiling_flags(p.chosen.model, o);
    fmt::format_to(line, "tiles: {} ({})\n", model::tiling_summary(p.chosen.model),
                   flags.empty() ? "as given"
                                 : "auto = " + flags + ": the fewest with which this placement fits the GPU");
  }
  if (!p.untiled_alternatives.empty()) {
    fmt::format_to(line, "untiled instead (tiled, the step is about {:.3g} s):\n", p.chosen.time.step_s);
    for (const model::PlanSuggestion& s : p.untiled_alternatives)
      fmt::format_to(line, "  {}: {}\n", s.change, s.effect);
  }
  if (!p.fits)
    fmt::format_to(line, "\n{}\n", plan_shortfall(p));
  append_bytes(out, p);
  append_time(out, p, m);
  if (!p.hardware.world.single()) append_rank_traffic(out, p);
  if (m.memlock && p.chosen.bytes.tier(Tier::cpu) > *m.memlock)
    fmt::format_to(line,
                   "\nwarning: the plan pins {} but the locked-memory limit is {} (ulimit -l): memory past it is "
                   "pageable, so copies run slower; raise `ulimit -l`\n",
                   format_size(p.chosen.bytes.tier(Tier::cpu)), format_size(*m.memlock));
  if (p.fits) return out;
  out += "\nwhat would make it fit:\n";
  for (const model::PlanSuggestion& s : p.suggestions) fmt::format_to(line, "  {}: {}\n", s.change, s.effect);
  return out;
}

nlohmann::json plan_json(const model::Plan& p, const Machine& m) {
  const model::PlanCandidate& c = p.chosen;
  nlohmann::json j;
  j["fits"] = p.fits;
  j["model"] = p.config.name;
  j["params"] = p.params;
  j["gpu_bytes"] = c.bytes.tier(Tier::device);
  j["cpu_bytes"] = c.bytes.tier(Tier::cpu);
  j["nvme_bytes"] = c.bytes.tier(Tier::nvme);
  j["step_s"] = c.time.step_s;
  j["bottleneck"] = c.time.bottleneck;
  j["budgets"] = {{"gpu", p.hardware.gpu_bytes}, {"cpu", p.hardware.cpu_bytes}, {"nvme", p.hardware.nvme_bytes}};
  j["missing"] = {{"gpu", c.missing[0]}, {"cpu", c.missing[1]}, {"nvme", c.missing[2]}};
  j["described"] = m.described;
  j["placement"] = {{"summary", model::placement_summary(c.options)},
                    {"flags", model::placement_flags(c.options)},
                    {"offload_param", model::offload_value(c.options.weight_home)},
                    {"offload_optimizer", model::offload_value(c.options.optimizer_home)},
                    {"optimizer_device", !c.options.cpu_optimizer()                               ? "device"
                                         : c.options.split_update && c.options.paged_weights() ? "split"
                                                                                                 : "cpu"},
                    {"offload_grad", c.options.grad_home == Tier::nvme ? "nvme" : "cpu"},
                    {"resident_layers", c.options.paged_weights() ? c.options.resident_layers : c.model.n_layer},
                    {"param_cache", c.options.weight_home == Tier::nvme ? std::max<int64_t>(c.options.param_cache, 0) : 0},
                    {"activation_checkpointing", c.options.activation_checkpointing}};
  j["tiling"] = {{"summary", model::tiling_summary(c.model)},
                 {"flags", model::tiling_flags(c.model, model::TrainOptions{})},
                 {"mlp_tiles", model::mlp_tiles(c.model)},
                 {"vocab_tile", c.model.vocab_tile},
                 {"vocab_tiles", model::vocab_tiles(c.model)}};
  for (size_t t = 0; t < kTiers; ++t)
    for (size_t s = 0; s < model::kPlanStates; ++s)
      j["bytes"][model::plan_tier_name(Tier(t))][model::plan_state_name(PlanState(s))] =
          c.bytes.at(Tier(t), PlanState(s));
  j["time"] = {{"compute_s", c.time.compute_s}, {"pcie_s", c.time.pcie_s}, {"nvme_s", c.time.nvme_s},
               {"cpu_adam_s", c.time.adam_s}, {"crc32c_s", c.time.crc_s}, {"forward_s", c.time.forward_s},
               {"shared_cores", p.hardware.rates.shared_cores}};
  j["traffic"] = {{"h2d", c.traffic.h2d}, {"d2h", c.traffic.d2h}, {"nvme_read", c.traffic.nvme_read},
                  {"nvme_write", c.traffic.nvme_write}};
  const model::PlanRates& r = p.hardware.rates;
  j["rates"] = {{"flops", r.flops > 0 ? r.flops : model::default_flops(c.options.dtype)}, {"pcie", r.pcie},
                {"nvme_read", r.nvme_read}, {"nvme_write", r.nvme_write}, {"adam", r.adam}};
  for (size_t k = 0; k < model::kPlanRateKinds; ++k)
    j["rate_sources"][std::string(model::plan_rate_key(PlanRateKind(k)).substr(5))] = m.rate_source[k];
  j["assumed_rates"] = assumed_rates(m);
  j["calibration"] = m.calibration;
  if (const model::World& w = p.hardware.world; !w.single()) {
    const model::NetworkTraffic& n = c.traffic.network;
    const model::TrainAcrossRanks today = model::train_across_ranks_today(c.options);
    j["world"] = {
        {"ranks", w.ranks},
        {"nodes", w.nodes},
        {"ranks_per_node", w.ranks_per_node()},
        {"scheme", "zero-3"},
        {"per_rank", true},  // every byte figure of this document is one rank's
        {"links", {{"intra_node", {{"rate", w.intra_node}, {"source", m.intra_node_source}}},
                   {"inter_node", {{"rate", w.inter_node}, {"source", m.inter_node_source}}}}},
        {"traffic", {{"h2d", c.traffic.h2d}, {"d2h", c.traffic.d2h}, {"nvme_read", c.traffic.nvme_read},
                     {"nvme_write", c.traffic.nvme_write}, {"gathered", n.gathered}, {"reduced", n.reduced},
                     {"intra_node", n.intra_node}, {"inter_node", n.inter_node}}},
        {"time", {{"intra_node_s", c.time.intra_node_s}, {"inter_node_s", c.time.inter_node_s}}},
        {"limit", c.time.bottleneck},
        {"train_today", {{"text", today.text}, {"verdict", today.verdict}}}};
  }
  for (const auto& [key, list] : {std::pair{"suggestions", &p.suggestions}, std::pair{"untiled_alternatives",
                                                                                     &p.untiled_alternatives}}) {
    j[key] = nlohmann::json::array();
    for (const model::PlanSuggestion& s : *list)
      j[key].push_back({{"change", s.change}, {"effect", s.effect}, {"fits", s.fits}, {"step_s", s.step_s}});
  }
  return j;
}

}  // namespace strata::model
