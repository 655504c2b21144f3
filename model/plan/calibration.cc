// The calibration cache (calibration.h): the JSON file, the machine fingerprint and the choice of
// cached rates for a run.
#include "model/plan/calibration.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/backend.h"
#include "runtime/topology.h"
#include "runtime/units.h"

namespace strata::model {
namespace {

using Json = nlohmann::ordered_json;

bool within_2_percent(uint64_t a, uint64_t b) {
  const uint64_t hi = std::max(a, b), lo = std::min(a, b);
  return hi - lo <= hi / 50;
}

bool known_rate(std::string_view rate) {
  return std::find(kRateNames.begin(), kRateNames.end(), rate) != kRateNames.end();
}
bool is_nvme(std::string_view rate) { return rate == "nvme_read" || rate == "nvme_write"; }
bool is_pcie(std::string_view rate) { return rate == "pcie_h2d" || rate == "pcie_d2h"; }

// The qualifiers `rate` needs, as (field name, value) pairs.
std::vector<std::pair<std::string_view, const std::string*>> qualifiers(const CalibrationRate& r) {
  if (is_nvme(r.rate)) return {{"path", &r.path}, {"filesystem", &r.filesystem}};
  if (is_pcie(r.rate)) return {{"backend", &r.backend}, {"device", &r.device}};
  if (r.rate == "flops") return {{"backend", &r.backend}, {"device", &r.device}, {"precision", &r.precision}};
  return {{"states", &r.states}};  // adam
}

Json fingerprint_json(const MachineFingerprint& m) {
  Json gpus = Json::array();
  for (const GpuFingerprint& g : m.gpus) gpus.push_back({{"name", g.name}, {"memory_bytes", g.memory_bytes}});
  return {{"cpu", m.cpu}, {"logical_cpus", m.logical_cpus}, {"ram_bytes", m.ram_bytes}, {"gpus", gpus}};
}

Json rate_json(const CalibrationRate& r) {
  Json j = {{"rate", r.rate}, {"value", r.value}};
  if (is_pcie(r.rate) || r.rate == "flops") {
    j["backend"] = r.backend;
    j["device"] = r.device;
  }
  if (r.rate == "flops") j["precision"] = r.precision;
  if (r.rate == "adam") {
    j["states"] = r.states;
    j["threads"] = r.threads;
  }
  if (is_nvme(r.rate)) {
    j["path"] = r.path;
    j["disk"] = r.disk;
    j["filesystem"] = r.filesystem;
  }
  j["measured_at"] = r.measured_at;
  j["by"] = r.by;
  j["how"] = r.how;
  return j;
}

// The field `name` of `j` as a string ("" when absent); a present non-string is an error.
StatusOr<std::string> text_field(const Json& j, const char* name, const std::string& where) {
  if (!j.contains(name)) return std::string();
  if (!j[name].is_string()) return error(Code::corruption, "{}: \"{}\" is not a string", where, name);
  return j[name].get<std::string>();
}

StatusOr<MachineFingerprint> parse_fingerprint(const Json& j, const std::string& where) {
  if (!j.is_object() || !j.contains("cpu") || !j.contains("logical_cpus") || !j.contains("ram_bytes") ||
      !j.contains("gpus") || !j["logical_cpus"].is_number_unsigned() || !j["ram_bytes"].is_number_unsigned() ||
      !j["gpus"].is_array())
    return error(Code::corruption, "{}: \"machine\" needs cpu, logical_cpus, ram_bytes and gpus", where);
  MachineFingerprint m;
  STRATA_ASSIGN_OR_RETURN(m.cpu, text_field(j, "cpu", where));
  m.logical_cpus = j["logical_cpus"].get<int>();
  m.ram_bytes = j["ram_bytes"].get<uint64_t>();
  for (const Json& g : j["gpus"]) {
    if (!g.is_object() || !g.contains("memory_bytes") || !g["memory_bytes"].is_number_unsigned())
      return error(Code::corruption, "{}: a GPU needs name and memory_bytes", where);
    GpuFingerprint gpu;
    STRATA_ASSIGN_OR_RETURN(gpu.name, text_field(g, "name", where));
    gpu.memory_bytes = g["memory_bytes"].get<uint64_t>();
    m.gpus.push_back(std::move(gpu));
  }
  return m;
}

StatusOr<CalibrationRate> parse_rate(const Json& j, const std::string& where) {
  if (!j.is_object()) return error(Code::corruption, "{} is not an object", where);
  CalibrationRate r;
  STRATA_ASSIGN_OR_RETURN(r.rate, text_field(j, "rate", where));
  if (!known_rate(r.rate))
    return error(Code::corruption, "{}: unknown rate \"{}\" (known: {})", where, r.rate, fmt::join(kRateNames, ", "));
  if (!j.contains("value") || !j["value"].is_number() || !(j["value"].get<double>() > 0) ||
      !std::isfinite(j["value"].get<double>()))
    return error(Code::corruption, "{} ({}): \"value\" must be a number above 0", where, r.rate);
  r.value = j["value"].get<double>();
  for (auto [name, field] : {std::pair{"backend", &r.backend}, {"device", &r.device}, {"precision", &r.precision},
                             {"states", &r.states}, {"path", &r.path}, {"disk", &r.disk},
                             {"filesystem", &r.filesystem}, {"measured_at", &r.measured_at}, {"by", &r.by},
                             {"how", &r.how}}) {
    STRATA_ASSIGN_OR_RETURN(*field, text_field(j, name, where));
  }
  if (j.contains("threads") && j["threads"].is_number_integer()) r.threads = j["threads"].get<int>();
  if (r.measured_at.size() < 10 || r.by.empty())
    return error(Code::corruption, "{} ({}): \"measured_at\" and \"by\" say when and how it was measured", where, r.rate);
  for (const auto& [name, value] : qualifiers(r))
    if (value->empty()) return error(Code::corruption, "{} ({}): \"{}\" is missing", where, r.rate, name);
  return r;
}

std::string day(const CalibrationRate& r) { return r.measured_at.substr(0, 10); }

std::string source_of(const CalibrationRate& r) { return fmt::format("measured {} by {}", day(r), r.by); }

// The sources of several measurements, each once.
std::string sources_of(const std::vector<const CalibrationRate*>& rates) {
  std::vector<std::string> out;
  for (const CalibrationRate* r : rates)
    if (std::find(out.begin(), out.end(), source_of(*r)) == out.end()) out.push_back(source_of(*r));
  return fmt::format("{}", fmt::join(out, "; "));
}

std::string disk_name(const std::string& disk, const std::string& filesystem) {
  return fmt::format("{} ({})", disk.empty() ? "no block device" : disk, filesystem);
}

// The NVMe rate `name` summed over the query's disks, or nullopt with a note.
std::optional<CachedRate> nvme_rate(const std::vector<CalibrationRate>& rates, const RateQuery& q,
                                    std::string_view name, std::vector<std::string>& notes) {
  if (q.nvme.empty()) return std::nullopt;
  std::map<std::string, const CalibrationRate*> per_disk;  // a disk (or a path without one) counts once
  for (const NvmeDisk& d : q.nvme) {
    const CalibrationRate* found = nullptr;
    for (const CalibrationRate& r : rates) {
      if (r.rate != name || r.path != d.path) continue;
      if (r.disk != d.disk || r.filesystem != d.filesystem) {
        notes.push_back(fmt::format("{} of {} was measured on {}, and the path is on {} now: not used", name, d.path,
                                    disk_name(r.disk, r.filesystem), disk_name(d.disk, d.filesystem)));
        continue;
      }
      found = &r;
    }
    if (found == nullptr && !d.disk.empty())
      for (const CalibrationRate& r : rates)
        if (r.rate == name && r.disk == d.disk && r.filesystem == d.filesystem) found = &r;
    if (found == nullptr) {
      notes.push_back(fmt::format("no {} measured for {} ({}): run `strata bench io --path {}` or `strata plan "
                                  "--calibrate`",
                                  name, d.path, disk_name(d.disk, d.filesystem), d.path));
      return std::nullopt;
    }
    per_disk[d.disk.empty() ? d.path : d.disk] = found;
  }
  CachedRate out;
  std::vector<const CalibrationRate*> used;
  for (const auto& [disk, r] : per_disk) {
    out.value += r->value;
    used.push_back(r);
  }
  out.source = sources_of(used);
  if (per_disk.size() > 1) out.source += fmt::format(", {} disks summed", per_disk.size());
  return out;
}

}  // namespace

StatusOr<MachineFingerprint> this_machine() {
  STRATA_ASSIGN_OR_RETURN(Topology topo, Topology::discover());
  MachineFingerprint m;
  m.cpu = topo.cpu_model();
  m.logical_cpus = topo.hardware_threads();
  m.ram_bytes = topo.total_memory_bytes();
  for (const DeviceDescription& d : list_cuda_devices()) m.gpus.push_back({d.name, d.total_memory});
  return m;
}

std::string describe_fingerprint(const MachineFingerprint& m) {
  std::vector<std::string> gpus;
  for (const GpuFingerprint& g : m.gpus) gpus.push_back(fmt::format("{} ({})", g.name, format_size(g.memory_bytes)));
  return fmt::format("{}, {} CPUs, {} RAM, {}", m.cpu.empty() ? "unknown CPU" : m.cpu, m.logical_cpus,
                     format_size(m.ram_bytes), gpus.empty() ? "no GPU" : fmt::format("{}", fmt::join(gpus, ", ")));
}

std::string fingerprint_difference(const MachineFingerprint& here, const MachineFingerprint& file) {
  if (here.cpu != file.cpu) return fmt::format("the CPU is \"{}\" here but \"{}\" in the file", here.cpu, file.cpu);
  if (here.logical_cpus != file.logical_cpus)
    return fmt::format("{} CPUs here but {} in the file", here.logical_cpus, file.logical_cpus);
  if (!within_2_percent(here.ram_bytes, file.ram_bytes))
    return fmt::format("{} of RAM here but {} in the file", format_size(here.ram_bytes), format_size(file.ram_bytes));
  if (here.gpus.size() != file.gpus.size())
    return fmt::format("{} GPU(s) here but {} in the file", here.gpus.size(), file.gpus.size());
  for (size_t i = 0; i < here.gpus.size(); ++i)
    if (here.gpus[i].name != file.gpus[i].name ||
        !within_2_percent(here.gpus[i].memory_bytes, file.gpus[i].memory_bytes))
      return fmt::format("GPU {} is {} ({}) here but {} ({}) in the file", i, here.gpus[i].name,
                         format_size(here.gpus[i].memory_bytes), file.gpus[i].name,
                         format_size(file.gpus[i].memory_bytes));
  return "";
}

bool same_slot(const CalibrationRate& a, const CalibrationRate& b) {
  if (a.rate != b.rate) return false;
  const auto theirs = qualifiers(b);
  for (const auto& mine : qualifiers(a)) {
    // Not a structured binding: clang 14 (Debian's, the fuzz build) cannot capture one.
    const auto it = std::find_if(theirs.begin(), theirs.end(),
                                 [&](const auto& q) { return q.first == mine.first; });
    if (it == theirs.end() || *it->second != *mine.second) return false;
  }
  return true;
}

StatusOr<CalibrationCache> parse_calibration(std::string_view text, const std::string& path) {
  const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return error(Code::corruption, "{} is not JSON", path);
  if (!j.is_object() || !j.contains("format") || j["format"] != kCalibrationFormat)
    return error(Code::corruption, "{} is not a strata calibration file (no \"format\": \"{}\")", path,
                 kCalibrationFormat);
  if (!j.contains("version") || !j["version"].is_number_integer())
    return error(Code::corruption, "{} has no \"version\"", path);
  if (j["version"].get<int64_t>() != kCalibrationVersion)
    return error(Code::failed_precondition, "{} is version {}; this strata reads version {}", path,
                 j["version"].get<int64_t>(), kCalibrationVersion);
  if (!j.contains("machines") || !j["machines"].is_array())
    return error(Code::corruption, "{} has no \"machines\" list", path);
  CalibrationCache cache;
  for (size_t m = 0; m < j["machines"].size(); ++m) {
    const Json& entry = j["machines"][m];
    const std::string where = fmt::format("{}: machine {}", path, m);
    if (!entry.is_object() || !entry.contains("machine") || !entry.contains("rates") || !entry["rates"].is_array())
      return error(Code::corruption, "{} needs \"machine\" and \"rates\"", where);
    MachineRates mr;
    STRATA_ASSIGN_OR_RETURN(mr.machine, parse_fingerprint(entry["machine"], where));
    for (size_t r = 0; r < entry["rates"].size(); ++r) {
      STRATA_ASSIGN_OR_RETURN(CalibrationRate rate, parse_rate(entry["rates"][r], fmt::format("{}, rate {}", where, r)));
      mr.rates.push_back(std::move(rate));
    }
    cache.machines.push_back(std::move(mr));
  }
  return cache;
}

std::string calibration_json(const CalibrationCache& cache) {
  Json machines = Json::array();
  for (const MachineRates& m : cache.machines) {
    Json rates = Json::array();
    for (const CalibrationRate& r : m.rates) rates.push_back(rate_json(r));
    machines.push_back({{"machine", fingerprint_json(m.machine)}, {"rates", rates}});
  }
  const Json j = {{"format", kCalibrationFormat}, {"version", kCalibrationVersion}, {"machines", machines}};
  return j.dump(2) + "\n";
}

StatusOr<std::optional<CalibrationCache>> read_calibration(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    const int err = errno;
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) return std::optional<CalibrationCache>();
    return errno_status(err, fmt::format("reading calibration file {}", path));
  }
  std::stringstream text;
  text << in.rdbuf();
  STRATA_ASSIGN_OR_RETURN(CalibrationCache cache, parse_calibration(text.str(), path));
  return std::optional<CalibrationCache>(std::move(cache));
}

