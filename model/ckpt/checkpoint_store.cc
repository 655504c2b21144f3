// The run directory of rotated, atomically written checkpoints (see checkpoint_store.h): naming,
// listing, resolving --resume paths, leftover cleanup, the save sequence and rotation.
#include "model/ckpt/checkpoint_store.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <filesystem>
#include <fstream>

#include <fmt/core.h>
#include <spdlog/spdlog.h>

#include "model/hf/hf_weights.h"

namespace strata::model {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kStepPrefix = "step-";
constexpr std::string_view kTempPrefix = ".tmp-";          // a save in progress, or a removal
constexpr std::string_view kReplacedPrefix = ".replaced-";  // a same-step checkpoint set aside

std::string join(const std::string& dir, std::string_view name) { return (fs::path(dir) / name).string(); }

// The step of a "step-N" name, or nullopt.
std::optional<uint64_t> step_of(std::string_view name) {
  if (!name.starts_with(kStepPrefix) || name.size() == kStepPrefix.size()) return std::nullopt;
  uint64_t step = 0;
  const char* first = name.data() + kStepPrefix.size();
  const char* last = name.data() + name.size();
  const auto [end, ec] = std::from_chars(first, last, step);
  if (ec != std::errc() || end != last) return std::nullopt;
  return step;
}

// The pid after the last '.' of a leftover's name, or nullopt.
std::optional<pid_t> pid_of(std::string_view name) {
  const size_t dot = name.rfind('.');
  if (dot == std::string_view::npos) return std::nullopt;
  long pid = 0;
  const auto [end, ec] = std::from_chars(name.data() + dot + 1, name.data() + name.size(), pid);
  if (ec != std::errc() || end != name.data() + name.size() || pid <= 0) return std::nullopt;
  return pid_t(pid);
}

// A leftover's owner is alive (and not this process, which is only starting its saves).
bool owner_alive(std::string_view name) {
  const std::optional<pid_t> pid = pid_of(name);
  if (!pid || *pid == getpid()) return false;
  return ::kill(*pid, 0) == 0 || errno == EPERM;
}

bool is_complete(const std::string& dir) {
  std::error_code ec;
  return fs::is_regular_file(join(dir, kCheckpointOptimizerFile), ec) &&
         (fs::is_regular_file(join(dir, kCheckpointModelFile), ec) ||
          fs::is_regular_file(join(dir, kHfIndexFile), ec));
}

Status write_small_file(const std::string& path, std::string_view text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno_status(errno, fmt::format("creating {}", path));
  Status s;
  if (::write(fd, text.data(), text.size()) != ssize_t(text.size()))
    s = errno_status(errno == 0 ? EIO : errno, fmt::format("writing {}", path));
  else if (::fsync(fd) != 0)
    s = errno_status(errno, fmt::format("fsync of {}", path));
  if (::close(fd) != 0 && s.is_ok()) s = errno_status(errno, fmt::format("closing {}", path));
  if (!s.is_ok()) ::unlink(path.c_str());
  return s;
}

}  // namespace

std::string checkpoint_dir_name(uint64_t step) { return fmt::format("{}{:06}", kStepPrefix, step); }

Status fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno_status(errno, fmt::format("opening directory {} to sync it", dir));
  Status s;
  if (::fsync(fd) != 0) s = errno_status(errno, fmt::format("fsync of directory {}", dir));
  ::close(fd);
  return s;
}

