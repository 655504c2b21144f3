// rendezvous_share's files (see file_rendezvous.h). Each is one or three lines of text:
//   <prefix>.session     "<session>"
//   <prefix>.arrive.<r>  "<session> <token>"
//   <prefix>.id          "<session>\n<token of rank 1> ... <token of rank N-1>\n<blob in hex>"
// numbers as 16 hex digits.
#include "runtime/file_rendezvous.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include <fmt/format.h>

namespace strata {
namespace {

constexpr size_t kMostBlob = 4096;

uint64_t fresh_number() {
  std::random_device device;
  return (uint64_t(device()) << 32) ^ uint64_t(device()) ^
         uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
}

std::string prefix(const RendezvousOptions& o) {
  std::string run = o.run_id;
  if (run.empty()) {
    const char* env = std::getenv("TORCHELASTIC_RUN_ID");
    run = env != nullptr && *env != '\0' ? env : "default";
  }
  for (char& ch : run)
    if (ch == '/' || ch == '\0') ch = '_';
  return (std::filesystem::path(o.dir) / ("strata-rendezvous-" + run)).string();
}

// `text` into `path` whole: a temporary file beside it (pid-unique), then rename over it.
Status write_whole(const std::string& path, const std::string& text) {
  const std::string temp = fmt::format("{}.tmp.{}", path, ::getpid());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno_status(errno, fmt::format("rendezvous: creating {}", temp));
  const ssize_t wrote = ::write(fd, text.data(), text.size());
  const int write_errno = errno;
  if (::close(fd) != 0 || wrote != ssize_t(text.size())) {
    ::unlink(temp.c_str());
    return errno_status(wrote < 0 ? write_errno : EIO, fmt::format("rendezvous: writing {}", temp));
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    return errno_status(err, fmt::format("rendezvous: renaming {} to {}", temp, path));
  }
  return Status::ok();
}

// The file's text, or nullopt when it does not exist (yet).
std::optional<std::string> read_whole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::optional<uint64_t> parse_hex(const std::string& word) {
  if (word.empty() || word.size() > 16) return std::nullopt;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(word.c_str(), &end, 16);
  if (*end != '\0') return std::nullopt;
  return uint64_t(v);
}

std::string hex(uint64_t v) { return fmt::format("{:016x}", v); }

// Polls `ready` every 10 ms, backing off to 100 ms, until it returns true (ok), an error, or the
// deadline passes (io_error from `waiting_for`).
template <typename Ready, typename WaitingFor>
Status poll(const RendezvousOptions& o, int rank, const Ready& ready, const WaitingFor& waiting_for) {
  const auto start = std::chrono::steady_clock::now();
  auto pause = std::chrono::milliseconds(10);
  for (;;) {
    StatusOr<bool> done = ready();
    if (!done.is_ok()) return done.status();
    if (*done) return Status::ok();
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (o.timeout_seconds > 0 && waited > o.timeout_seconds)
      return error(Code::io_error,
                   "rank {} waited {:.1f} s for {} in {} (--rendezvous-dir): is every rank launched, with the same "
                   "WORLD_SIZE and TORCHELASTIC_RUN_ID, and do they all see that directory?",
                   rank, waited, waiting_for(), o.dir);
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(100));
  }
}

}  // namespace

