// Runs many range reads at once (`depth` of them): io_uring where the kernel allows it
// (detected when the engine is created), a pool of threads calling ReadAt otherwise, and always
// for storage that has no file descriptor (S3, stoker://, a node daemon, FaultStorage).
// Thread-safe: Submit from any thread; each request's callback runs exactly once, on an engine
// thread. The destructor waits for all requests.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>

#include "stoker/storage.h"

namespace stoker::loader {

struct ReadRequest {
  std::shared_ptr<RandomAccessFile> file;
  uint64_t offset = 0;
  std::span<std::byte> dst;          // filled completely, or the callback gets an error
  std::function<void(Status)> done;  // must not block for long
};

enum class IoEngineKind : uint8_t { kAuto, kUring, kThreads };

class IoEngine {
 public:
  virtual ~IoEngine() = default;
  virtual void Submit(ReadRequest request) = 0;
  // "io_uring" or "threads".
  virtual std::string_view name() const = 0;
};

// kAuto: io_uring if io_uring_queue_init works here, else threads. kUring fails with
// Unsupported where the kernel refuses. `depth`: concurrent reads.
Result<std::unique_ptr<IoEngine>> CreateIoEngine(IoEngineKind kind, uint32_t depth);

}  // namespace stoker::loader
