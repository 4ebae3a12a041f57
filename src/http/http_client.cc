#include "http/http_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>
#include <unistd.h>

namespace stoker::http {
namespace {

std::once_flag curl_init_once;

constexpr size_t kMaxErrorBody = 1 << 20;
// Answers without a Content-Length are listings (a page of 1,000 S3 keys is ~300 KB); files
// always come with one.
constexpr uint64_t kMaxUndeclaredBody = 64ull << 20;
constexpr size_t kMaxIdleHandles = 64;

// What the curl callbacks fill in.
struct Transfer {
  CURL* curl = nullptr;
  std::optional<std::span<std::byte>> into;
  bool ranged = false;
  size_t received = 0;
  bool overflow = false;
  bool range_ignored = false;
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
    if (t->body.size() < kMaxErrorBody)
      t->body.append(data, std::min(len, kMaxErrorBody - t->body.size()));
    return len;
  }
  if (!t->into) {
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
  if (t->ranged && status == 200 && t->received == 0) {
    // A whole file where a range was asked for: acceptable only when the range is the whole
    // file. Stopped before its first byte otherwise (a chunk is hundreds of MiB).
    auto declared = t->headers.find("content-length");
    if (declared == t->headers.end() || declared->second != std::to_string(t->into->size())) {
      t->range_ignored = true;
      return 0;
    }
  }
  if (t->received + len > t->into->size()) {
    t->overflow = true;
    return 0;  // aborts the transfer: the server sent more than the range
  }
  std::memcpy(t->into->data() + t->received, data, len);
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
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t'))
      value.remove_prefix(1);
    while (!value.empty() &&
           (value.back() == '\r' || value.back() == '\n' || value.back() == ' ')) {
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

// SSL_CERT_FILE, or the system's CA bundle wherever this distribution keeps it. Looked for at run
// time, not left to the path built into curl/OpenSSL: the manylinux wheel's is its build
// directory, and it runs on distributions that disagree on where the bundle lives.
std::string CaFile() {
  if (const char* file = std::getenv("SSL_CERT_FILE"); file != nullptr) return file;
  for (const char* bundle : {
           "/etc/ssl/certs/ca-certificates.crt",                 // Debian, Ubuntu, Arch, Alpine
           "/etc/pki/tls/certs/ca-bundle.crt",                   // RHEL, Fedora, Rocky, Amazon
           "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",  // RHEL 9
           "/etc/ssl/ca-bundle.pem",                             // openSUSE, SLES
           "/etc/ssl/cert.pem",                                  // Alpine, macOS-like
       }) {
    if (access(bundle, R_OK) == 0) return bundle;
  }
  return "";  // curl's built-in default
}

}  // namespace

Client::Client(std::chrono::milliseconds request_timeout)
    : request_timeout_(request_timeout), ca_file_(CaFile()) {}

Client::~Client() {
  for (void* h : idle_) curl_easy_cleanup(static_cast<CURL*>(h));
}

std::shared_ptr<Client> Client::Create(std::chrono::milliseconds request_timeout) {
  std::call_once(curl_init_once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  return std::shared_ptr<Client>(new Client(request_timeout));
}

void* Client::TakeHandle() {
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

void Client::ReturnHandle(void* handle) {
  std::lock_guard lock(mu_);
  if (idle_.size() < kMaxIdleHandles) {
    idle_.push_back(handle);
  } else {
    curl_easy_cleanup(static_cast<CURL*>(handle));
  }
}

Result<Response> Client::Perform(const Request& r) {
  CURL* curl = static_cast<CURL*>(TakeHandle());
  if (curl == nullptr) return Err(Status::Internal("curl_easy_init failed"));
  curl_easy_reset(curl);  // options only: the connection stays alive for the next request
  Transfer t;
  t.curl = curl;
  t.into = r.into;
  t.ranged = r.ranged;
  t.upload = r.body;
  curl_slist* headers = nullptr;
  for (const std::string& line : r.header_lines) {
    headers = curl_slist_append(headers, line.c_str());
  }
  const long timeout_s =
      std::max<long>(1, static_cast<long>((request_timeout_.count() + 999) / 1000));
  curl_easy_setopt(curl, CURLOPT_URL, r.url.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_TCP_KEEPALIVE, 1L);
  // http(s) only: a redirect or a URL must never turn a dataset read into file:// or ftp://.
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(std::min<int64_t>(10000, request_timeout_.count())));
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, timeout_s);
  if (!ca_file_.empty()) curl_easy_setopt(curl, CURLOPT_CAINFO, ca_file_.c_str());
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
  const CURLcode rc = curl_easy_perform(curl);
  long status = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  curl_slist_free_all(headers);
  const bool stopped_by_us = rc == CURLE_WRITE_ERROR && (t.overflow || t.range_ignored);
  if (rc != CURLE_OK && !stopped_by_us) {
    curl_easy_cleanup(curl);  // the connection is in an unknown state
    const std::string text = fmt::format("{}: {} ({})", r.where, curl_easy_strerror(rc), r.url);
    if (rc == CURLE_URL_MALFORMAT || rc == CURLE_UNSUPPORTED_PROTOCOL) {
      return Err(Status::InvalidArgument(text));
    }
    return Err(Status(
        rc == CURLE_OPERATION_TIMEDOUT ? StatusCode::kTimeout : StatusCode::kUnavailable, text));
  }
  if (stopped_by_us) {
    curl_easy_cleanup(curl);  // the rest of the answer is still on its way
  } else {
    ReturnHandle(curl);
  }
  if (t.range_ignored) {
    return Err(Status::Unsupported(fmt::format(
        "{}: the server answered a range request with the whole file (HTTP 200, Content-Length "
        "{}): it does not serve byte ranges, which stoker reads datasets by; serve the dataset "
        "from one that does (nginx, Apache, any S3 store) or copy it to a local disk",
        r.where, t.headers.contains("content-length") ? t.headers["content-length"] : "unset")));
  }
  // A body longer or shorter than asked broke in transfer (a proxy, a reset): tried again.
  if (t.overflow) {
    return Err(Status::IOError(
                   r.into
                       ? fmt::format("{}: the server sent more than the {} bytes asked for",
                                     r.where, r.into->size())
                       : fmt::format("{}: the server sent more than it declared (Content-Length), "
                                     "or over {} bytes undeclared",
                                     r.where, kMaxUndeclaredBody))
                   .Retryable());
  }
  if (r.into && status < 300 && t.received != r.into->size()) {  // never a success
    return Err(Status::IOError(fmt::format("{}: short body, {} of {} bytes", r.where, t.received,
                                           r.into->size()))
                   .Retryable());
  }
  return Response{status, std::move(t.body), std::move(t.headers)};
}

Result<uint64_t> ContentLength(const Response& response, std::string_view where) {
  auto it = response.headers.find("content-length");
  if (it == response.headers.end()) {
    return Err(Status::IOError(fmt::format("{}: no Content-Length", where)));
  }
  uint64_t size = 0;
  const std::string& text = it->second;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), size);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) {
    return Err(Status::IOError(fmt::format("{}: Content-Length '{}' is not a size", where, text)));
  }
  return size;
}

}  // namespace stoker::http
