// The --metrics JSON lines file and the progress/summary text (see metrics_log.h).
#include "model/train/metrics_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <cmath>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/units.h"

namespace strata::model {
namespace {

// A finite number as itself, anything else as null (JSON has no NaN or Infinity).
nlohmann::ordered_json number(double v) {
  if (!std::isfinite(v)) return nullptr;
  return v;
}

// "gpu 41 MiB (peak 52 MiB)".
std::string tier_text(std::string_view name, uint64_t now, uint64_t peak) {
  return fmt::format("{} {} (peak {})", name, format_size(now), format_size(peak));
}

}  // namespace

StatusOr<MetricsLog> MetricsLog::open(const std::string& path, Mode mode) {
  std::FILE* f = std::fopen(path.c_str(), mode == Mode::append ? "a" : "w");
  if (f == nullptr) return errno_status(errno, fmt::format("cannot open metrics file {} (--metrics)", path));
  return MetricsLog(f, path);
}

MetricsLog::MetricsLog(MetricsLog&& other) noexcept
    : file_(std::exchange(other.file_, nullptr)), path_(std::move(other.path_)) {}

MetricsLog& MetricsLog::operator=(MetricsLog&& other) noexcept {
  if (this != &other) {
    if (file_ != nullptr) std::fclose(file_);
    file_ = std::exchange(other.file_, nullptr);
    path_ = std::move(other.path_);
  }
  return *this;
}

MetricsLog::~MetricsLog() {
  if (file_ != nullptr) std::fclose(file_);
}

Status MetricsLog::write(const StepMetrics& metrics) {
  if (file_ == nullptr)
    return error(Code::failed_precondition, "metrics file {} was moved from; write to the MetricsLog it moved to",
                 path_);
  const std::string line = metrics_json_line(metrics) + "\n";
  errno = 0;
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    const int err = errno != 0 ? errno : EIO;
    std::clearerr(file_);
    return errno_status(err, fmt::format("cannot write step {} to metrics file {}", metrics.step, path_));
  }
  return Status::ok();
}

std::string metrics_json_line(const StepMetrics& m) {
  nlohmann::ordered_json j;  // keys in the order written: step first, as a reader scans them
  j["step"] = m.step;
  j["loss"] = number(m.loss);
  j["lr"] = number(m.lr);
  j["tokens_per_s"] = number(m.tokens_per_s);
  j["step_s"] = number(m.step_s);
  j["peak_bytes"] = {{"gpu", m.peak_bytes.gpu}, {"cpu", m.peak_bytes.cpu}, {"nvme", m.peak_bytes.nvme}};
  if (m.val_loss) j["val_loss"] = number(*m.val_loss);
  if (m.grad_norm) j["grad_norm"] = number(*m.grad_norm);
  if (m.loss_scale) j["loss_scale"] = number(*m.loss_scale);
  if (m.skipped) j["skipped"] = true;
  if (m.tflops) j["tflops"] = number(*m.tflops);
  if (m.mfu) j["mfu"] = number(*m.mfu);
  if (m.device_used_bytes) j["device_used_bytes"] = *m.device_used_bytes;
  if (const auto& t = m.transfers) {
    j["transfers"] = {{"h2d_gbps", number(t->h2d_gbps)},           {"d2h_gbps", number(t->d2h_gbps)},
                      {"nvme_read_gbps", number(t->nvme_read_gbps)}, {"nvme_write_gbps", number(t->nvme_write_gbps)},
                      {"wait_s", number(t->wait_s)},               {"wait_fraction", number(t->wait_fraction)}};
  }
  return j.dump();
}

namespace {

// A number field of a step row: a JSON number, or null (written for a non-finite value) as NaN.
bool read_number(const nlohmann::json& row, const char* key, double* out) {
  const auto it = row.find(key);
  if (it == row.end()) return false;
  if (it->is_null()) {
    *out = std::nan("");
    return true;
  }
  if (!it->is_number()) return false;
  *out = it->get<double>();
  return true;
}

bool read_bytes(const nlohmann::json& row, const char* tier, uint64_t* out) {
  const auto peak = row.find("peak_bytes");
  if (peak == row.end() || !peak->is_object()) return false;
  const auto it = peak->find(tier);
  if (it == peak->end() || !it->is_number_unsigned()) return false;
  *out = it->get<uint64_t>();
  return true;
}

}  // namespace