std::vector<std::pair<uint64_t, std::string>> list_checkpoints(const std::string& run_dir) {
  std::vector<std::pair<uint64_t, std::string>> out;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(run_dir, ec)) {
    const std::optional<uint64_t> step = step_of(e.path().filename().string());
    if (step && is_complete(e.path().string())) out.emplace_back(*step, e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

StatusOr<std::string> resolve_checkpoint(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec))
    return error(Code::not_found, "no checkpoint at {}: it does not exist; pass the --checkpoint-dir of an earlier "
                                  "run or one of its step-N directories", path);
  if (!fs::is_directory(path, ec))
    return error(Code::invalid_argument, "{} is a file, not a checkpoint directory; pass the --checkpoint-dir of an "
                                         "earlier run or one of its step-N directories", path);
  if (fs::exists(join(path, kCheckpointOptimizerFile), ec)) return path;
  const std::vector<std::pair<uint64_t, std::string>> all = list_checkpoints(path);
  std::ifstream latest(join(path, kLatestFile));
  std::string name;
  if (latest && std::getline(latest, name)) {
    const std::string named = join(path, name);
    if (step_of(name) && is_complete(named)) return named;
    if (!all.empty())
      spdlog::warn("{}/{} names '{}', which is not a complete checkpoint; using the newest complete one, {}", path,
                   kLatestFile, name, all.back().second);
  }
  if (!all.empty()) return all.back().second;
  return error(Code::not_found,
               "{} holds no checkpoint (no {}, no '{}' file, no complete step-N directory); pass the "
               "--checkpoint-dir of an earlier run or one of its step-N directories",
               path, kCheckpointOptimizerFile, kLatestFile);
}

StatusOr<CheckpointStore> CheckpointStore::open(const std::string& run_dir, CheckpointStoreOptions options) {
  if (options.keep == 0)
    return error(Code::invalid_argument, "keep_checkpoints is 0; keep at least 1 (2 or more survive a damaged one)");
  std::error_code ec;
  const bool existed = fs::exists(run_dir, ec);
  fs::create_directories(run_dir, ec);
  if (ec || !fs::is_directory(run_dir))
    return error(ec ? code_from_errno(ec.value()) : Code::invalid_argument,
                 "--checkpoint-dir {} cannot be created or is not a directory ({}); pass a writable --checkpoint-dir",
                 run_dir, ec ? ec.message() : "a file of that name exists");
  const std::string probe = join(run_dir, fmt::format(".probe.{}", getpid()));
  if (Status s = write_small_file(probe, "strata"); !s.is_ok())
    return Status(s.code(), fmt::format("--checkpoint-dir {} is not writable: {}; pass a writable --checkpoint-dir",
                                        run_dir, s.message()));
  ::unlink(probe.c_str());
  if (!existed) {  // the new directory's own entry must survive a power cut too
    const fs::path parent = fs::absolute(run_dir, ec).parent_path();
    STRATA_RETURN_IF_ERROR(fsync_directory(parent.empty() ? std::string(".") : parent.string()));
  }

  CheckpointStore store;
  store.run_dir_ = run_dir;
  store.options_ = std::move(options);
  for (const fs::directory_entry& e : fs::directory_iterator(run_dir, ec)) {
    const std::string name = e.path().filename().string();
    const bool temp = name.starts_with(kTempPrefix) || name.starts_with(".probe.") ||
                      name.find(".tmp.") != std::string::npos;
    const bool replaced = name.starts_with(kReplacedPrefix);
    if ((!temp && !replaced) || !pid_of(name) || owner_alive(name)) continue;
    if (replaced) {
      // Killed between setting a same-step checkpoint aside and renaming its successor in: put it back.
      const std::string original = name.substr(kReplacedPrefix.size(), name.rfind('.') - kReplacedPrefix.size());
      if (!fs::exists(join(run_dir, original), ec)) {
        fs::rename(e.path(), join(run_dir, original), ec);
        if (!ec) continue;
      }
    }
    fs::remove_all(e.path(), ec);
    if (ec)
      return error(code_from_errno(ec.value()), "removing {}, left by a killed save: {}; remove it by hand",
                   e.path().string(), ec.message());
    store.removed_.push_back(e.path().string());
  }
  if (!store.removed_.empty()) STRATA_RETURN_IF_ERROR(fsync_directory(run_dir));
  return store;
}

Status CheckpointStore::write_latest(const std::string& name) {
  const std::string temp = join(run_dir_, fmt::format("{}.tmp.{}", kLatestFile, getpid()));
  STRATA_RETURN_IF_ERROR(write_small_file(temp, name + "\n"));
  if (::rename(temp.c_str(), join(run_dir_, kLatestFile).c_str()) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    return errno_status(err, fmt::format("renaming {} to {}/{}", temp, run_dir_, kLatestFile));
  }
  return fsync_directory(run_dir_);
}

