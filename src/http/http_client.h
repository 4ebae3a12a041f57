// One HTTP(S) request at a time over libcurl, for the clients that speak HTTP: s3:// (src/s3/,
// which signs each request first) and plain http(s):// datasets (http_storage.h).
//
// What every such client needs and curl leaves to its caller: kept-alive connections (curl
// handles are pooled and reused, so many reader threads each keep their own connection), a
// bounded answer (never more than the range asked for, than the Content-Length declared, or a
// listing's worth undeclared), a body shorter than promised never taken for a success, and a
// server that ignores a Range header caught at once. One attempt per call: retrying is the
// caller's (its notion of a retryable answer differs). Thread-safe.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "stoker/status.h"

namespace stoker::http {

struct Request {
  std::string method = "GET";  // GET HEAD PUT POST DELETE (others are sent as given)
  std::string url{};
  std::string where{};                      // "GET s3://bucket/key": names the request in messages
  std::vector<std::string> header_lines{};  // "Name: value"
  std::span<const std::byte> body{};        // sent with PUT and POST
  // A GET's body is written here and must be exactly its size; unset: into Response::body.
  std::optional<std::span<std::byte>> into{};
  // "Range: bytes=a-b" is among the header lines: a 200 carrying more than the range is the
  // server ignoring it (Unsupported, never retried: it will not change its mind).
  bool ranged = false;
};

struct Response {
  long status = 0;
  std::string body;                            // without Request::into; error bodies (1 MiB)
  std::map<std::string, std::string> headers;  // lower-case names
};

class Client {
 public:
  // `request_timeout`: a transfer that moves no byte for this long fails (Timeout), the one
  // deadline of docs/protocol.md, "Deadlines"; a large body that keeps moving is never cut off.
  // https:// servers are checked against $SSL_CERT_FILE when set, else the system's CA bundle
  // (Debian, RHEL, SUSE and Alpine places; http_client.cc).
  static std::shared_ptr<Client> Create(std::chrono::milliseconds request_timeout);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // One attempt. An answer with any HTTP status is a Response (the caller judges >= 300);
  // errors are the transfer's: Unavailable (connection), Timeout, IOError (short or overlong
  // body), InvalidArgument (a malformed URL), Unsupported (a Range header ignored).
  Result<Response> Perform(const Request& request);

 private:
  explicit Client(std::chrono::milliseconds request_timeout);
  void* TakeHandle();
  void ReturnHandle(void* handle);

  const std::chrono::milliseconds request_timeout_;
  const std::string ca_file_;
  std::mutex mu_;
  std::vector<void*> idle_;  // CURL* easy handles with their live connections
};

// The value of a Content-Length header as a size; IOError naming `where` if it is missing or
// not a number.
Result<uint64_t> ContentLength(const Response& response, std::string_view where);

}  // namespace stoker::http