StatusOr<std::vector<StepMetrics>> read_metrics_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return errno_status(errno, fmt::format("cannot read metrics file {}", path));
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(std::move(line));
  if (in.bad()) return errno_status(errno, fmt::format("reading metrics file {}", path));
  std::vector<StepMetrics> rows;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(lines[i], nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) {
      if (i + 1 == lines.size() && !rows.empty()) break;  // cut short by a kill
      return error(Code::invalid_argument, "{} line {} is not a JSON object: not a `strata train --metrics` file?",
                   path, i + 1);
    }
    if (!j.contains("step") || !j.contains("loss")) continue;  // the prediction or --bench row
    StepMetrics m;
    double step = 0;
    const bool ok = read_number(j, "step", &step) && std::isfinite(step) && step >= 1 &&
                    read_number(j, "loss", &m.loss) && read_number(j, "lr", &m.lr) &&
                    read_number(j, "tokens_per_s", &m.tokens_per_s) && read_number(j, "step_s", &m.step_s) &&
                    read_bytes(j, "gpu", &m.peak_bytes.gpu) && read_bytes(j, "cpu", &m.peak_bytes.cpu) &&
                    read_bytes(j, "nvme", &m.peak_bytes.nvme);
    if (!ok)
      return error(Code::invalid_argument,
                   "{} line {}: a step row needs step, loss, lr, tokens_per_s, step_s (numbers) and peak_bytes "
                   "{{gpu, cpu, nvme}}; this one is {}",
                   path, i + 1, lines[i].substr(0, 200));
    m.step = static_cast<uint64_t>(step);
    double v = 0;
    if (read_number(j, "val_loss", &v)) m.val_loss = v;
    if (read_number(j, "grad_norm", &v)) m.grad_norm = v;
    rows.push_back(m);
  }
  if (rows.empty())
    return error(Code::invalid_argument,
                 "{} has no step rows (lines with \"step\" and \"loss\"): not a `strata train --metrics` file", path);
  return rows;
}

std::string format_progress_line(const StepMetrics& m, uint64_t total_steps, std::string_view device_label) {
  const int width = static_cast<int>(fmt::formatted_size("{}", total_steps));
  std::string line = fmt::format("step {:>{}}/{} | loss {:.4f} | lr {:.2e} | {} tok/s | {:.3f} s | {}", m.step, width,
                                 total_steps, m.loss, m.lr, format_count(m.tokens_per_s), m.step_s,
                                 tier_text(device_label, m.bytes.gpu, m.peak_bytes.gpu));
  if (m.peak_bytes.cpu > 0) line += " | " + tier_text("cpu", m.bytes.cpu, m.peak_bytes.cpu);
  if (m.peak_bytes.nvme > 0) line += " | " + tier_text("nvme", m.bytes.nvme, m.peak_bytes.nvme);
  if (m.val_loss) line += fmt::format(" | val {:.4f}", *m.val_loss);
  if (m.grad_norm) line += fmt::format(" | norm {:.3f}", *m.grad_norm);
  if (m.loss_scale) line += fmt::format(" | scale {}", *m.loss_scale);
  if (m.skipped) line += " | skipped";
  if (m.tflops) line += fmt::format(" | {:.1f} TFLOP/s", *m.tflops);
  if (m.mfu) line += fmt::format(" | MFU {:.1f}%", *m.mfu * 100.0);
  if (m.device_used_bytes) line += fmt::format(" | nvml {}", format_size(*m.device_used_bytes));
  if (const auto& t = m.transfers) {
    line += fmt::format(" | h2d {:.2f} d2h {:.2f}", t->h2d_gbps, t->d2h_gbps);
    if (t->nvme_read_gbps > 0 || t->nvme_write_gbps > 0)
      line += fmt::format(" nvme r {:.2f} w {:.2f}", t->nvme_read_gbps, t->nvme_write_gbps);
    line += fmt::format(" GB/s | wait {:.1f} ms ({:.1f}%)", t->wait_s * 1e3, t->wait_fraction * 100.0);
  }
  return line;
}

