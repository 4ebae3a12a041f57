#include "s3/s3_client.h"

#include <charconv>
#include <curl/curl.h>
#include <openssl/evp.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "common/crc32c.h"

namespace stoker::s3 {

struct S3Client::Request {
  Request(std::string m, std::string b, std::string k)
      : method(std::move(m)), bucket(std::move(b)), key(std::move(k)) {}
  std::string method;  // GET HEAD PUT POST DELETE
  std::string bucket, key;
  std::vector<std::pair<std::string, std::string>> query;
  std::vector<std::pair<std::string, std::string>> headers;  // signed, besides the usual ones
  std::span<const std::byte> body;
  std::span<std::byte> into;  // GET answers written here: exactly into.size() bytes expected
  bool has_into = false;
  bool ranged = false;        // a Range header is sent: 206 expected
};

struct S3Client::Response {
  long status = 0;
  std::string body;
  std::map<std::string, std::string> headers;  // lower-case names
};

namespace {

std::once_flag curl_init_once;

std::string Base64(const unsigned char* data, size_t n) {
  std::string out(4 * ((n + 2) / 3) + 1, '\0');
  const int len = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()), data,
                                  static_cast<int>(n));
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
  const unsigned char be[4] = {static_cast<unsigned char>(crc >> 24),
                               static_cast<unsigned char>(crc >> 16),
                               static_cast<unsigned char>(crc >> 8),
                               static_cast<unsigned char>(crc)};
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
    const std::string_view entity = s.substr(i + 1, semi == std::string_view::npos ? 0 : semi - i - 1);
    if (entity == "amp") out.push_back('&');
    else if (entity == "lt") out.push_back('<');
    else if (entity == "gt") out.push_back('>');
    else if (entity == "quot") out.push_back('"');
    else if (entity == "apos") out.push_back('\'');
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
    } else if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
               std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out.push_back(static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16)));
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

S3Client::S3Client(S3Config config) : config_(std::move(config)) {}

S3Client::~S3Client() {
  for (void* h : idle_) curl_easy_cleanup(static_cast<CURL*>(h));
}

