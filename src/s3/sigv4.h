// AWS Signature Version 4 for S3 requests (header authentication), written here because Debian
// packages no S3 SDK and libcurl's built-in signing (as of Debian 12's curl 7.88) leaves out
// x-amz-content-sha256 and does not sort query parameters. Follows AWS's "Signature Version 4
// signing process" exactly; the unit tests check AWS's published S3 examples.
//
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace stoker::s3 {

struct Credentials {
  std::string access_key;
  std::string secret_key;
  std::string session_token;  // temporary credentials only; sent as x-amz-security-token
};

// The payload hash S3 accepts when the body is not signed (streamed uploads, GETs).
inline constexpr std::string_view kUnsignedPayload = "UNSIGNED-PAYLOAD";
// SHA-256 of the empty string, the payload hash of a request without a body.
inline constexpr std::string_view kEmptyPayloadSha256 =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

struct SigningRequest {
  std::string method;  // "GET", "PUT", …
  // The path as sent on the wire, already URI-encoded once (UriEncodePath), e.g. "/bucket/a%20b".
  std::string path;
  // Query parameters, not encoded; a parameter without a value has an empty value.
  std::vector<std::pair<std::string, std::string>> query;
  // Every header to sign, "host" and "x-amz-date" included (names in any case).
  std::vector<std::pair<std::string, std::string>> headers;
  std::string payload_sha256;  // lower-case hex, or kUnsignedPayload
};

// RFC 3986 unreserved characters stay; every other byte becomes %XY (upper-case hex). '/' stays
// in paths (S3 object keys keep their slashes) and is encoded in query names and values.
std::string UriEncode(std::string_view s, bool keep_slash);
// "key with space/ü" -> "key%20with%20space/%C3%BC"
inline std::string UriEncodePath(std::string_view s) { return UriEncode(s, true); }
// The query string as sent and as signed: encoded, sorted by name then value, "&"-joined.
std::string CanonicalQuery(const std::vector<std::pair<std::string, std::string>>& query);

std::string Sha256Hex(std::string_view data);

// The pieces of the signature, exposed for tests and error messages.
std::string CanonicalRequest(const SigningRequest& request);
std::string SignedHeaderNames(const SigningRequest& request);  // "host;range;x-amz-date"
// `amz_date` is "YYYYMMDDTHHMMSSZ" (the request's x-amz-date).
std::string StringToSign(const SigningRequest& request, std::string_view amz_date,
                         std::string_view region, std::string_view service);

// The Authorization header value: "AWS4-HMAC-SHA256 Credential=…, SignedHeaders=…, Signature=…".
std::string Authorization(const SigningRequest& request, const Credentials& credentials,
                          std::string_view amz_date, std::string_view region,
                          std::string_view service = "s3");

// "YYYYMMDDTHHMMSSZ" for a UNIX time (UTC).
std::string AmzDate(long long unix_seconds);

}  // namespace stoker::s3