std::string format_duration(double seconds) {
  const uint64_t total = seconds > 0 && std::isfinite(seconds) ? static_cast<uint64_t>(std::llround(seconds)) : 0;
  const uint64_t h = total / 3600, m = total / 60 % 60, sec = total % 60;
  return h > 0 ? fmt::format("{}:{:02}:{:02}", h, m, sec) : fmt::format("{}:{:02}", m, sec);
}

std::string format_live_line(const StepMetrics& m, uint64_t total_steps, std::optional<double> eta_s,
                             std::optional<double> val_loss) {
  constexpr uint64_t kBar = 10;
  const uint64_t done = total_steps > 0 ? std::min(m.step, total_steps) : 0;
  const uint64_t filled = total_steps > 0 ? done * kBar / total_steps : 0;
  const uint64_t percent = total_steps > 0 ? done * 100 / total_steps : 0;
  const int width = static_cast<int>(fmt::formatted_size("{}", total_steps));
  std::string line = fmt::format("{:>{}}/{} [{}{}] {:>3}%  loss {:.4f}  {} tok/s  ETA {}", m.step, width, total_steps,
                                 std::string(filled, '#'), std::string(kBar - filled, '.'), percent, m.loss,
                                 format_count(m.tokens_per_s), eta_s ? format_duration(*eta_s) : "?");
  if (val_loss) line += fmt::format("  val {:.4f}", *val_loss);
  return line;
}

std::string format_run_summary(const RunSummary& s) {
  const double tokens_per_s = s.seconds > 0 ? static_cast<double>(s.tokens) / s.seconds : 0.0;
  std::string out = fmt::format("trained {} step{} in {:.1f} s: {} tokens at {} tok/s", s.steps,
                                s.steps == 1 ? "" : "s", s.seconds, format_count(static_cast<double>(s.tokens)),
                                format_count(tokens_per_s));
  out += fmt::format("\nloss {:.4f} -> {:.4f}", s.first_loss, s.last_loss);
  if (s.last_val_loss) out += fmt::format(", val {:.4f} at step {}", *s.last_val_loss, s.last_val_step);
  out += fmt::format("\npeak memory: {} {}, cpu {}, nvme {}", s.device_label, format_size(s.peak_bytes.gpu),
                     format_size(s.peak_bytes.cpu), format_size(s.peak_bytes.nvme));
  if (s.skipped_steps > 0)
    out += fmt::format("\nskipped {} update{} (non-finite gradients)", s.skipped_steps, s.skipped_steps == 1 ? "" : "s");
  if (s.mean_mfu) out += fmt::format("\nmean MFU {:.1f}%", *s.mean_mfu * 100.0);
  return out;
}

StatusOr<uint64_t> truncate_metrics_after(const std::string& path, uint64_t step) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return uint64_t{0};
  std::ifstream in(path);
  if (!in) return errno_status(errno, fmt::format("reading metrics file {}", path));
  std::string kept;
  uint64_t dropped = 0;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    const bool keep = j.is_object() && j.contains("step") && j["step"].is_number_unsigned() &&
                      j["step"].get<uint64_t>() <= step;
    if (keep) {
      kept += line;
      kept += '\n';
    } else {
      ++dropped;
    }
  }
  in.close();
  if (dropped == 0) return dropped;
  const std::string temp = fmt::format("{}.tmp.{}", path, getpid());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno_status(errno, fmt::format("creating {}", temp));
  const bool ok = ::write(fd, kept.data(), kept.size()) == ssize_t(kept.size()) && ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok || ::rename(temp.c_str(), path.c_str()) != 0) {
    const int e = ok ? errno : err;
    ::unlink(temp.c_str());
    return errno_status(e, fmt::format("rewriting metrics file {} without the steps after {}", path, step));
  }
  return dropped;
}

Status append_line(const std::string& path, const std::string& line) {
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (f == nullptr) return errno_status(errno, fmt::format("appending the bench line to {}", path));
  const bool ok = std::fputs((line + "\n").c_str(), f) >= 0 && std::fflush(f) == 0;
  const int err = errno;
  if (std::fclose(f) != 0 || !ok)
    return errno_status(ok ? errno : err, fmt::format("appending the bench line to {}", path));
  return Status::ok();
}

}  // namespace strata::model