Result<std::shared_ptr<S3Client>> S3Client::Create(S3Config config) {
  std::call_once(curl_init_once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  return std::shared_ptr<S3Client>(new S3Client(std::move(config)));
}

void* S3Client::TakeHandle() {
  {
    std::lock_guard lock(mu_);
    if (!idle_.empty()) {
      void* h = idle_.back();
      idle_.pop_back();
      return h;
    }
  }
  return curl_easy_init();
}

void S3Client::ReturnHandle(void* handle) {
  std::lock_guard lock(mu_);
  if (idle_.size() < 64) {
    idle_.push_back(handle);
  } else {
    curl_easy_cleanup(static_cast<CURL*>(handle));
  }
}

S3ClientStats S3Client::stats() const {
  return {requests_.load(), retries_.load(), received_.load(), sent_.load()};
}

namespace {

constexpr size_t kMaxErrorBody = 1 << 20;
// Answers without a Content-Length are listings (a page of 1,000 keys is ~300 KB); objects
// always come with one.
constexpr uint64_t kMaxUndeclaredBody = 64ull << 20;

// What the curl callbacks fill in.
struct Transfer {
  CURL* curl = nullptr;
  std::span<std::byte> into;
  bool has_into = false;
  size_t received = 0;
  bool overflow = false;
  std::string body;  // answers without `into`, and error bodies
  std::map<std::string, std::string> headers;
  std::span<const std::byte> upload;
  size_t uploaded = 0;
};

size_t OnData(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t len = size * n;
  long status = 0;
  curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
  if (status >= 300) {  // an error body: its first MiB names the error, the rest is dropped
    if (t->body.size() < kMaxErrorBody) t->body.append(data, std::min(len, kMaxErrorBody - t->body.size()));
    return len;
  }
  if (!t->has_into) {
    // Grown as the bytes arrive, and never past what the answer declared (or, undeclared, a
    // listing's or small file's worth): an endpoint that streams on forever is cut off.
    auto declared = t->headers.find("content-length");
    uint64_t limit = kMaxUndeclaredBody;
    if (declared != t->headers.end()) {
      (void)std::from_chars(declared->second.data(),
                            declared->second.data() + declared->second.size(), limit);
    }
    if (t->body.size() + len > limit) {
      t->overflow = true;
      return 0;  // aborts the transfer
    }
    t->body.append(data, len);
    return len;
  }
  if (t->received + len > t->into.size()) {
    t->overflow = true;
    return 0;  // aborts the transfer: the server sent more than the range
  }
  std::memcpy(t->into.data() + t->received, data, len);
  t->received += len;
  return len;
}

size_t OnHeader(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  std::string_view line(data, size * n);
  if (line.starts_with("HTTP/")) t->headers.clear();  // a new answer (after 100 Continue)
  const size_t colon = line.find(':');
  if (colon != std::string_view::npos) {
    std::string name(line.substr(0, colon));
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
    while (!value.empty() && (value.back() == '\r' || value.back() == '\n' || value.back() == ' ')) {
      value.remove_suffix(1);
    }
    t->headers[name] = std::string(value);
  }
  return size * n;
}

size_t OnRead(char* buffer, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t len = std::min(size * n, t->upload.size() - t->uploaded);
  std::memcpy(buffer, t->upload.data() + t->uploaded, len);
  t->uploaded += len;
  return len;
}

}  // namespace

Result<S3Client::Response> S3Client::CallOnce(const Request& r, bool* retryable) {
  *retryable = false;
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
  const std::string url = ep.scheme + "://" + host + encoded_path + (query.empty() ? "" : "?" + query);
  const std::string where = fmt::format("{} s3://{}/{}", r.method, r.bucket, r.key);

  SigningRequest s;
  s.method = r.method;
  s.path = encoded_path;
  s.query = r.query;
  s.payload_sha256 = r.body.empty() ? std::string(kEmptyPayloadSha256)
                                    : Sha256Hex(std::string_view(
                                          reinterpret_cast<const char*>(r.body.data()),
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
  const std::string authorization = Authorization(s, config_.credentials, date, config_.region);

  CURL* curl = static_cast<CURL*>(TakeHandle());
  if (curl == nullptr) return Err(Status::Internal("curl_easy_init failed"));
  curl_easy_reset(curl);  // options only: the connection stays alive for the next request
  Transfer t;
  t.curl = curl;
  t.into = r.into;
  t.has_into = r.has_into;
  t.upload = r.body;
  curl_slist* headers = nullptr;
  for (const auto& [name, value] : s.headers) {
    if (name == "host") continue;  // curl sends the URL's host
    headers = curl_slist_append(headers, (name + ": " + value).c_str());
  }
  headers = curl_slist_append(headers, ("Authorization: " + authorization).c_str());
  headers = curl_slist_append(headers, "Expect:");  // no 100-continue round trip
  headers = curl_slist_append(headers, "Content-Type:");
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
  // A stalled transfer (under 1 KiB/s for 30 s) fails and is retried; there is no overall
  // limit, since a large object over a slow link legitimately takes long.
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1024L);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, 30L);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, OnData);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, OnHeader);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &t);
  if (r.method == "HEAD") {
    curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
  } else if (r.method == "PUT") {
    curl_easy_setopt(curl, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(curl, CURLOPT_READFUNCTION, OnRead);
    curl_easy_setopt(curl, CURLOPT_READDATA, &t);
    curl_easy_setopt(curl, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(r.body.size()));
  } else if (r.method == "POST") {
    curl_easy_setopt(curl, CURLOPT_POST, 1L);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, reinterpret_cast<const char*>(r.body.data()));
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r.body.size()));
  } else if (r.method != "GET") {
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, r.method.c_str());
  }
  requests_.fetch_add(1);
  const CURLcode rc = curl_easy_perform(curl);
  long status = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  curl_slist_free_all(headers);
  received_.fetch_add(t.received + t.body.size());
  sent_.fetch_add(t.uploaded);
  if (rc != CURLE_OK && !(rc == CURLE_WRITE_ERROR && t.overflow)) {
    curl_easy_cleanup(curl);  // the connection is in an unknown state
    *retryable = rc != CURLE_URL_MALFORMAT && rc != CURLE_UNSUPPORTED_PROTOCOL;
    return Err(Status(StatusCode::kUnavailable,
                      fmt::format("{}: {} ({})", where, curl_easy_strerror(rc), url)));
  }
  ReturnHandle(curl);
  if (t.overflow) {
    return Err(Status::IOError(
        t.has_into ? fmt::format("{}: the server sent more than the {} bytes asked for", where,
                                 r.into.size())
                   : fmt::format("{}: the server sent more than it declared (Content-Length), "
                                 "or over {} bytes undeclared", where, kMaxUndeclaredBody)));
  }
  Response response{status, std::move(t.body), std::move(t.headers)};
  if (status >= 300 || (status == 200 && r.body.size() > 0 && r.method == "POST" &&
                        response.body.find("<Error>") != std::string::npos)) {
    const std::string code = First(response.body, "Code");
    const std::string message = First(response.body, "Message");
    *retryable = RetryableStatus(status, code) || status == 200;
    // HEAD answers carry no body: name the status then.
    const std::string what = !code.empty() ? code
                             : status == 403 ? "Forbidden (wrong credentials, or no permission)"
                             : status == 404 ? "Not Found"
                                             : "";
    const std::string text = fmt::format("{}: HTTP {} {}{}{}", where, status, what,
                                         message.empty() ? "" : ": ", message);
    if (status == 404) return Err(Status::NotFound(text));
    // Only conditional requests get 412: If-None-Match found the key taken.
    if (status == 412) return Err(Status::AlreadyExists(text));
    if (status == 403) return Err(Status(StatusCode::kPermissionDenied, text));
    // Throttling and server errors say nothing about the data: the store is unavailable.
    if (*retryable) return Err(Status(StatusCode::kUnavailable, text));
    return Err(Status::IOError(text));
  }
  if (r.has_into) {
    if (r.ranged && status != 206 && !(status == 200 && r.into.size() > 0 &&
                                       response.headers["content-length"] ==
                                           std::to_string(r.into.size()))) {
      return Err(Status::IOError(fmt::format("{}: the server ignored the Range header (HTTP {})",
                                             where, status)));
    }
    if (t.received != r.into.size()) {
      *retryable = true;  // a short body is never a success
      return Err(Status::IOError(fmt::format("{}: short body, {} of {} bytes", where, t.received,
                                             r.into.size())));
    }
  }
  return response;
}

