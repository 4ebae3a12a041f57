// Status and Result<T>: how every stoker component reports errors.
//
// No exception crosses a component boundary. A Status carries a code from a small fixed table
// (the numbers are stable: they are written into files and sent over the wire) and a message
// that names the thing that failed (a sample path, a chunk file). Result<T> is
// std::expected<T, Status>. Thread-safety: values, safe to copy between threads.
#pragma once

#include <cstdint>
#include <expected>
#include <string>
#include <string_view>
#include <utility>

namespace stoker {

enum class StatusCode : uint8_t {
  kOk = 0,
  kNotFound = 1,
  kCorruption = 2,       // stored bytes fail a checksum or a structural check
  kInvalidArgument = 3,  // bad input from the caller or a user (paths, options, source trees)
  kIOError = 4,          // the storage said no (EIO, short read …)
  kAlreadyExists = 5,
  kUnavailable = 6,  // transient: a server or peer is down, try again
  kTimeout = 7,
  kPermissionDenied = 8,
  kResourceExhausted =
      9,  // a hard limit (memory budget, frame size, pixel count, a full disk: ENOSPC) was hit
  kUnsupported = 10,  // a newer format version, a feature this build lacks
  kInternal = 11,     // a bug in stoker
  kCancelled = 12,
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  // Lets the propagation macros below `return Err(s)` from functions returning Status too.
  Status(std::unexpected<Status> error) : Status(std::move(error.error())) {}  // NOLINT

  // One factory and one predicate per code.
  static Status OK() { return {}; }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status Corruption(std::string m) { return {StatusCode::kCorruption, std::move(m)}; }
  static Status InvalidArgument(std::string m) {
    return {StatusCode::kInvalidArgument, std::move(m)};
  }
  static Status IOError(std::string m) { return {StatusCode::kIOError, std::move(m)}; }
  static Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
  static Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status Timeout(std::string m) { return {StatusCode::kTimeout, std::move(m)}; }
  static Status PermissionDenied(std::string m) {
    return {StatusCode::kPermissionDenied, std::move(m)};
  }
  static Status ResourceExhausted(std::string m) {
    return {StatusCode::kResourceExhausted, std::move(m)};
  }
  static Status Unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
  static Status Cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
  // Maps an errno value to the matching code; the message should name the file.
  static Status FromErrno(int err, std::string_view context);

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  bool IsNotFound() const { return code_ == StatusCode::kNotFound; }
  bool IsCorruption() const { return code_ == StatusCode::kCorruption; }
  bool IsInvalidArgument() const { return code_ == StatusCode::kInvalidArgument; }
  bool IsIOError() const { return code_ == StatusCode::kIOError; }
  bool IsAlreadyExists() const { return code_ == StatusCode::kAlreadyExists; }
  bool IsUnavailable() const { return code_ == StatusCode::kUnavailable; }
  bool IsTimeout() const { return code_ == StatusCode::kTimeout; }
  bool IsPermissionDenied() const { return code_ == StatusCode::kPermissionDenied; }
  bool IsResourceExhausted() const { return code_ == StatusCode::kResourceExhausted; }
  bool IsUnsupported() const { return code_ == StatusCode::kUnsupported; }
  bool IsInternal() const { return code_ == StatusCode::kInternal; }
  bool IsCancelled() const { return code_ == StatusCode::kCancelled; }

  // Whether the operation may succeed if simply tried again (common/retry tries it). A server
  // or peer away (Unavailable) and a deadline passed (Timeout) are by nature; any other error
  // only where the backend that made it says so (Retryable): a network exchange that broke
  // may work on a fresh connection, while a disk's EIO or a refusal will not.
  bool retryable() const {
    return retryable_ || code_ == StatusCode::kUnavailable || code_ == StatusCode::kTimeout;
  }
  // A copy that common/retry tries again, whatever its code.
  Status Retryable() const {
    Status s = *this;
    s.retryable_ = !ok();
    return s;
  }

  // "Corruption: <message>"
  std::string ToString() const;
  // A copy with "context: " put in front of the message.
  Status WithContext(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  bool retryable_ = false;  // set by Retryable(); kept by WithContext
  std::string message_;
};

template <typename T>
using Result = std::expected<T, Status>;

// Turns a failed Status into the error value of any Result<T>.
inline std::unexpected<Status> Err(Status s) { return std::unexpected<Status>(std::move(s)); }

}  // namespace stoker

#define STOKER_CONCAT_INNER_(a, b) a##b
#define STOKER_CONCAT_(a, b) STOKER_CONCAT_INNER_(a, b)

// Returns the Status from the enclosing function if `expr` (a Status) is not OK.
#define STOKER_RETURN_IF_ERROR(expr)                                           \
  do {                                                                         \
    ::stoker::Status stoker_status_ = (expr);                                  \
    if (!stoker_status_.ok()) return ::stoker::Err(std::move(stoker_status_)); \
  } while (0)

// `STOKER_ASSIGN_OR_RETURN(auto x, MakeX());` — on error returns it from the enclosing function
// (which must return a Status or a Result).
#define STOKER_ASSIGN_OR_RETURN(lhs, expr) \
  STOKER_ASSIGN_OR_RETURN_IMPL_(STOKER_CONCAT_(stoker_result_, __LINE__), lhs, expr)
// `tmp` is a name and `lhs` may be a declaration (`auto x`): neither can be parenthesized.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define STOKER_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr)                 \
  auto tmp = (expr);                                                  \
  if (!tmp.has_value()) return ::stoker::Err(std::move(tmp).error()); \
  lhs = std::move(tmp).value()
// NOLINTEND(bugprone-macro-parentheses)
