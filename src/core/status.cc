#include "flatcake/status.h"

#include <cerrno>
#include <cstring>

namespace flatcake {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kNotFound: return "NotFound";
    case StatusCode::kCorruption: return "Corruption";
    case StatusCode::kInvalidArgument: return "InvalidArgument";
    case StatusCode::kIOError: return "IOError";
    case StatusCode::kNoSpace: return "NoSpace";
    case StatusCode::kBusy: return "Busy";
    case StatusCode::kUnsupported: return "Unsupported";
    case StatusCode::kAborted: return "Aborted";
    case StatusCode::kPermissionDenied: return "PermissionDenied";
    case StatusCode::kDeadlineExceeded: return "DeadlineExceeded";
  }
  return "Unknown";
}

Status Status::FromErrno(int err, std::string_view context) {
  std::string msg(context);
  msg += ": ";
  msg += std::strerror(err);
  switch (err) {
    case ENOSPC:
    case EDQUOT: return NoSpace(msg);
    case ENOENT: return NotFound(msg);
    case EINVAL: return InvalidArgument(msg);
    case EOPNOTSUPP: return Unsupported(msg);
    case EACCES:
    case EPERM: return PermissionDenied(msg);
    case ETIMEDOUT: return DeadlineExceeded(msg);
    default: return IOError(msg);
  }
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string out(StatusCodeName(code()));
  out += ": ";
  out += message();
  return out;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string msg(context);
  msg += ": ";
  msg += message();
  return Status(code(), msg);
}

}  // namespace flatcake
