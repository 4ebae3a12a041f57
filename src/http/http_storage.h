// Read-only datasets behind any plain web server: http://host/path/name.stoker and https://.
//
// A stoker dataset is a directory of immutable files, so any server that serves files with byte
// ranges (nginx, Apache, a CDN, an S3 bucket's public endpoint) can serve one to readers: each
// file's size comes from HEAD, its bytes from range GETs (retried on connection failures, 5xx,
// 429 and short bodies; verified by the same CRC32C checks as from any other store). A server
// that answers a range request with the whole file is an error saying so, found on the first
// read. Writing is refused (pack into the directory the server serves). There is no listing:
// the newest version is found by probing record names (format/versions.h, "no listing").
// Credentials in the URL (https://user:password@host/...) are sent as HTTP basic auth and never
// appear in messages. Thread-safe.
#pragma once

#include <memory>
#include <string_view>

#include "stoker/storage.h"

namespace stoker::http {

inline constexpr std::string_view kHttpScheme = "http://";
inline constexpr std::string_view kHttpsScheme = "https://";

// InvalidArgument for a URL without a host, or with a query or fragment.
Result<std::shared_ptr<Storage>> OpenHttpStorage(std::string_view url,
                                                 const StorageOptions& options);

}  // namespace stoker::http