Status write_calibration(const std::string& path, const CalibrationCache& cache) {
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  if (ec) return errno_status(ec.value(), fmt::format("creating the directory of calibration file {}", path));
  // A temporary file renamed over the old one: a reader sees the old file or the new, never half.
  const std::string temp = fmt::format("{}.tmp.{}", path, ::getpid());
  std::ofstream out(temp, std::ios::trunc);
  out << calibration_json(cache);
  out.close();
  if (!out) {
    const int err = errno;
    std::filesystem::remove(temp, ec);
    return errno_status(err, fmt::format("writing {}", temp));
  }
  std::filesystem::rename(temp, path, ec);
  if (ec) {
    const int err = ec.value();
    std::filesystem::remove(temp, ec);
    return errno_status(err, fmt::format("replacing calibration file {}", path));
  }
  return Status::ok();
}

void record_rates(CalibrationCache& cache, const MachineFingerprint& machine, const std::vector<CalibrationRate>& rates) {
  auto it = std::find_if(cache.machines.begin(), cache.machines.end(),
                         [&](const MachineRates& m) { return fingerprint_difference(machine, m.machine).empty(); });
  if (it == cache.machines.end()) it = cache.machines.insert(cache.machines.end(), MachineRates{machine, {}});
  it->machine = machine;  // the latest figures (RAM moves within the tolerance)
  for (const CalibrationRate& r : rates) {
    auto old = std::find_if(it->rates.begin(), it->rates.end(), [&](const CalibrationRate& o) { return same_slot(o, r); });
    if (old != it->rates.end())
      *old = r;
    else
      it->rates.push_back(r);
  }
}