Result<S3Client::Response> S3Client::Call(const Request& r) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  for (int attempt = 1;; ++attempt) {
    bool retryable = false;
    auto response = CallOnce(r, &retryable);
    if (response || !retryable || attempt >= config_.max_attempts) {
      if (!response && attempt > 1) {
        return Err(response.error().WithContext(fmt::format("after {} attempts", attempt)));
      }
      return response;
    }
    retries_.fetch_add(1);
    // Exponential backoff with full jitter, as the AWS SDKs: up to 100 ms × 2^(attempt-1),
    // capped at 20 s.
    const double cap = std::min(20000.0, 100.0 * static_cast<double>(1ull << (attempt - 1)));
    std::uniform_real_distribution<double> jitter(0.0, cap);
    std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(jitter(rng) * 1000)));
  }
}

Status S3Client::GetRange(const std::string& bucket, const std::string& key, uint64_t offset,
                          std::span<std::byte> dst) {
  if (dst.empty()) return Status::OK();
  Request r{"GET", bucket, key};
  r.headers.emplace_back("range", fmt::format("bytes={}-{}", offset, offset + dst.size() - 1));
  r.into = dst;
  r.has_into = true;
  r.ranged = true;
  return StatusOf(Call(r));
}

Result<std::string> S3Client::GetObject(const std::string& bucket, const std::string& key) {
  STOKER_ASSIGN_OR_RETURN(Response response, Call(Request{"GET", bucket, key}));
  // A body shorter than its Content-Length fails in curl; this catches a lying header too.
  if (auto it = response.headers.find("content-length");
      it != response.headers.end() && it->second != std::to_string(response.body.size())) {
    return Err(Status::IOError(fmt::format("GET s3://{}/{}: {} bytes, Content-Length {}", bucket,
                                           key, response.body.size(), it->second)));
  }
  return std::move(response.body);
}

Result<uint64_t> S3Client::HeadObject(const std::string& bucket, const std::string& key) {
  STOKER_ASSIGN_OR_RETURN(Response response, Call(Request{"HEAD", bucket, key}));
  auto it = response.headers.find("content-length");
  if (it == response.headers.end()) {
    return Err(Status::IOError(fmt::format("HEAD s3://{}/{}: no Content-Length", bucket, key)));
  }
  uint64_t size = 0;
  const std::string& text = it->second;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), size);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) {
    return Err(Status::IOError(fmt::format("HEAD s3://{}/{}: Content-Length '{}' is not a size",
                                           bucket, key, text)));
  }
  return size;
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
  STOKER_ASSIGN_OR_RETURN(Response response, Call(r));
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
  STOKER_ASSIGN_OR_RETURN(Response response, Call(r));
  auto it = response.headers.find("etag");
  if (it == response.headers.end()) {
    return Err(Status::IOError(fmt::format("s3://{}/{}: part {} answer has no ETag", bucket, key,
                                           part_number)));
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
  STOKER_ASSIGN_OR_RETURN(Response response, Call(r));
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
    r.query = {{"list-type", "2"}, {"prefix", prefix}, {"encoding-type", "url"},
               {"max-keys", std::to_string(max_keys)}};
    if (!delimiter.empty()) r.query.emplace_back("delimiter", delimiter);
    if (!token.empty()) r.query.emplace_back("continuation-token", token);
    STOKER_ASSIGN_OR_RETURN(Response response, Call(r));
    STOKER_ASSIGN_OR_RETURN(std::string next, ParseListPage(response.body, &out));
    if (!next.empty() && next == token) {  // it would never end (and never stop growing)
      return Err(Status::IOError(fmt::format(
          "listing s3://{}/{}: the endpoint repeats its continuation token '{}'", bucket, prefix,
          next)));
    }
    token = std::move(next);
  } while (!token.empty());
  return out;
}

}  // namespace stoker::s3
