// TraceRecorder (trace.h): spans kept under one mutex, serialized with nlohmann::json (which
// escapes every string) and written atomically (temporary file, then rename).
#include "offload/trace.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace strata {
namespace {

constexpr int kPid = 1;

Status write_all(int fd, const std::string& text, const std::string& what) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_status(errno, what);
    }
    done += static_cast<size_t>(n);
  }
  return Status::ok();
}

}  // namespace

TraceRecorder::TraceRecorder() : start_(std::chrono::steady_clock::now()) {}

double TraceRecorder::now_us() const {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start_).count();
}

int TraceRecorder::tid_locked(std::string_view track) {
  auto it = tids_.find(track);
  if (it != tids_.end()) return it->second;
  tracks_.emplace_back(track);
  const int tid = static_cast<int>(tracks_.size());
  tids_.emplace(std::string(track), tid);
  return tid;
}

void TraceRecorder::span(std::string_view track, std::string_view name, double begin_us, double end_us,
                         TraceArgs args) {
  const double dur = end_us > begin_us ? end_us - begin_us : 0.0;
  MutexLock lock(mu_);
  const int tid = tid_locked(track);
  spans_.push_back(Span{tid, std::string(name), begin_us, dur, std::move(args)});
}

Status TraceRecorder::stream_span(Backend& backend, Stream stream, std::string_view track, std::string_view name,
                                  const std::function<Status()>& enqueue, TraceArgs args) {
  // The begin stamp lives in shared state: the first callback writes it, the second reads it,
  // both on the stream's thread, in stream order.
  auto begin = std::make_shared<double>(0.0);
  STRATA_RETURN_IF_ERROR(backend.host_callback(stream, [this, begin] { *begin = now_us(); }));
  STRATA_RETURN_IF_ERROR(enqueue());
  return backend.host_callback(
      stream, [this, begin, track = std::string(track), name = std::string(name), args = std::move(args)]() mutable {
        span(track, name, *begin, now_us(), std::move(args));
      });
}

Status TraceRecorder::write(const std::string& path) const {
  nlohmann::json events = nlohmann::json::array();
  {
    MutexLock lock(mu_);
    events.push_back({{"ph", "M"}, {"pid", kPid}, {"tid", 0}, {"name", "process_name"},
                      {"args", {{"name", "strata"}}}});
    for (size_t i = 0; i < tracks_.size(); ++i) {
      const int tid = static_cast<int>(i + 1);
      events.push_back({{"ph", "M"}, {"pid", kPid}, {"tid", tid}, {"name", "thread_name"},
                        {"args", {{"name", tracks_[i]}}}});
      events.push_back({{"ph", "M"}, {"pid", kPid}, {"tid", tid}, {"name", "thread_sort_index"},
                        {"args", {{"sort_index", tid}}}});
    }
    for (const Span& s : spans_) {
      nlohmann::json e = {{"ph", "X"}, {"pid", kPid}, {"tid", s.tid}, {"name", s.name},
                          {"ts", s.begin_us}, {"dur", s.dur_us}};
      if (!s.args.empty()) {
        nlohmann::json a = nlohmann::json::object();
        for (const TraceArg& arg : s.args) a[arg.key] = arg.value;
        e["args"] = std::move(a);
      }
      events.push_back(std::move(e));
    }
  }
  const nlohmann::json doc = {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  // Invalid UTF-8 in a name is replaced rather than thrown on: a trace is never worth a failure.
  const std::string text = doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";

  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno_status(errno, fmt::format("writing the trace file {} (creating {})", path, tmp));
  Status st = write_all(fd, text, fmt::format("writing the trace file {}", path));
  if (::close(fd) != 0 && st.is_ok()) st = errno_status(errno, fmt::format("writing the trace file {} (close)", path));
  if (st.is_ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    st = errno_status(errno, fmt::format("writing the trace file {} (renaming {} over it)", path, tmp));
  }
  if (!st.is_ok()) ::unlink(tmp.c_str());
  return st;
}

std::vector<std::pair<double, double>> TraceRecorder::spans_on(std::string_view track) const {
  std::vector<std::pair<double, double>> out;
  MutexLock lock(mu_);
  const auto it = tids_.find(track);
  if (it == tids_.end()) return out;
  for (const Span& s : spans_)
    if (s.tid == it->second) out.emplace_back(s.begin_us, s.begin_us + s.dur_us);
  std::sort(out.begin(), out.end());
  return out;
}

size_t TraceRecorder::span_count() const {
  MutexLock lock(mu_);
  return spans_.size();
}

std::vector<std::string> TraceRecorder::tracks() const {
  MutexLock lock(mu_);
  return tracks_;
}

}  // namespace strata
