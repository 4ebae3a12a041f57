#include "s3/s3_client.h"

#include <openssl/evp.h>

#include <cctype>
#include <chrono>
#include <optional>

#include <fmt/format.h>

#include "common/crc32c.h"
#include "common/parse_number.h"
#include "common/retry.h"
#include "s3/xml.h"

namespace stoker::s3 {

struct S3Client::Request {
  Request(std::string m, std::string b, std::string k)
      : method(std::move(m)), bucket(std::move(b)), key(std::move(k)) {}
  std::string method;  // GET HEAD PUT POST DELETE
  std::string bucket, key;
  std::vector<std::pair<std::string, std::string>> query;
  std::vector<std::pair<std::string, std::string>> headers;  // signed, besides the usual ones
  std::span<const std::byte> body;
  std::optional<std::span<std::byte>> into;  // GET answers written here, exactly its size
  bool ranged = false;                       // a Range header is sent: 206 expected
};

namespace {

std::string Base64(const unsigned char* data, size_t n) {
  std::string out(4 * ((n + 2) / 3) + 1, '\0');
  const int len =
      EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()), data, static_cast<int>(n));
  out.resize(static_cast<size_t>(len));
  return out;
}

std::string ContentMd5(std::span<const std::byte> body) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(body.data(), body.size(), digest, &len, EVP_md5(), nullptr);
  return Base64(digest, len);
}

std::string Crc32cBase64(std::span<const std::byte> body) {
  const uint32_t crc = crc32c::Value(body.data(), body.size());
  const unsigned char be[4] = {
      static_cast<unsigned char>(crc >> 24), static_cast<unsigned char>(crc >> 16),
      static_cast<unsigned char>(crc >> 8), static_cast<unsigned char>(crc)};
  return Base64(be, 4);
}

// encoding-type=url answers: %XY escapes, and '+' for a space (S3 encodes form-style).
std::string UrlDecode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out.push_back(' ');
    } else if (s[i] == '%' && i + 2 < s.size() &&
               std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
               std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out.push_back(static_cast<char>(*ParseUnsigned<uint8_t>(s.substr(i + 1, 2), 16)));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

struct Endpoint {
  std::string scheme, host;  // host with ":port" if any
};

Endpoint SplitEndpoint(const std::string& url) {
  const size_t colon = url.find("://");
  return {url.substr(0, colon), url.substr(colon + 3)};
}

template <typename T>
Status StatusOf(const Result<T>& r) {
  return r ? Status::OK() : r.error();
}

// The store's words for credentials that ran out or were taken back: worth fetching new ones
// (once) before giving up. AWS says ExpiredToken or InvalidAccessKeyId; Ceph RGW answers a
// revoked key with AccessDenied, which is also what a missing permission gets (then the new
// credentials are refused too, at the cost of one fetch and one request).
bool CredentialsRefused(long status, const std::string& body) {
  if (status != 400 && status != 403) return false;
  const std::string code = XmlFirst(body, "Code");
  return code == "ExpiredToken" || code == "TokenRefreshRequired" || code == "InvalidAccessKeyId" ||
         code == "InvalidToken" || code == "UserSuspended" || code == "SignatureDoesNotMatch" ||
         code == "AccessDenied" || (status == 403 && code.empty());
}

bool RetryableStatus(long status, const std::string& code) {
  return status == 500 || status == 502 || status == 503 || status == 504 || status == 429 ||
         code == "SlowDown" || code == "RequestTimeout" || code == "InternalError" ||
         code == "RequestTimeTooSkewed" || code == "ConditionalRequestConflict";
}

}  // namespace

