#include "http/http_storage.h"

#include <fmt/format.h>

#include "common/retry.h"
#include "http/http_client.h"
#include "storage/read_only_storage.h"
#include "storage/string_bytes.h"

namespace stoker::http {
namespace {

// As the S3 client's "standard" retries: a server that restarts or sheds load is waited out for
// a few seconds; a refusal (404, 403) is final at once.
constexpr RetryPolicy kRetries{.max_attempts = 5,
                               .base_backoff = std::chrono::milliseconds(100),
                               .max_backoff = std::chrono::milliseconds(20000)};

// The status of an answer that is not a success.
Status ErrorOfAnswer(const Response& answer, const std::string& where) {
  const long status = answer.status;
  const std::string text = fmt::format("{}: HTTP {}", where, status);
  if (status == 404 || status == 410) return Status::NotFound(text + " (no such file)");
  if (status == 401 || status == 403) {
    return Status::PermissionDenied(text +
                                    " (the server refuses: credentials go in the URL, "
                                    "https://user:password@host/...)");
  }
  if (status == 408 || status == 429 || status >= 500) {
    return Status::Unavailable(text);
  }
  if (status >= 300 && status < 400) {
    const auto to = answer.headers.find("location");
    return Status::InvalidArgument(
        fmt::format("{} (redirected to {}): give the URL it names", text,
                    to != answer.headers.end() ? to->second : "nowhere said"));
  }
  if (status == 416) {
    return Status::Corruption(text +
                              " (the file is shorter than the server said: it changed "
                              "on the server, or the server truncates it)");
  }
  return Status::InvalidArgument(text);
}

// The dataset's location: the URL to request, and the same without credentials for messages.
struct Root {
  std::string url;      // no trailing '/'
  std::string display;  // userinfo dropped
};

Result<Root> ParseRoot(std::string_view url) {
  const bool https = url.starts_with(kHttpsScheme);
  const std::string_view scheme = https ? kHttpsScheme : kHttpScheme;
  std::string_view rest = url.substr(scheme.size());
  if (rest.find_first_of("?#") != std::string_view::npos) {
    return Err(Status::InvalidArgument(fmt::format(
        "{}: an http(s):// dataset URL names the dataset's directory; no query or fragment", url)));
  }
  while (rest.ends_with('/')) rest.remove_suffix(1);
  const size_t path_start = std::min(rest.find('/'), rest.size());
  std::string_view authority = rest.substr(0, path_start);
  const size_t at = authority.rfind('@');
  const std::string_view host = at == std::string_view::npos ? authority : authority.substr(at + 1);
  if (host.empty()) {
    return Err(Status::InvalidArgument(
        fmt::format("{}: no host (http://host[:port]/path/to/dataset)", url)));
  }
  Root root;
  root.url = std::string(scheme) + std::string(rest);
  root.display = std::string(scheme) + std::string(host) + std::string(rest.substr(path_start));
  return root;
}

// Requests with their retries.
class Fetcher {
 public:
  Fetcher(std::shared_ptr<Client> client, Root root)
      : client_(std::move(client)), root_(std::move(root)) {}

  std::string Url(std::string_view path) const { return Join(root_.url, path); }
  std::string Display(std::string_view path) const { return Join(root_.display, path); }

  // The answer to `request` when it is a success (2xx); retryable failures are tried again.
  Result<Response> Call(Request request, std::string_view path) {
    request.url = Url(path);
    request.where = fmt::format("{} {}", request.method, Display(path));
    Retry retry(kRetries);
    Status last;
    while (retry.Next(last)) {
      auto answer = client_->Perform(request);
      if (answer && answer->status >= 300) answer = Err(ErrorOfAnswer(*answer, request.where));
      if (answer) return answer;
      last = answer.error();
    }
    if (retry.attempt() > 1) {
      return Err(last.WithContext(fmt::format("after {} attempts", retry.attempt())));
    }
    return Err(last);
  }

