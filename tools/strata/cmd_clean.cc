// `strata clean [PATH...] [--dry-run]`: lists and removes the per-run swap directories
// (offload/run_dir.h, "strata-run-<pid>-<n>") that runs which did not exit cleanly left under each
// NVMe path. A directory whose lock a live run holds is never touched, nor one less than a minute
// old whose lock nobody holds yet (a run starting), nor one holding a file strata did not create.
// PATH defaults to STRATA_NVME_PATH (a comma list). Not a general cleaner: checkpoints and other
// files are left alone.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "offload/run_dir.h"
#include "runtime/units.h"
#include "tools/strata/command.h"

namespace strata::cli {
namespace {

namespace fs = std::filesystem;

struct CleanFlags {
  std::vector<std::string> paths;
  bool dry_run = false;
};

// Why a strata-run-* entry that find_stale_runs did not list is left alone, in words.
std::string why_left_alone(const fs::path& entry) {
  std::error_code ec;
  if (!fs::is_directory(fs::symlink_status(entry, ec)))
    return "not a directory (strata did not make it), left alone";
  const fs::path lock = entry / "lock";
  if (run_dir_state(entry.string()) == RunDirState::live) {
    std::ifstream in(lock);
    std::string word;
    long long pid = 0;
    if (in >> word >> pid && word == "pid" && pid > 0)
      return fmt::format("in use by a live run, left alone (pid {} holds its lock)", pid);
    return "in use by a live run, left alone (it holds its lock)";
  }
  const bool has_lock = fs::exists(fs::symlink_status(lock, ec));
  return fmt::format("{}, and it is less than a minute old: a run may be starting in it; left alone (a later "
                     "`strata clean` removes it if no run took it)",
                     has_lock ? "its lock file is empty and not held" : "it has no lock file yet");
}

// Cleans one parent directory; returns false when it could not be read.
bool clean_one(const std::string& parent, bool dry_run, uint64_t& freed) {
  StatusOr<std::vector<StaleRun>> stale = find_stale_runs(parent);
  if (!stale.is_ok()) {
    report_error(stale.status().message());
    return false;
  }
  std::set<std::string> stale_paths;
  for (const StaleRun& r : *stale) stale_paths.insert(r.path);
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(parent, ec)) {
    std::string name = e.path().filename().string();
    if (!name.starts_with(kRunDirPrefix) || stale_paths.contains(e.path().string())) continue;
    fmt::print("{}: {}\n", e.path().string(), why_left_alone(e.path()));
  }
  if (dry_run) {
    for (const StaleRun& r : *stale) fmt::print("{}: left by a crashed run, would free {}\n", r.path, format_size(r.bytes));
    return true;
  }
  StatusOr<std::vector<StaleRun>> removed = remove_stale_runs(parent);
  if (!removed.is_ok()) {
    report_error(removed.status().message());
    return false;
  }
  std::set<std::string> gone;
  for (const StaleRun& r : *removed) {
    fmt::print("{}: left by a crashed run, removed ({} freed)\n", r.path, format_size(r.bytes));
    gone.insert(r.path);
    freed += r.bytes;
  }
  for (const StaleRun& r : *stale)
    if (!gone.contains(r.path))
      fmt::print("{}: left by a crashed run but holds files strata did not create; left in place, remove it by "
                 "hand\n", r.path);
  return true;
}

int run_clean(const CleanFlags& flags) {
  std::vector<std::string> paths = flags.paths;
  if (paths.empty()) {
    if (const char* env = std::getenv("STRATA_NVME_PATH"); env != nullptr && *env != '\0') {
      std::stringstream list(env);
      for (std::string p; std::getline(list, p, ',');)
        if (!p.empty()) paths.push_back(p);
    }
  }
  if (paths.empty())
    return report_error("strata clean needs the NVMe path(s) to clean: `strata clean DIR...` (or set "
                        "STRATA_NVME_PATH)", kExitUsage);
  bool ok = true;
  uint64_t freed = 0;
  for (const std::string& p : paths) {
    std::error_code ec;
    if (!fs::is_directory(p, ec)) {
      report_error(fmt::format("{} is not a directory; give the NVMe path(s) runs used (--nvme-path)", p));
      ok = false;
      continue;
    }
    ok = clean_one(p, flags.dry_run, freed) && ok;
  }
  if (!flags.dry_run) fmt::print("{} freed\n", format_size(freed));
  return ok ? kExitOk : kExitFailure;
}

}  // namespace

void add_clean_command(CLI::App& root, CommandRegistry& registry) {
  auto flags = std::make_shared<CleanFlags>();
  CLI::App* app = root.add_subcommand(
      "clean", "Remove the swap directories crashed runs left under NVMe paths (never a live run's)");
  app->add_option("path", flags->paths, "NVMe paths to clean (default: STRATA_NVME_PATH, a comma list)");
  app->add_flag("--dry-run", flags->dry_run, "list what would be removed, remove nothing");
  registry.add(app, [flags] { return run_clean(*flags); });
}

}  // namespace strata::cli
