#include "stoker/status.h"

#include <cerrno>
#include <cstring>
#include <string>

namespace stoker {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kNotFound:
      return "NotFound";
    case StatusCode::kCorruption:
      return "Corruption";
    case StatusCode::kInvalidArgument:
      return "InvalidArgument";
    case StatusCode::kIOError:
      return "IOError";
    case StatusCode::kAlreadyExists:
      return "AlreadyExists";
    case StatusCode::kUnavailable:
      return "Unavailable";
    case StatusCode::kTimeout:
      return "Timeout";
    case StatusCode::kPermissionDenied:
      return "PermissionDenied";
    case StatusCode::kResourceExhausted:
      return "ResourceExhausted";
    case StatusCode::kUnsupported:
      return "Unsupported";
    case StatusCode::kInternal:
      return "Internal";
    case StatusCode::kCancelled:
      return "Cancelled";
  }
  return "Unknown";
}

Status Status::FromErrno(int err, std::string_view context) {
  std::string message = std::string(context) + ": " + std::strerror(err);
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return Status::NotFound(std::move(message));
    case EACCES:
    case EPERM:
      return Status::PermissionDenied(std::move(message));
    case EEXIST:
      return Status::AlreadyExists(std::move(message));
    case EINVAL:
    case ENAMETOOLONG:
    case ELOOP:
      return Status::InvalidArgument(std::move(message));
    case ENOMEM:
    case ENOSPC:
    case EMFILE:
    case ENFILE:
      return Status::ResourceExhausted(std::move(message));
    default:
      return Status::IOError(std::move(message));
  }
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  Status s = *this;
  s.message_ = std::string(context) + ": " + message_;
  return s;
}

}  // namespace stoker