const MachineRates* rates_of(const CalibrationCache& cache, const MachineFingerprint& machine) {
  for (const MachineRates& m : cache.machines)
    if (fingerprint_difference(machine, m.machine).empty()) return &m;
  return nullptr;
}

std::string default_calibration_path(const char* xdg_cache_home, const char* home) {
  if (xdg_cache_home != nullptr && *xdg_cache_home != '\0')
    return (std::filesystem::path(xdg_cache_home) / "strata" / "calibration.json").string();
  if (home != nullptr && *home != '\0')
    return (std::filesystem::path(home) / ".cache" / "strata" / "calibration.json").string();
  return "";
}

std::string utc_timestamp() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

std::string_view plan_rate_key(PlanRateKind kind) {
  switch (kind) {
    case PlanRateKind::flops: return "rate_flops";
    case PlanRateKind::pcie: return "rate_pcie";
    case PlanRateKind::nvme_read: return "rate_nvme_read";
    case PlanRateKind::nvme_write: return "rate_nvme_write";
    case PlanRateKind::adam: return "rate_adam";
  }
  return "?";
}

std::string_view flops_precision(DType dtype, bool tf32) {
  switch (dtype) {
    case DType::bf16: return "bf16";
    case DType::f16: return "fp16";
    default: return tf32 ? "tf32" : "fp32";
  }
}

