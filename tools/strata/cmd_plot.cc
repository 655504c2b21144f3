// `strata plot METRICS.jsonl [-o run.png] [--title TEXT] [--size WxH]`: a training run in pictures,
// from its `strata train --metrics` file (model/train/metrics_log.h's reader: step rows only) -- the
// training loss per step with the held-out loss as points, tokens/s, and the peak memory of each
// tier in use -- three panels in one PNG drawn by gnuplot (as `strata bench io --png` does, through
// bench_util's run_gnuplot). Not a dashboard: for live curves, TensorBoard (--tensorboard-enabled).
// Exit 1 when the file cannot be read or is not a metrics file, or gnuplot is missing or fails;
// 2 for bad flags.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "bench/bench_util.h"
#include "model/train/metrics_log.h"
#include "runtime/units.h"
#include "tools/strata/command.h"

namespace strata::cli {
namespace {

struct PlotFlags {
  std::string metrics;
  std::string output;  // default: the metrics file with .png for its extension
  std::string title;   // default: the file's name
  std::string size = "1200x900";
};

// "1200x900" -> {1200, 900}; each side 200..10000 pixels.
StatusOr<std::pair<int, int>> parse_size(const std::string& text) {
  int w = 0, h = 0;
  char rest = 0;
  if (std::sscanf(text.c_str(), "%dx%d%c", &w, &h, &rest) != 2 || w < 200 || h < 200 || w > 10000 || h > 10000)
    return error(Code::invalid_argument, "--size {}: expected WIDTHxHEIGHT in pixels, each 200 to 10000 (e.g. 1200x900)",
                 text);
  return std::pair{w, h};
}

// A string inside gnuplot single quotes, where a quote is written twice.
std::string gnuplot_quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

std::string number_or_nan(double v) { return std::isfinite(v) ? fmt::format("{:.9g}", v) : "NaN"; }

// One whitespace-separated row per step: step loss val_loss tokens/s peak MiB (device, pinned, nvme).
std::string data_text(const std::vector<model::StepMetrics>& rows) {
  std::string out = "# step loss val_loss tokens_per_s device_mib pinned_mib nvme_mib\n";
  constexpr double kMiB = 1024.0 * 1024.0;
  for (const model::StepMetrics& m : rows)
    out += fmt::format("{} {} {} {} {} {} {}\n", m.step, number_or_nan(m.loss),
                       m.val_loss ? number_or_nan(*m.val_loss) : "NaN", number_or_nan(m.tokens_per_s),
                       number_or_nan(double(m.peak_bytes.gpu) / kMiB), number_or_nan(double(m.peak_bytes.cpu) / kMiB),
                       number_or_nan(double(m.peak_bytes.nvme) / kMiB));
  return out;
}

std::string plot_script(const std::vector<model::StepMetrics>& rows, const std::string& data_path,
                        const std::string& png_path, const std::string& title, std::pair<int, int> size) {
  bool has_val = false, has_cpu = false, has_nvme = false;
  for (const model::StepMetrics& m : rows) {
    has_val |= m.val_loss.has_value();
    has_cpu |= m.peak_bytes.cpu > 0;
    has_nvme |= m.peak_bytes.nvme > 0;
  }
  const std::string data = gnuplot_quoted(data_path);
  std::string memory = fmt::format("plot {} using 1:5 with lines lw 2 title 'device arena'", data);
  if (has_cpu) memory += fmt::format(", {} using 1:6 with lines lw 2 title 'pinned host'", data);
  if (has_nvme) memory += fmt::format(", {} using 1:7 with lines lw 2 title 'nvme'", data);
  const std::string loss =
      fmt::format("plot {} using 1:2 with lines lw 2 title 'training loss'{}", data,
                  has_val ? fmt::format(", {} using 1:3 with points pt 7 ps 1.2 title 'held-out loss'", data) : "");
  return fmt::format(
      "set terminal pngcairo size {},{} noenhanced font ',10'\n"
      "set output {}\n"
      "set multiplot layout 3,1 title {}\n"
      "set grid\nset key top right\nset xlabel 'step'\nset datafile missing 'NaN'\n"
      "set ylabel 'loss'\n{}\n"
      "set ylabel 'tokens/s'\nset yrange [0:*]\n"
      "plot {} using 1:4 with lines lw 2 title 'tokens/s'\n"
      "set ylabel 'peak memory (MiB)'\nset offsets 0, 0, graph 0.25, 0\n{}\n"
      "unset multiplot\n",
      size.first, size.second, gnuplot_quoted(png_path), gnuplot_quoted(title), loss, data, memory);
}

int plot(const PlotFlags& flags) {
  StatusOr<std::pair<int, int>> size = parse_size(flags.size);
  if (!size.is_ok()) return report_error(size.status().message(), kExitUsage);
  StatusOr<std::vector<model::StepMetrics>> rows = model::read_metrics_file(flags.metrics);
  if (!rows.is_ok()) return report_error(rows.status().message(), kExitFailure);
  if (!bench::run_command("gnuplot --version >/dev/null 2>&1").is_ok())
    return report_error("strata plot draws with gnuplot, which is not installed: apt-get install gnuplot-nox "
                        "(tools/setup.sh installs it)",
                        kExitFailure);
  const std::string png = !flags.output.empty()
                              ? flags.output
                              : std::filesystem::path(flags.metrics).replace_extension(".png").string();
  const model::StepMetrics& first = rows->front();
  const model::StepMetrics& last = rows->back();
  const std::string title =
      fmt::format("{}: steps {}-{}, loss {:.4f} -> {:.4f}",
                  flags.title.empty() ? std::filesystem::path(flags.metrics).filename().string() : flags.title,
                  first.step, last.step, first.loss, last.loss);
  const std::string data_path = fmt::format("{}.{}.dat", png, ::getpid());
  if (Status s = bench::write_text_file(data_path, data_text(*rows)); !s.is_ok())
    return report_error(fmt::format("{} (the data file beside -o {})", s.message(), png), kExitFailure);
  const Status drawn = bench::run_gnuplot(plot_script(*rows, data_path, png, title, *size), png);
  std::filesystem::remove(data_path);
  if (!drawn.is_ok()) return report_error(drawn.message(), kExitFailure);
  std::error_code ec;
  if (!std::filesystem::exists(png, ec))
    return report_error(fmt::format("gnuplot ran but wrote no {}", png), kExitFailure);
  fmt::print("plot: {} steps of {} drawn to {} ({}x{}: loss, tokens/s, peak memory)\n", rows->size(), flags.metrics,
             png, size->first, size->second);
  return kExitOk;
}

}  // namespace

void add_plot_command(CLI::App& root, CommandRegistry& registry) {
  CLI::App* app = root.add_subcommand(
      "plot",
      "Draw a training run from its --metrics file: loss (held-out loss as points), tokens/s and peak memory per "
      "tier, one PNG (gnuplot)");
  auto flags = std::make_shared<PlotFlags>();
  app->add_option("metrics", flags->metrics, "The JSON lines file `strata train --metrics FILE` wrote")->required();
  app->add_option("-o,--output", flags->output, "The PNG to write (default: METRICS with .png for its extension)");
  app->add_option("--title", flags->title, "The title's first words (default: the metrics file's name)");
  app->add_option("--size", flags->size, "The image's WIDTHxHEIGHT in pixels [default: 1200x900]");
  registry.add(app, [flags]() { return plot(*flags); });
}

}  // namespace strata::cli