  Result<uint64_t> Size(std::string_view path) {
    STOKER_ASSIGN_OR_RETURN(Response answer, Call(Request{.method = "HEAD"}, path));
    return ContentLength(answer, "HEAD " + Display(path));
  }

 private:
  static std::string Join(const std::string& root, std::string_view path) {
    return path.empty() ? root : root + "/" + std::string(path);
  }

  std::shared_ptr<Client> client_;
  Root root_;
};

class HttpFile : public RandomAccessFile {
 public:
  HttpFile(std::shared_ptr<Fetcher> fetcher, std::string path, uint64_t size)
      : fetcher_(std::move(fetcher)), path_(std::move(path)), size_(size) {}
  uint64_t Size() const override { return size_; }
  Status ReadAt(uint64_t offset, std::span<std::byte> dst) const override {
    if (offset > size_ || dst.size() > size_ - offset) {
      return Status::IOError(fmt::format("{}: read of {} bytes at {} past the end ({})",
                                         fetcher_->Display(path_), dst.size(), offset, size_));
    }
    if (dst.empty()) return Status::OK();
    Request request{
        .header_lines = {fmt::format("Range: bytes={}-{}", offset, offset + dst.size() - 1)},
        .into = dst,
        .ranged = true};
    auto answer = fetcher_->Call(std::move(request), path_);
    return answer ? Status::OK() : answer.error();
  }

 private:
  std::shared_ptr<Fetcher> fetcher_;
  std::string path_;
  uint64_t size_;
};

class HttpStorage final : public storage::ReadOnlyStorage {
 public:
  explicit HttpStorage(std::shared_ptr<Fetcher> fetcher) : fetcher_(std::move(fetcher)) {}

  Result<std::unique_ptr<RandomAccessFile>> OpenRead(std::string_view path) override {
    STOKER_ASSIGN_OR_RETURN(const uint64_t size, fetcher_->Size(path));
    return std::make_unique<HttpFile>(fetcher_, std::string(path), size);
  }
  Result<std::shared_ptr<const FileBytes>> Map(std::string_view path) override {
    // A body shorter than its Content-Length fails in curl (and is retried).
    STOKER_ASSIGN_OR_RETURN(Response answer, fetcher_->Call(Request{}, path));
    return std::make_shared<storage::StringBytes>(std::move(answer.body));
  }
  Result<bool> Exists(std::string_view path) override {
    auto size = fetcher_->Size(path);
    if (size) return true;
    if (size.error().IsNotFound()) return false;
    return Err(size.error());
  }
  Result<std::vector<std::string>> List(std::string_view path) override {
    // Readers never need one (versions are found by probing, format/versions.h); what lists is
    // maintenance (gc, commit), which writes too.
    return Err(Status::Unsupported(fmt::format(
        "{}: http(s):// datasets are read-only, and a web server is not asked for listings; "
        "this needs the directory (or bucket) the server serves, by its own path or URI",
        Describe(path))));
  }
  std::string Describe(std::string_view path) const override { return fetcher_->Display(path); }

 private:
  Status ReadOnly(std::string_view path) const override {
    return Status::Unsupported(fmt::format(
        "{}: http(s):// datasets are read-only; write to the directory (or bucket) the web "
        "server serves, with its own path or URI",
        Describe(path)));
  }

  std::shared_ptr<Fetcher> fetcher_;
};

}  // namespace

Result<std::shared_ptr<Storage>> OpenHttpStorage(std::string_view url,
                                                 const StorageOptions& options) {
  STOKER_ASSIGN_OR_RETURN(Root root, ParseRoot(url));
  STOKER_ASSIGN_OR_RETURN(const auto timeout, RequestTimeout(options.request_timeout));
  auto fetcher = std::make_shared<Fetcher>(Client::Create(timeout), std::move(root));
  return std::make_shared<HttpStorage>(std::move(fetcher));
}

}  // namespace stoker::http
