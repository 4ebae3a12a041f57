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

// Whether an operation that failed with `code` may succeed if simply tried again.
constexpr bool IsRetryable(StatusCode code) {
  return code == StatusCode::kUnavailable || code == StatusCode::kTimeout ||
         code == StatusCode::kIOError;
}

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  // Lets the propagation macros below `return Err(s)` from functions returning Status too.
  Status(std::unexpected<Status> error) : Status(std::move(error.error())) {}  // NOLINT

  static Status OK() { return {}; }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status Corruption(std::string m) { return {StatusCode::kCorruption, std::move(m)}; }
  static Status InvalidArgument(std::string m) {
    return {StatusCode::kInvalidArgument, std::move(m)};
  }
  static Status IOError(std::string m) { return {StatusCode::kIOError, std::move(m)}; }
  static Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
  static Status Unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
  static Status ResourceExhausted(std::string m) {
    return {StatusCode::kResourceExhausted, std::move(m)};
  }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
  // Maps an errno value to the matching code; the message should name the file.
  static Status FromErrno(int err, std::string_view context);

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  bool IsNotFound() const { return code_ == StatusCode::kNotFound; }
  bool IsCorruption() const { return code_ == StatusCode::kCorruption; }

  // "Corruption: <message>"
  std::string ToString() const;
  // A copy with "context: " put in front of the message.
  Status WithContext(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
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
