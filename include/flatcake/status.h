// Status and Result<T>: the one error convention of FlatCake.
//
// Every fallible call returns a [[nodiscard]] Status or Result<T>; no exceptions cross the data
// path. A Status is cheap to copy when OK (no allocation) and carries a code plus a human-readable
// message otherwise. Thread safety: values, no shared state.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace flatcake {

enum class StatusCode : uint8_t {
  kOk = 0,
  kNotFound,          // a key, file or scope that does not exist
  kCorruption,        // a checksum mismatch or a malformed record
  kInvalidArgument,   // the caller's input is wrong (layout, buffer, option, GVA)
  kIOError,           // the operating system reported an I/O failure (EIO and friends)
  kNoSpace,           // a medium, pool or table is full (ENOSPC)
  kBusy,              // a resource is pinned or in use; retry later
  kUnsupported,       // the platform or filesystem lacks a feature
  kAborted,           // the operation was cancelled
  kPermissionDenied,  // the caller may not do this (a peer outside the allow-list; EACCES, EPERM)
  kDeadlineExceeded,  // a wait ran past its timeout (ETIMEDOUT)
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK

  static Status OK() { return Status(); }
  static Status NotFound(std::string_view msg) { return Status(StatusCode::kNotFound, msg); }
  static Status Corruption(std::string_view msg) { return Status(StatusCode::kCorruption, msg); }
  static Status InvalidArgument(std::string_view msg) {
    return Status(StatusCode::kInvalidArgument, msg);
  }
  static Status IOError(std::string_view msg) { return Status(StatusCode::kIOError, msg); }
  static Status NoSpace(std::string_view msg) { return Status(StatusCode::kNoSpace, msg); }
  static Status Busy(std::string_view msg) { return Status(StatusCode::kBusy, msg); }
  static Status Unsupported(std::string_view msg) { return Status(StatusCode::kUnsupported, msg); }
  static Status Aborted(std::string_view msg) { return Status(StatusCode::kAborted, msg); }
  static Status PermissionDenied(std::string_view msg) {
    return Status(StatusCode::kPermissionDenied, msg);
  }
  static Status DeadlineExceeded(std::string_view msg) {
    return Status(StatusCode::kDeadlineExceeded, msg);
  }
  // Maps an errno value (positive) to a code: ENOSPC/EDQUOT -> NoSpace, ENOENT -> NotFound,
  // EINVAL -> InvalidArgument, EOPNOTSUPP -> Unsupported, EACCES/EPERM -> PermissionDenied,
  // ETIMEDOUT -> DeadlineExceeded, others -> IOError.
  static Status FromErrno(int err, std::string_view context);

  bool ok() const { return state_ == nullptr; }
  StatusCode code() const { return state_ ? state_->code : StatusCode::kOk; }
  std::string_view message() const { return state_ ? std::string_view(state_->msg) : ""; }
  bool IsNotFound() const { return code() == StatusCode::kNotFound; }
  bool IsNoSpace() const { return code() == StatusCode::kNoSpace; }
  bool IsCorruption() const { return code() == StatusCode::kCorruption; }
  bool IsInvalidArgument() const { return code() == StatusCode::kInvalidArgument; }
  bool IsIOError() const { return code() == StatusCode::kIOError; }

  // "OK" or "<Code>: <message>".
  std::string ToString() const;

  // Returns a copy whose message is prefixed with `context: `.
  Status WithContext(std::string_view context) const;

 private:
  struct State {
    StatusCode code;
    std::string msg;
  };
  Status(StatusCode code, std::string_view msg)
      : state_(std::make_shared<const State>(State{code, std::string(msg)})) {}
  std::shared_ptr<const State> state_;
};

// Result<T> holds either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT(google-explicit-constructor)
  Result(Status status) : status_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (status_.ok()) status_ = Status::InvalidArgument("Result constructed from OK status");
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  // REQUIRES: ok().
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace flatcake

#define FC_CONCAT_INNER_(a, b) a##b
#define FC_CONCAT_(a, b) FC_CONCAT_INNER_(a, b)

// Returns the Status from the enclosing function if `expr` is not OK.
#define FC_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::flatcake::Status fc_status_ = (expr);  \
    if (!fc_status_.ok()) return fc_status_; \
  } while (false)

// `FC_ASSIGN_OR_RETURN(auto x, MakeX());` unwraps a Result or returns its Status.
#define FC_ASSIGN_OR_RETURN(lhs, rexpr)                                                         \
  auto FC_CONCAT_(fc_result_, __LINE__) = (rexpr);                                              \
  if (!FC_CONCAT_(fc_result_, __LINE__).ok()) return FC_CONCAT_(fc_result_, __LINE__).status(); \
  lhs = std::move(FC_CONCAT_(fc_result_, __LINE__)).value()
