// A minimal S3 REST client over libcurl: the calls a dataset needs (ranged GET, HEAD, PUT,
// multipart upload, copy, delete, ListObjectsV2), each signed with SigV4 (sigv4.h) and retried
// as the AWS SDKs do (AWS_MAX_ATTEMPTS, exponential backoff with full jitter on throttling,
// 5xx, connection failures and short bodies: the retryable status codes). A body shorter than
// promised is never a success. Temporary credentials are refreshed before they expire, and
// once more when the store refuses them (credentials.h).
//
// Requests go through one http::Client (src/http/http_client.h): connections are kept alive
// and pooled, so concurrent calls from many reader threads each keep their own. Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "http/http_client.h"
#include "s3/s3_config.h"
#include "stoker/status.h"

namespace stoker::s3 {

struct ObjectListing {
  std::vector<std::string> keys;      // full keys
  std::vector<std::string> prefixes;  // common prefixes (with the delimiter at the end)
};

// Parses one ListObjectsV2 answer page (encoding-type=url): appends to `out`, returns the
// continuation token ("" on the last page). Corruption on malformed XML.
Result<std::string> ParseListPage(std::string_view xml, ObjectListing* out);

class S3Client {
 public:
  static Result<std::shared_ptr<S3Client>> Create(S3Config config);
  ~S3Client();

  const S3Config& config() const { return config_; }

  // Exactly dst.size() bytes of the object from `offset` (one ranged GET).
  Status GetRange(const std::string& bucket, const std::string& key, uint64_t offset,
                  std::span<std::byte> dst);
  Result<std::string> GetObject(const std::string& bucket, const std::string& key);
  // The object's size; NotFound if it does not exist.
  Result<uint64_t> HeadObject(const std::string& bucket, const std::string& key);
  // Content-MD5 (checked by every S3 implementation) and x-amz-checksum-crc32c go with the body.
  // `if_absent`: If-None-Match: * (AWS S3 since 2024, Ceph RGW), AlreadyExists (HTTP 412) when
  // the key exists. A retried request can meet its own first attempt's object: callers that
  // must know compare the stored bytes.
  Status PutObject(const std::string& bucket, const std::string& key,
                   std::span<const std::byte> body, bool if_absent = false);
  Result<std::string> CreateMultipartUpload(const std::string& bucket, const std::string& key);
  // The part's ETag.
  Result<std::string> UploadPart(const std::string& bucket, const std::string& key,
                                 const std::string& upload_id, int part_number,
                                 std::span<const std::byte> body);
  Status CompleteMultipartUpload(const std::string& bucket, const std::string& key,
                                 const std::string& upload_id,
                                 const std::vector<std::string>& etags);
  Status AbortMultipartUpload(const std::string& bucket, const std::string& key,
                              const std::string& upload_id);
  Status CopyObject(const std::string& bucket, const std::string& from, const std::string& to);
  Status DeleteObject(const std::string& bucket, const std::string& key);
  // Every key under `prefix` (all pages); with a delimiter, what lies deeper is a prefix.
  Result<ObjectListing> List(const std::string& bucket, const std::string& prefix,
                             const std::string& delimiter, int max_keys = 1000);

  struct Request;

 private:
  explicit S3Client(S3Config config);
  // A request with its retries (src/common/retry.h: AWS_MAX_ATTEMPTS tries, backoff from
  // 100 ms with full jitter, capped at 20 s); each attempt signed afresh (x-amz-date).
  Result<http::Response> Call(const Request& request);
  http::Request Sign(const Request& request, const Credentials& credentials) const;

  const S3Config config_;
  const std::shared_ptr<http::Client> http_;
};

}  // namespace stoker::s3