Status CheckpointStore::rotate(uint64_t newest_step) {
  std::vector<std::pair<uint64_t, std::string>> older;
  for (auto& c : list_checkpoints(run_dir_))
    if (c.first < newest_step) older.push_back(std::move(c));
  // The newest counts as one of the kept; checkpoints past it (an abandoned continuation) are left.
  const size_t keep_older = options_.keep - 1;
  if (older.size() <= keep_older) return Status::ok();
  for (size_t i = 0; i + keep_older < older.size(); ++i) {
    // Renamed first, so a kill during the removal never leaves a half-deleted step-N/ behind.
    const std::string doomed =
        join(run_dir_, fmt::format("{}{}.{}", kTempPrefix, fs::path(older[i].second).filename().string(), getpid()));
    if (::rename(older[i].second.c_str(), doomed.c_str()) != 0)
      return errno_status(errno, fmt::format("renaming old checkpoint {} away", older[i].second));
    std::error_code ec;
    fs::remove_all(doomed, ec);
    if (ec) return errno_status(ec.value(), fmt::format("removing old checkpoint {}", doomed));
  }
  return fsync_directory(run_dir_);
}

StatusOr<std::string> CheckpointStore::save(const Transformer& model, Trainer& trainer, const CheckpointState& state,
                                            CheckpointRanks* ranks) {
  STRATA_RETURN_IF_ERROR(at("begin"));
  const uint64_t step = trainer.steps_done();
  const std::string name = checkpoint_dir_name(step);
  const std::string temp = join(run_dir_, fmt::format("{}{}.{}", kTempPrefix, name, getpid()));
  const std::string final_dir = join(run_dir_, name);
  std::error_code ec;
  fs::remove_all(temp, ec);
  auto fail = [&](const Status& s) {
    std::error_code ignored;
    fs::remove_all(temp, ignored);
    return Status(s.code(), fmt::format("saving the checkpoint of step {} in {}: {}; the previous checkpoints are "
                                        "intact",
                                        step, run_dir_, s.message()));
  };
  if (::mkdir(temp.c_str(), 0755) != 0) return fail(errno_status(errno, fmt::format("creating {}", temp)));
  if (Status s = save_checkpoint(temp, model, trainer, state, options_.hook, options_.shard_bytes, ranks);
      !s.is_ok())
    return fail(s);
  if (Status s = at("files_written"); !s.is_ok()) return fail(s);
  if (Status s = fsync_directory(temp); !s.is_ok()) return fail(s);
  if (Status s = at("dir_synced"); !s.is_ok()) return fail(s);
  std::string aside;
  if (fs::exists(final_dir, ec)) {
    aside = join(run_dir_, fmt::format("{}{}.{}", kReplacedPrefix, name, getpid()));
    if (::rename(final_dir.c_str(), aside.c_str()) != 0)
      return fail(errno_status(errno, fmt::format("setting the older {} aside", final_dir)));
  }
  if (::rename(temp.c_str(), final_dir.c_str()) != 0) {
    const Status s = errno_status(errno, fmt::format("renaming {} to {}", temp, final_dir));
    if (!aside.empty()) ::rename(aside.c_str(), final_dir.c_str());
    return fail(s);
  }
  // From here the new checkpoint is complete under its name; an error leaves it (and `latest`
  // naming the previous one, which resolve_checkpoint still returns).
  auto after = [&](const Status& s) {
    return Status(s.code(), fmt::format("the checkpoint of step {} is complete in {}, but {}", step, final_dir,
                                        s.message()));
  };
  if (Status s = fsync_directory(run_dir_); !s.is_ok()) return after(s);
  STRATA_RETURN_IF_ERROR(at("renamed"));
  if (Status s = write_latest(name); !s.is_ok()) return after(s);
  STRATA_RETURN_IF_ERROR(at("latest_written"));
  if (!aside.empty()) {
    fs::remove_all(aside, ec);
    if (ec) spdlog::warn("could not remove the replaced checkpoint {}: {}", aside, ec.message());
  }
  if (Status s = rotate(step); !s.is_ok()) return after(s);
  STRATA_RETURN_IF_ERROR(at("rotated"));
  return final_dir;
}

}  // namespace strata::model