CachedRates cached_rates(const std::vector<CalibrationRate>& rates, const RateQuery& q) {
  CachedRates out;
  const auto on_device = [&](const CalibrationRate& r) {
    return r.backend == q.backend && (q.backend != "cuda" || r.device == q.device);
  };
  for (const CalibrationRate& r : rates)
    if (r.rate == "flops" && on_device(r) && r.precision == q.precision)
      out.rates[size_t(PlanRateKind::flops)] = CachedRate{r.value, source_of(r)};
  const CalibrationRate* slower = nullptr;
  for (const CalibrationRate& r : rates)
    if (is_pcie(r.rate) && on_device(r) && (slower == nullptr || r.value < slower->value)) slower = &r;
  if (slower != nullptr)
    out.rates[size_t(PlanRateKind::pcie)] =
        CachedRate{slower->value, fmt::format("{} ({}, the slower way)", source_of(*slower), slower->rate.substr(5))};
  for (const CalibrationRate& r : rates)
    if (r.rate == "adam" && r.states == q.states)
      out.rates[size_t(PlanRateKind::adam)] = CachedRate{r.value, source_of(r)};
  out.rates[size_t(PlanRateKind::nvme_read)] = nvme_rate(rates, q, "nvme_read", out.notes);
  out.rates[size_t(PlanRateKind::nvme_write)] = nvme_rate(rates, q, "nvme_write", out.notes);
  return out;
}

}  // namespace strata::model
