// Status and StatusOr<T>: failures as values that carry their context (what, where, errno).
// errno is mapped to a Code in exactly one place (errno_status). Not an exception mechanism:
// strata code returns these and callers decide; nothing here aborts or logs.
// Thread-safety: values are immutable after construction and cheap to copy (one shared pointer).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include <fmt/format.h>

namespace strata {

enum class Code : uint8_t {
  ok = 0,
  invalid_argument,     // bad flag, config value, shape, file contents
  out_of_range,         // a value outside its accepted range
  not_found,            // a file, key, device that does not exist
  already_exists,
  permission_denied,
  out_of_memory,        // a tier budget or an allocator said no
  no_space,             // a disk is full (ENOSPC) or a reservation cannot be met
  io_error,             // the OS or the device failed a transfer
  corruption,           // data read back does not match what was written (crc, header)
  unavailable,          // a facility is missing here (no GPU, io_uring disabled); retry elsewhere
  failed_precondition,  // called in the wrong state
  cancelled,
  internal,             // a bug in strata
};

std::string_view code_name(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  Status(Code code, std::string message, int sys_errno = 0);

  static Status ok() { return Status(); }

  bool is_ok() const { return state_ == nullptr; }
  Code code() const { return state_ ? state_->code : Code::ok; }
  const std::string& message() const;
  int sys_errno() const { return state_ ? state_->sys_errno : 0; }

  // "io_error: read /mnt/a/x.swp at offset 4096 (1 MiB): Input/output error (errno 5)"
  std::string to_string() const;

  // A copy with "context: " put in front of the message; ok stays ok.
  Status with_context(std::string_view context) const;

 private:
  struct State {
    Code code;
    int sys_errno;
    std::string message;
  };
  std::shared_ptr<const State> state_;
};

// Formatting constructors: error(Code::invalid_argument, "bad {}", x).
template <typename... Args>
Status error(Code code, fmt::format_string<Args...> f, Args&&... args) {
  return Status(code, fmt::format(f, std::forward<Args>(args)...));
}

// The one place errno becomes a Code: ENOSPC/EDQUOT -> no_space, ENOENT -> not_found,
// EACCES/EPERM -> permission_denied, ENOMEM -> out_of_memory, EINVAL -> invalid_argument,
// EEXIST -> already_exists, EAGAIN/ENOSYS/EOPNOTSUPP -> unavailable, everything else -> io_error.
// The message becomes "what: strerror (errno N)". `err` may be given positive or negative
// (io_uring's res convention).
Status errno_status(int err, std::string_view what);
Code code_from_errno(int err);

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : v_(std::move(status)) {}  // NOLINT: implicit by design
  StatusOr(T value) : v_(std::move(value)) {}         // NOLINT
  StatusOr(const StatusOr&) = default;
  StatusOr(StatusOr&&) noexcept = default;
  StatusOr& operator=(const StatusOr&) = default;
  StatusOr& operator=(StatusOr&&) noexcept = default;

  bool is_ok() const { return std::holds_alternative<T>(v_); }
  Status status() const { return is_ok() ? Status() : std::get<Status>(v_); }

  // Precondition: is_ok(). Accessing the value of an error is a bug (std::bad_variant_access).
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<Status, T> v_;
};

}  // namespace strata

template <>
struct fmt::formatter<strata::Status> : fmt::formatter<std::string> {
  template <typename Ctx>
  auto format(const strata::Status& s, Ctx& ctx) const {
    return fmt::formatter<std::string>::format(s.to_string(), ctx);
  }
};

#define STRATA_CONCAT_INNER(a, b) a##b
#define STRATA_CONCAT(a, b) STRATA_CONCAT_INNER(a, b)

// Returns the status of `expr` from the enclosing function when it is not ok.
#define STRATA_RETURN_IF_ERROR(expr)            \
  do {                                          \
    ::strata::Status strata_status_ = (expr);   \
    if (!strata_status_.is_ok()) return strata_status_; \
  } while (0)

// `STRATA_ASSIGN_OR_RETURN(auto x, f())` declares x from an ok StatusOr, else returns its status.
#define STRATA_ASSIGN_OR_RETURN(lhs, expr) \
  STRATA_ASSIGN_OR_RETURN_IMPL(STRATA_CONCAT(strata_statusor_, __LINE__), lhs, expr)
#define STRATA_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.is_ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
