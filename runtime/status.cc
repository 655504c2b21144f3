// Status implementation and the single errno -> Code mapping.
#include "runtime/status.h"

#include <cerrno>
#include <cstring>

namespace strata {

std::string_view code_name(Code code) {
  switch (code) {
    case Code::ok: return "ok";
    case Code::invalid_argument: return "invalid argument";
    case Code::out_of_range: return "out of range";
    case Code::not_found: return "not found";
    case Code::already_exists: return "already exists";
    case Code::permission_denied: return "permission denied";
    case Code::out_of_memory: return "out of memory";
    case Code::no_space: return "no space";
    case Code::io_error: return "I/O error";
    case Code::corruption: return "corruption";
    case Code::unavailable: return "unavailable";
    case Code::failed_precondition: return "failed precondition";
    case Code::cancelled: return "cancelled";
    case Code::internal: return "internal error";
  }
  return "unknown";
}

Status::Status(Code code, std::string message, int sys_errno) {
  if (code != Code::ok) state_ = std::make_shared<const State>(State{code, sys_errno, std::move(message)});
}

const std::string& Status::message() const {
  static const std::string empty;
  return state_ ? state_->message : empty;
}

std::string Status::to_string() const {
  if (is_ok()) return "ok";
  return fmt::format("{}: {}", code_name(state_->code), state_->message);
}

Status Status::with_context(std::string_view context) const {
  if (is_ok()) return *this;
  return Status(state_->code, fmt::format("{}: {}", context, state_->message), state_->sys_errno);
}

Code code_from_errno(int err) {
  if (err < 0) err = -err;
  switch (err) {
    case ENOSPC:
    case EDQUOT: return Code::no_space;
    case ENOENT:
    case ENODEV:
    case ENXIO: return Code::not_found;
    case EACCES:
    case EPERM:
    case EROFS: return Code::permission_denied;
    case ENOMEM: return Code::out_of_memory;
    case EINVAL:
    case EISDIR:
    case ENOTDIR:
    case ELOOP: return Code::invalid_argument;
    case EEXIST: return Code::already_exists;
    case EAGAIN:
    case ENOSYS:
    case EOPNOTSUPP: return Code::unavailable;
    case ECANCELED: return Code::cancelled;
    default: return Code::io_error;
  }
}

Status errno_status(int err, std::string_view what) {
  if (err < 0) err = -err;
  return Status(code_from_errno(err), fmt::format("{}: {} (errno {})", what, std::strerror(err), err), err);
}

}  // namespace strata