Result<std::string> ParseListPage(std::string_view xml, ObjectListing* out) {
  if (xml.find("<ListBucketResult") == std::string_view::npos) {
    return Err(Status::Corruption("S3 listing: not a ListBucketResult"));
  }
  for (std::string_view contents : XmlElements(xml, "Contents")) {
    out->keys.push_back(UrlDecode(XmlUnescape(XmlFirst(contents, "Key"))));
  }
  for (std::string_view prefix : XmlElements(xml, "CommonPrefixes")) {
    out->prefixes.push_back(UrlDecode(XmlUnescape(XmlFirst(prefix, "Prefix"))));
  }
  if (XmlFirst(xml, "IsTruncated") != "true") return std::string();
  std::string token = XmlFirst(xml, "NextContinuationToken");
  if (token.empty()) return Err(Status::Corruption("S3 listing: truncated without a token"));
  return token;
}

S3Client::S3Client(S3Config config)
    : config_(std::move(config)), http_(http::Client::Create(config_.request_timeout)) {}

S3Client::~S3Client() = default;

Result<std::shared_ptr<S3Client>> S3Client::Create(S3Config config) {
  return std::shared_ptr<S3Client>(new S3Client(std::move(config)));
}

// One attempt's URL and header lines, signed (afresh each attempt: x-amz-date) with
// `credentials`.
http::Request S3Client::Sign(const Request& r, const Credentials& credentials) const {
  const Endpoint ep = SplitEndpoint(config_.endpoint);
  std::string host = ep.host, path;
  if (config_.path_style) {
    path = "/" + r.bucket + "/" + r.key;
  } else {
    host = r.bucket + "." + ep.host;
    path = "/" + r.key;
  }
  const std::string encoded_path = UriEncodePath(path);
  const std::string query = CanonicalQuery(r.query);
  http::Request out;
  out.method = r.method;
  out.body = r.body;
  out.into = r.into;
  out.ranged = r.ranged;
  out.url = ep.scheme + "://" + host + encoded_path + (query.empty() ? "" : "?" + query);
  out.where = fmt::format("{} s3://{}/{}", r.method, r.bucket, r.key);

  SigningRequest s;
  s.method = r.method;
  s.path = encoded_path;
  s.query = r.query;
  s.payload_sha256 = r.body.empty()
                         ? std::string(kEmptyPayloadSha256)
                         : Sha256Hex(std::string_view(reinterpret_cast<const char*>(r.body.data()),
                                                      r.body.size()));
  const std::string date = AmzDate(std::chrono::duration_cast<std::chrono::seconds>(
                                       std::chrono::system_clock::now().time_since_epoch())
                                       .count());
  s.headers = r.headers;
  s.headers.emplace_back("host", host);
  s.headers.emplace_back("x-amz-date", date);
  s.headers.emplace_back("x-amz-content-sha256", s.payload_sha256);
  if (!credentials.session_token.empty()) {
    s.headers.emplace_back("x-amz-security-token", credentials.session_token);
  }
  for (const auto& [name, value] : s.headers) {
    if (name == "host") continue;  // curl sends the URL's host
    out.header_lines.push_back(name + ": " + value);
  }
  out.header_lines.push_back("Authorization: " +
                             Authorization(s, credentials, date, config_.region));
  out.header_lines.push_back("Expect:");  // no 100-continue round trip
  out.header_lines.push_back("Content-Type:");
  return out;
}

namespace {

// The status of an HTTP answer that is an error (>= 300, or an <Error> inside a 200 to a POST,
// as CompleteMultipartUpload may answer). Throttling and server errors say nothing about the
// data: the store is unavailable (retryable). Other refusals are final.
Status ErrorOfAnswer(long status, const std::string& body, const std::string& where) {
  const std::string code = XmlFirst(body, "Code");
  const std::string message = XmlFirst(body, "Message");
  // HEAD answers carry no body: name the status then.
  const std::string what = !code.empty()   ? code
                           : status == 403 ? "Forbidden (wrong credentials, or no permission)"
                           : status == 404 ? "Not Found"
                                           : "";
  const std::string text =
      fmt::format("{}: HTTP {} {}{}{}", where, status, what, message.empty() ? "" : ": ", message);
  if (RetryableStatus(status, code) || status == 200) return Status::Unavailable(text);
  if (status == 404) return Status::NotFound(text);
  // Only conditional requests get 412: If-None-Match found the key taken.
  if (status == 412) return Status::AlreadyExists(text);
  if (status == 403) return Status::PermissionDenied(text);
  return Status::InvalidArgument(text);  // the store refused the request as it was made
}

}  // namespace

