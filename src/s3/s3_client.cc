#include "s3/s3_client.h"

#include <openssl/evp.h>

#include <cctype>
#include <chrono>
#include <optional>

#include <fmt/format.h>

#include "common/crc32c.h"
#include "common/parse_number.h"
#include "common/retry.h"

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

std::string XmlUnescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      out.push_back(s[i]);
      continue;
    }
    const size_t semi = s.find(';', i);
    const std::string_view entity =
        s.substr(i + 1, semi == std::string_view::npos ? 0 : semi - i - 1);
    if (entity == "amp")
      out.push_back('&');
    else if (entity == "lt")
      out.push_back('<');
    else if (entity == "gt")
      out.push_back('>');
    else if (entity == "quot")
      out.push_back('"');
    else if (entity == "apos")
      out.push_back('\'');
    else {
      out.push_back('&');
      continue;
    }
    i = semi;
  }
  return out;
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

// The text of each <tag>…</tag> in `xml`, in order (S3's answers never nest a tag in itself).
std::vector<std::string_view> Elements(std::string_view xml, std::string_view tag) {
  std::vector<std::string_view> out;
  const std::string open = "<" + std::string(tag) + ">", close = "</" + std::string(tag) + ">";
  size_t pos = 0;
  while ((pos = xml.find(open, pos)) != std::string_view::npos) {
    const size_t start = pos + open.size();
    const size_t end = xml.find(close, start);
    if (end == std::string_view::npos) break;
    out.push_back(xml.substr(start, end - start));
    pos = end + close.size();
  }
  return out;
}

std::string First(std::string_view xml, std::string_view tag) {
  auto e = Elements(xml, tag);
  return e.empty() ? "" : XmlUnescape(e.front());
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
  for (std::string_view contents : Elements(xml, "Contents")) {
    out->keys.push_back(UrlDecode(XmlUnescape(First(contents, "Key"))));
  }
  for (std::string_view prefix : Elements(xml, "CommonPrefixes")) {
    out->prefixes.push_back(UrlDecode(XmlUnescape(First(prefix, "Prefix"))));
  }
  if (First(xml, "IsTruncated") != "true") return std::string();
  std::string token = First(xml, "NextContinuationToken");
  if (token.empty()) return Err(Status::Corruption("S3 listing: truncated without a token"));
  return token;
}

S3Client::S3Client(S3Config config)
    : config_(std::move(config)), http_(http::Client::Create(config_.request_timeout)) {}

S3Client::~S3Client() = default;

Result<std::shared_ptr<S3Client>> S3Client::Create(S3Config config) {
  return std::shared_ptr<S3Client>(new S3Client(std::move(config)));
}

// One attempt's URL and header lines, signed (afresh each attempt: x-amz-date).
http::Request S3Client::Sign(const Request& r) const {
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
  if (!config_.credentials.session_token.empty()) {
    s.headers.emplace_back("x-amz-security-token", config_.credentials.session_token);
  }
  for (const auto& [name, value] : s.headers) {
    if (name == "host") continue;  // curl sends the URL's host
    out.header_lines.push_back(name + ": " + value);
  }
  out.header_lines.push_back("Authorization: " +
                             Authorization(s, config_.credentials, date, config_.region));
  out.header_lines.push_back("Expect:");  // no 100-continue round trip
  out.header_lines.push_back("Content-Type:");
  return out;
}

namespace {

// The status of an HTTP answer that is an error (>= 300, or an <Error> inside a 200 to a POST,
// as CompleteMultipartUpload may answer). Throttling and server errors say nothing about the
// data: the store is unavailable (retryable). Other refusals are final.
Status ErrorOfAnswer(long status, const std::string& body, const std::string& where) {
  const std::string code = First(body, "Code");
  const std::string message = First(body, "Message");
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
  while (retry.Next(last)) {
    const http::Request signed_request = Sign(r);
    auto response = http_->Perform(signed_request);
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
  std::string id = First(response.body, "UploadId");
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
                                       First(response.body, "Message")));
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
