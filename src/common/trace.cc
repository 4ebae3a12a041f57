#include "common/trace.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

#include <fmt/format.h>

#include "common/escape.h"
#include "common/log.h"

namespace stoker::trace {
namespace internal {
std::atomic<bool> enabled{false};
}
namespace {

// Events buffered before they are appended to the file.
constexpr size_t kFlushBytes = 1 << 20;

struct Writer {
  std::mutex mu;
  std::FILE* file = nullptr;
  std::string path;
  std::string buffer;
  uint64_t base_ns = 0;  // the monotonic time of ts 0
  bool first = true;
  int pid = 0;

  // Appends the buffer to the file. On failure tracing stops, saying so once. Holds mu.
  void Flush() {
    if (file == nullptr || buffer.empty()) return;
    if (std::fwrite(buffer.data(), 1, buffer.size(), file) != buffer.size()) {
      log::Warning("trace", "stopped tracing: cannot write " + path);
      internal::enabled.store(false);
      std::fclose(file);
      file = nullptr;
    }
    buffer.clear();
  }

  void Add(std::string_view event) {
    std::lock_guard lock(mu);
    if (file == nullptr) return;
    if (!first) buffer += ",\n";
    first = false;
    buffer += event;
    if (buffer.size() >= kFlushBytes) Flush();
  }
};

Writer& TheWriter() {
  static Writer* writer = new Writer();  // never destroyed: threads may trace during exit
  return *writer;
}

int ThreadId() {
  thread_local const int tid = static_cast<int>(::syscall(SYS_gettid));
  return tid;
}

// Microseconds since the base, with nanosecond decimals (the format's unit is microseconds).
std::string Micros(uint64_t ns, uint64_t base) {
  const uint64_t rel = ns > base ? ns - base : 0;
  return fmt::format("{}.{:03}", rel / 1000, rel % 1000);
}

}  // namespace

uint64_t NowNs() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t NextId() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

Status Start(const std::string& path, const std::string& process) {
  (void)Stop();
  Writer& w = TheWriter();
  std::lock_guard lock(w.mu);
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) {
    return Status::FromErrno(errno, fmt::format("cannot write the trace {}", path));
  }
  w.file = file;
  w.path = path;
  w.base_ns = NowNs();
  const auto wall = std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
  w.pid = static_cast<int>(::getpid());
  w.first = true;
  w.buffer = fmt::format(
      "{{\"displayTimeUnit\": \"ms\", \"baseTimeNanoseconds\": {},\n\"traceEvents\": [\n", wall);
  // The header does not count as an event (no comma before the first one).
  w.buffer += fmt::format(
      R"({{"ph": "M", "name": "process_name", "pid": {}, "tid": 0, "args": {{"name": {}}}}})",
      w.pid, JsonQuoted(process));
  w.first = false;
  internal::enabled.store(true);
  return Status::OK();
}

Status Stop() {
  Writer& w = TheWriter();
  internal::enabled.store(false);
  std::lock_guard lock(w.mu);
  if (w.file == nullptr) return Status::OK();
  w.buffer += "\n]}\n";
  w.Flush();
  Status status;
  if (w.file == nullptr) {
    status = Status::IOError(fmt::format("cannot write the trace {}", w.path));
  } else if (std::fclose(w.file) != 0) {
    status = Status::FromErrno(errno, fmt::format("cannot write the trace {}", w.path));
  }
  w.file = nullptr;
  return status;
}

void Complete(std::string_view name, std::string_view category, uint64_t start_ns, uint64_t end_ns,
              std::string_view args) {
  if (!Enabled()) return;
  Writer& w = TheWriter();
  const uint64_t dur = end_ns > start_ns ? end_ns - start_ns : 0;
  w.Add(fmt::format(
      R"({{"ph": "X", "name": {}, "cat": {}, "pid": {}, "tid": {}, "ts": {}, "dur": {}.{:03}, "args": {{{}}}}})",
      JsonQuoted(name), JsonQuoted(category), w.pid, ThreadId(), Micros(start_ns, w.base_ns),
      dur / 1000, dur % 1000, args));
}

namespace {
void Async(char phase, std::string_view name, std::string_view category, uint64_t id,
           uint64_t ts_ns) {
  if (!Enabled()) return;
  Writer& w = TheWriter();
  w.Add(fmt::format(
      R"({{"ph": "{}", "name": {}, "cat": {}, "id": "0x{:x}", "pid": {}, "tid": {}, "ts": {}}})",
      phase, JsonQuoted(name), JsonQuoted(category), id, w.pid, ThreadId(),
      Micros(ts_ns, w.base_ns)));
}
}  // namespace

void AsyncBegin(std::string_view name, std::string_view category, uint64_t id, uint64_t ts_ns) {
  Async('b', name, category, id, ts_ns);
}

void AsyncEnd(std::string_view name, std::string_view category, uint64_t id, uint64_t ts_ns) {
  Async('e', name, category, id, ts_ns);
}

void NameThread(std::string_view name) {
  if (!Enabled()) return;
  Writer& w = TheWriter();
  w.Add(fmt::format(
      R"({{"ph": "M", "name": "thread_name", "pid": {}, "tid": {}, "args": {{"name": {}}}}})",
      w.pid, ThreadId(), JsonQuoted(name)));
}

}  // namespace stoker::trace