Result<http::Response> S3Client::Call(const Request& r) {
  Retry retry(RetryPolicy{.max_attempts = config_.max_attempts,
                          .base_backoff = std::chrono::milliseconds(100),
                          .max_backoff = std::chrono::milliseconds(20000)});
  Status last;
  bool refreshed = false;  // new credentials fetched once after a refusal: not again
  while (retry.Next(last)) {
    STOKER_ASSIGN_OR_RETURN(Credentials credentials, config_.credentials->Current());
    const http::Request signed_request = Sign(r, credentials);
    auto response = http_->Perform(signed_request);
    if (response && !refreshed && CredentialsRefused(response->status, response->body) &&
        config_.credentials->RefreshAfterRefusal(credentials)) {
      // Expired or revoked temporary credentials: sign again with new ones, not counted as a
      // failed attempt (the store said nothing about the data).
      refreshed = true;
      STOKER_ASSIGN_OR_RETURN(Credentials fresh, config_.credentials->Current());
      response = http_->Perform(Sign(r, fresh));
    }
    if (response && (response->status >= 300 ||
                     (response->status == 200 && r.body.size() > 0 && r.method == "POST" &&
                      response->body.find("<Error>") != std::string::npos))) {
      response = Err(ErrorOfAnswer(response->status, response->body, signed_request.where));
    }
    if (response) return response;
    last = response.error();
  }
  if (retry.attempt() > 1)
    return Err(last.WithContext(fmt::format("after {} attempts", retry.attempt())));
  return Err(last);
}

Status S3Client::GetRange(const std::string& bucket, const std::string& key, uint64_t offset,
                          std::span<std::byte> dst) {
  if (dst.empty()) return Status::OK();
  Request r{"GET", bucket, key};
  r.headers.emplace_back("range", fmt::format("bytes={}-{}", offset, offset + dst.size() - 1));
  r.into = dst;
  r.ranged = true;
  return StatusOf(Call(r));
}

Result<std::string> S3Client::GetObject(const std::string& bucket, const std::string& key) {
  STOKER_ASSIGN_OR_RETURN(http::Response response, Call(Request{"GET", bucket, key}));
  // A body shorter than its Content-Length fails in curl; this catches a lying header too.
  if (auto it = response.headers.find("content-length");
      it != response.headers.end() && it->second != std::to_string(response.body.size())) {
    return Err(Status::IOError(fmt::format("GET s3://{}/{}: {} bytes, Content-Length {}", bucket,
                                           key, response.body.size(), it->second)));
  }
  return std::move(response.body);
}

Result<uint64_t> S3Client::HeadObject(const std::string& bucket, const std::string& key) {
  STOKER_ASSIGN_OR_RETURN(http::Response response, Call(Request{"HEAD", bucket, key}));
  return http::ContentLength(response, fmt::format("HEAD s3://{}/{}", bucket, key));
}

Status S3Client::PutObject(const std::string& bucket, const std::string& key,
                           std::span<const std::byte> body, bool if_absent) {
  Request r{"PUT", bucket, key};
  r.body = body;
  r.headers.emplace_back("content-md5", ContentMd5(body));
  r.headers.emplace_back("x-amz-checksum-crc32c", Crc32cBase64(body));
  if (if_absent) r.headers.emplace_back("if-none-match", "*");
  return StatusOf(Call(r));
}

