#include "stoker/status.h"

#include <gtest/gtest.h>

#include <cerrno>

namespace stoker {
namespace {

TEST(Status, DefaultIsOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.ToString(), "OK");
  EXPECT_TRUE(Status::OK().ok());
}

TEST(Status, CodesHaveStableNumbers) {
  // These numbers are written into files and sent over the wire.
  EXPECT_EQ(static_cast<int>(StatusCode::kOk), 0);
  EXPECT_EQ(static_cast<int>(StatusCode::kNotFound), 1);
  EXPECT_EQ(static_cast<int>(StatusCode::kCorruption), 2);
  EXPECT_EQ(static_cast<int>(StatusCode::kInvalidArgument), 3);
  EXPECT_EQ(static_cast<int>(StatusCode::kIOError), 4);
  EXPECT_EQ(static_cast<int>(StatusCode::kAlreadyExists), 5);
  EXPECT_EQ(static_cast<int>(StatusCode::kUnavailable), 6);
  EXPECT_EQ(static_cast<int>(StatusCode::kTimeout), 7);
  EXPECT_EQ(static_cast<int>(StatusCode::kPermissionDenied), 8);
  EXPECT_EQ(static_cast<int>(StatusCode::kResourceExhausted), 9);
  EXPECT_EQ(static_cast<int>(StatusCode::kUnsupported), 10);
  EXPECT_EQ(static_cast<int>(StatusCode::kInternal), 11);
  EXPECT_EQ(static_cast<int>(StatusCode::kCancelled), 12);
}

TEST(Status, NamesAndToString) {
  EXPECT_EQ(StatusCodeName(StatusCode::kCorruption), "Corruption");
  EXPECT_EQ(StatusCodeName(StatusCode::kCancelled), "Cancelled");
  EXPECT_EQ(StatusCodeName(static_cast<StatusCode>(200)), "Unknown");
  const Status s = Status::Corruption("chunks/0001.chunk: bad CRC");
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(s.IsCorruption());
  EXPECT_FALSE(s.IsNotFound());
  EXPECT_EQ(s.ToString(), "Corruption: chunks/0001.chunk: bad CRC");
  EXPECT_EQ(Status::NotFound("x").code(), StatusCode::kNotFound);
  EXPECT_EQ(Status::InvalidArgument("x").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Status::IOError("x").code(), StatusCode::kIOError);
  EXPECT_EQ(Status::AlreadyExists("x").code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(Status::Unsupported("x").code(), StatusCode::kUnsupported);
  EXPECT_EQ(Status::ResourceExhausted("x").code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(Status::Internal("x").code(), StatusCode::kInternal);
}

TEST(Status, WithContextPrefixesTheMessageAndKeepsTheCode) {
  const Status s = Status::IOError("short read").WithContext("reading a/b.jpg");
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  EXPECT_EQ(s.message(), "reading a/b.jpg: short read");
  EXPECT_TRUE(Status::OK().WithContext("anything").ok());
  EXPECT_EQ(Status::OK().WithContext("anything").message(), "");
}

TEST(Status, FromErrnoMapsCodesAndNamesTheFile) {
  const Status s = Status::FromErrno(ENOENT, "open /data/x");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("open /data/x: "), std::string::npos);
  EXPECT_EQ(Status::FromErrno(ENOTDIR, "").code(), StatusCode::kNotFound);
  EXPECT_EQ(Status::FromErrno(EACCES, "").code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(Status::FromErrno(EPERM, "").code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(Status::FromErrno(EEXIST, "").code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(Status::FromErrno(EINVAL, "").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Status::FromErrno(ENAMETOOLONG, "").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Status::FromErrno(ELOOP, "").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Status::FromErrno(ENOSPC, "").code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(Status::FromErrno(ENOMEM, "").code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(Status::FromErrno(EMFILE, "").code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(Status::FromErrno(EIO, "").code(), StatusCode::kIOError);
  EXPECT_EQ(Status::FromErrno(EINTR, "").code(), StatusCode::kIOError);
}

TEST(Status, RetryableByNatureOrWhereTheBackendSaysSo) {
  EXPECT_TRUE(Status::Unavailable("a server away").retryable());
  EXPECT_TRUE(Status::Timeout("no answer").retryable());
  for (StatusCode c : {StatusCode::kNotFound, StatusCode::kCorruption, StatusCode::kInvalidArgument,
                       StatusCode::kIOError, StatusCode::kAlreadyExists,
                       StatusCode::kPermissionDenied, StatusCode::kResourceExhausted,
                       StatusCode::kUnsupported, StatusCode::kInternal, StatusCode::kCancelled}) {
    const Status s(c, "x");
    EXPECT_FALSE(s.retryable()) << StatusCodeName(c);             // a disk's EIO is not tried again
    EXPECT_TRUE(s.Retryable().retryable()) << StatusCodeName(c);  // a broken exchange is
    EXPECT_TRUE(s.Retryable().WithContext("reading f").retryable()) << StatusCodeName(c);
    EXPECT_EQ(s.Retryable().code(), c);
  }
  EXPECT_FALSE(Status::OK().Retryable().retryable());
}

TEST(Status, OneFactoryAndOnePredicatePerCode) {
  EXPECT_TRUE(Status::Unavailable("m").IsUnavailable());
  EXPECT_TRUE(Status::Timeout("m").IsTimeout());
  EXPECT_TRUE(Status::PermissionDenied("m").IsPermissionDenied());
  EXPECT_TRUE(Status::Cancelled("m").IsCancelled());
  EXPECT_TRUE(Status::InvalidArgument("m").IsInvalidArgument());
  EXPECT_TRUE(Status::IOError("m").IsIOError());
  EXPECT_TRUE(Status::AlreadyExists("m").IsAlreadyExists());
  EXPECT_TRUE(Status::ResourceExhausted("m").IsResourceExhausted());
  EXPECT_TRUE(Status::Unsupported("m").IsUnsupported());
  EXPECT_TRUE(Status::Internal("m").IsInternal());
  EXPECT_FALSE(Status::Internal("m").IsCancelled());
}

Result<int> Half(int x) {
  if (x % 2 != 0) return Err(Status::InvalidArgument("odd"));
  return x / 2;
}

Result<int> Quarter(int x) {
  STOKER_ASSIGN_OR_RETURN(const int half, Half(x));
  STOKER_ASSIGN_OR_RETURN(const int quarter, Half(half));
  return quarter;
}

Status CheckQuarter(int x, int* out) {
  STOKER_ASSIGN_OR_RETURN(*out, Quarter(x));
  STOKER_RETURN_IF_ERROR(x > 100 ? Status::ResourceExhausted("big") : Status::OK());
  return Status::OK();
}

TEST(Status, PropagationMacros) {
  EXPECT_EQ(Quarter(12).value(), 3);
  ASSERT_FALSE(Quarter(6).has_value());
  EXPECT_EQ(Quarter(6).error().code(), StatusCode::kInvalidArgument);
  int out = 0;
  EXPECT_TRUE(CheckQuarter(8, &out).ok());
  EXPECT_EQ(out, 2);
  EXPECT_EQ(CheckQuarter(7, &out).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckQuarter(400, &out).code(), StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace stoker
