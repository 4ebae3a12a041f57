// Storage: the one interface between stoker and wherever a dataset's files live.
//
// Every path is relative to the storage's root (a dataset directory, a bucket prefix …) and uses
// '/' separators. Implementations: POSIX directories (src/storage/posix_storage.cc), a `stoker
// serve` server (src/net/remote_storage.cc), S3 (src/s3/s3_storage.cc), a web server (read-only:
// src/http/http_storage.cc), a node daemon in front of any of them
// (src/node_client/node_storage.cc), and an in-memory fake and a fault-injecting wrapper for
// tests. OpenStorage (src/storage_uri/) picks one by the URI's scheme.
// Thread-safety: every method of Storage and RandomAccessFile may be called concurrently.
// A WritableFile is used by one thread at a time.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "stoker/status.h"

namespace stoker {

class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;
  virtual uint64_t Size() const = 0;
  // Fills all of `dst` from `offset`. Reading past the end, or any short read, is an error:
  // a short read is never reported as success.
  virtual Status ReadAt(uint64_t offset, std::span<std::byte> dst) const = 0;
  // The POSIX file descriptor behind this file, or -1: lets the read pipeline submit reads to
  // io_uring directly. Storage that is not a local file keeps the default.
  virtual int NativeFd() const { return -1; }
};

class WritableFile {
 public:
  virtual ~WritableFile() = default;
  virtual Status Append(std::span<const std::byte> data) = 0;
  // Makes everything appended so far durable.
  virtual Status Sync() = 0;
  virtual Status Close() = 0;
};

// Bytes of a whole file held in memory: memory-mapped where the storage allows it.
class FileBytes {
 public:
  virtual ~FileBytes() = default;
  virtual std::span<const std::byte> bytes() const = 0;
};

// One entry of a reader's plan, in the order of first reads. A reader reads several files at
// once (a shuffle window), so a file stays in use after later files were first read: until the
// reader first reads entry `in_use_until` (>= the entry's own index), and no longer after.
struct PlannedFile {
  std::string path;
  uint32_t in_use_until = 0;
};

class Storage {
 public:
  virtual ~Storage() = default;

  virtual Result<std::unique_ptr<RandomAccessFile>> OpenRead(std::string_view path) = 0;
  // Creates or truncates `path`; parent directories must exist (see CreateDirs).
  virtual Result<std::unique_ptr<WritableFile>> Create(std::string_view path) = 0;
  // The whole file, memory-mapped if possible.
  virtual Result<std::shared_ptr<const FileBytes>> Map(std::string_view path) = 0;
  // Atomically replaces `to` with `from`.
  virtual Status Rename(std::string_view from, std::string_view to) = 0;
  // Creates `path` holding `bytes`, durably and atomically, unless `path` exists: then
  // AlreadyExists and nothing changes. Readers see the whole file or none. This is the one
  // compare-and-swap every backend offers (link(2) on POSIX, a conditional PUT with
  // If-None-Match on S3), and what concurrent writers publish versions with. Meant for small
  // files (the bytes are passed whole).
  virtual Status CreateExclusive(std::string_view path, std::span<const std::byte> bytes) = 0;
  virtual Status Remove(std::string_view path) = 0;
  virtual Status CreateDirs(std::string_view path) = 0;
  // Makes creations, renames and removals inside directory `path` durable.
  virtual Status SyncDir(std::string_view path) = 0;
  // Entry names (not paths) in directory `path`, sorted; NotFound if it does not exist;
  // Unsupported from storage that cannot list (a web server), which readers do without.
  virtual Result<std::vector<std::string>> List(std::string_view path) = 0;
  virtual Result<bool> Exists(std::string_view path) = 0;
  // A human-readable location for error messages, e.g. "/data/imagenet/chunks/00ab.chunk".
  virtual std::string Describe(std::string_view path) const = 0;
  // The files a reader is about to read, in the order it will first read them (the loader's
  // plan for an epoch; see PlannedFile). A cache behind the storage (the node daemon)
  // prefetches and evicts by it; other storage ignores it.
  virtual void AdviseReadOrder(std::span<const PlannedFile> /*plan*/) {}
  // Memory one WritableFile may hold before its bytes reach the store (0: it writes through).
  // `pack` bounds how many chunk files it fills at once by it.
  virtual uint64_t WriteBufferBytes() const { return 0; }
};

// How OpenStorage reaches a dataset. A field left unset comes from the environment, as the CLI
// and Python read it, so a program passes only what it wants to decide itself.
struct StorageOptions {
  // stoker://: the server's shared secret, as key bytes (docs/protocol.md, "The secret's bytes").
  // Unset: the file $STOKER_SECRET_FILE names, else $STOKER_SECRET.
  std::optional<std::string> secret;
  // stoker://: the deadline of one request (docs/protocol.md, "Deadlines"). Unset:
  // $STOKER_TIMEOUT ("30s", "2m"), else 30 seconds.
  std::optional<std::chrono::milliseconds> request_timeout;
  // The socket of this machine's node daemon (docs/cache.md): chunk files are read through it
  // while it answers. Unset: $STOKER_NODE; empty: never (what the daemon itself reads).
  std::optional<std::string> node_socket;
  // s3://: keys; unset: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, else the
  // profile in ~/.aws/credentials (src/s3/s3_config.h).
  struct S3Keys {
    std::string access_key_id;
    std::string secret_access_key;
    std::string session_token;  // empty unless the keys are temporary
  };
  std::optional<S3Keys> s3_keys;
  // s3://: an S3-compatible store's URL ("http://127.0.0.1:7480") and region. Unset:
  // AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL and AWS_REGION, else the profile's, else AWS itself.
  std::optional<std::string> s3_endpoint;
  std::optional<std::string> s3_region;
};

// Opens the storage for a dataset location: a local path, a file:// URI (file:///abs or
// file://localhost/abs), a stoker://, s3:// or (read-only) http(s):// URI. The directory need
// not exist yet (pack creates it). InvalidArgument for a malformed location or setting, Unsupported
// for an unknown scheme.
Result<std::shared_ptr<Storage>> OpenStorage(std::string_view uri,
                                             const StorageOptions& options = {});

}  // namespace stoker