Result<std::string> S3Client::CreateMultipartUpload(const std::string& bucket,
                                                    const std::string& key) {
  Request r{"POST", bucket, key};
  r.query = {{"uploads", ""}};
  STOKER_ASSIGN_OR_RETURN(http::Response response, Call(r));
  std::string id = XmlFirst(response.body, "UploadId");
  if (id.empty()) {
    return Err(Status::IOError(fmt::format("s3://{}/{}: no UploadId in the answer", bucket, key)));
  }
  return id;
}

Result<std::string> S3Client::UploadPart(const std::string& bucket, const std::string& key,
                                         const std::string& upload_id, int part_number,
                                         std::span<const std::byte> body) {
  Request r{"PUT", bucket, key};
  r.query = {{"partNumber", std::to_string(part_number)}, {"uploadId", upload_id}};
  r.body = body;
  r.headers.emplace_back("content-md5", ContentMd5(body));
  STOKER_ASSIGN_OR_RETURN(http::Response response, Call(r));
  auto it = response.headers.find("etag");
  if (it == response.headers.end()) {
    return Err(Status::IOError(
        fmt::format("s3://{}/{}: part {} answer has no ETag", bucket, key, part_number)));
  }
  return it->second;
}

Status S3Client::CompleteMultipartUpload(const std::string& bucket, const std::string& key,
                                         const std::string& upload_id,
                                         const std::vector<std::string>& etags) {
  std::string xml = "<CompleteMultipartUpload>";
  for (size_t i = 0; i < etags.size(); ++i) {
    xml += fmt::format("<Part><PartNumber>{}</PartNumber><ETag>{}</ETag></Part>", i + 1, etags[i]);
  }
  xml += "</CompleteMultipartUpload>";
  Request r{"POST", bucket, key};
  r.query = {{"uploadId", upload_id}};
  r.body = std::as_bytes(std::span(xml));
  return StatusOf(Call(r));
}

Status S3Client::AbortMultipartUpload(const std::string& bucket, const std::string& key,
                                      const std::string& upload_id) {
  Request r{"DELETE", bucket, key};
  r.query = {{"uploadId", upload_id}};
  return StatusOf(Call(r));
}

Status S3Client::CopyObject(const std::string& bucket, const std::string& from,
                            const std::string& to) {
  Request r{"PUT", bucket, to};
  r.headers.emplace_back("x-amz-copy-source", UriEncodePath("/" + bucket + "/" + from));
  STOKER_ASSIGN_OR_RETURN(http::Response response, Call(r));
  // CopyObject can answer 200 and still have failed: the error is in the body.
  if (response.body.find("<Error>") != std::string::npos) {
    return Status::IOError(fmt::format("copy s3://{}/{} to {}: {}", bucket, from, to,
                                       XmlFirst(response.body, "Message")));
  }
  return Status::OK();
}

Status S3Client::DeleteObject(const std::string& bucket, const std::string& key) {
  return StatusOf(Call(Request{"DELETE", bucket, key}));
}

Result<ObjectListing> S3Client::List(const std::string& bucket, const std::string& prefix,
                                     const std::string& delimiter, int max_keys) {
  ObjectListing out;
  std::string token;
  do {
    Request r{"GET", bucket, ""};
    r.query = {{"list-type", "2"},
               {"prefix", prefix},
               {"encoding-type", "url"},
               {"max-keys", std::to_string(max_keys)}};
    if (!delimiter.empty()) r.query.emplace_back("delimiter", delimiter);
    if (!token.empty()) r.query.emplace_back("continuation-token", token);
    STOKER_ASSIGN_OR_RETURN(http::Response response, Call(r));
    STOKER_ASSIGN_OR_RETURN(std::string next, ParseListPage(response.body, &out));
    if (!next.empty() && next == token) {  // it would never end (and never stop growing)
      return Err(Status::IOError(
          fmt::format("listing s3://{}/{}: the endpoint repeats its continuation token '{}'",
                      bucket, prefix, next)));
    }
    token = std::move(next);
  } while (!token.empty());
  return out;
}

}  // namespace stoker::s3