StatusOr<std::vector<uint8_t>> rendezvous_share(const RendezvousOptions& o, int rank, int size,
                                                const std::vector<uint8_t>& blob) {
  if (size < 2 || rank < 0 || rank >= size)
    return error(Code::invalid_argument, "rendezvous: rank {} of {} is not a rank of a world of two or more", rank,
                 size);
  if (o.dir.empty())
    return error(Code::invalid_argument,
                 "{} ranks launched without mpirun need a directory every rank sees to find each other: pass "
                 "--rendezvous-dir DIR (or STRATA_RENDEZVOUS_DIR), or launch with mpirun -np {}", size, size);
  std::error_code ec;
  if (!std::filesystem::is_directory(o.dir, ec))
    return error(Code::invalid_argument, "--rendezvous-dir {} is not a directory; create it where every rank sees it",
                 o.dir);
  const std::string p = prefix(o);
  const std::string session_path = p + ".session", id_path = p + ".id";
  const auto arrive_path = [&](int r) { return fmt::format("{}.arrive.{}", p, r); };

  if (rank == 0) {
    if (blob.size() > kMostBlob)
      return error(Code::invalid_argument, "rendezvous: a blob of {} bytes (at most {})", blob.size(), kMostBlob);
    std::filesystem::remove(id_path, ec);
    const uint64_t session = fresh_number();
    STRATA_RETURN_IF_ERROR(write_whole(session_path, hex(session)));
    std::vector<std::optional<uint64_t>> tokens(static_cast<size_t>(size));
    const auto missing = [&] {
      std::vector<int> ranks;
      for (int r = 1; r < size; ++r)
        if (!tokens[size_t(r)]) ranks.push_back(r);
      return fmt::format("rank{} {} to arrive", ranks.size() == 1 ? "" : "s", fmt::join(ranks, ", "));
    };
    STRATA_RETURN_IF_ERROR(poll(o, rank, [&]() -> StatusOr<bool> {
      bool all = true;
      for (int r = 1; r < size; ++r) {
        if (tokens[size_t(r)]) continue;
        std::optional<std::string> text = read_whole(arrive_path(r));
        std::istringstream words(text.value_or(""));
        std::string s, t;
        words >> s >> t;
        const std::optional<uint64_t> their_session = parse_hex(s), token = parse_hex(t);
        if (their_session == session && token) tokens[size_t(r)] = token;
        else all = false;
      }
      return all;
    }, missing));
    std::string text = hex(session) + "\n";
    for (int r = 1; r < size; ++r) text += hex(*tokens[size_t(r)]) + (r + 1 < size ? " " : "\n");
    for (uint8_t b : blob) text += fmt::format("{:02x}", b);
    STRATA_RETURN_IF_ERROR(write_whole(id_path, text));
    return blob;
  }

  const uint64_t token = fresh_number();
  std::optional<std::string> registered;  // the session this rank's arrival names
  std::vector<uint8_t> received;
  STRATA_RETURN_IF_ERROR(poll(o, rank, [&]() -> StatusOr<bool> {
    std::optional<std::string> session = read_whole(session_path);
    if (!session || !parse_hex(*session)) return false;
    if (session != registered) {
      STRATA_RETURN_IF_ERROR(write_whole(arrive_path(rank), *session + " " + hex(token)));
      registered = session;
    }
    std::optional<std::string> id = read_whole(id_path);
    if (!id) return false;
    std::istringstream lines(*id);
    std::string id_session, tokens_line, blob_hex;
    std::getline(lines, id_session);
    std::getline(lines, tokens_line);
    std::getline(lines, blob_hex);
    if (id_session != *registered) return false;
    std::istringstream words(tokens_line);
    std::string word;
    for (int r = 1; r <= rank; ++r) words >> word;
    if (parse_hex(word) != token) return false;  // an earlier run's id
    if (blob_hex.size() % 2 != 0 || blob_hex.size() > 2 * kMostBlob)
      return error(Code::corruption, "rendezvous: {} holds a malformed blob; remove it and relaunch", id_path);
    received.clear();
    for (size_t i = 0; i < blob_hex.size(); i += 2) {
      const std::optional<uint64_t> byte = parse_hex(blob_hex.substr(i, 2));
      if (!byte) return error(Code::corruption, "rendezvous: {} holds a malformed blob; remove it and relaunch", id_path);
      received.push_back(uint8_t(*byte));
    }
    return true;
  }, [&] { return registered ? std::string("rank 0's id") : std::string("rank 0's session file"); }));
  return received;
}

void rendezvous_cleanup(const RendezvousOptions& o, int size) {
  const std::string p = prefix(o);
  std::error_code ec;
  std::filesystem::remove(p + ".id", ec);
  std::filesystem::remove(p + ".session", ec);
  for (int r = 1; r < size; ++r) std::filesystem::remove(fmt::format("{}.arrive.{}", p, r), ec);
}

}  // namespace strata
