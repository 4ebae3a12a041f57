// Trace events that Perfetto and chrome://tracing open (issue 17): what stoker's threads spend
// their time on — range reads, CRC checks, decodes, the consumer's waits — per thread, in the
// Chrome trace event format (JSON object form), with timestamps relative to a base whose wall
// clock time is the file's "baseTimeNanoseconds", as torch.profiler (>= 2.4) writes it, so the
// two line up when merged.
//
// Off by default: every call is then one relaxed atomic load. Start opens the file (an error if
// it cannot be written); events are buffered and appended in blocks; Stop closes the JSON. A
// write that fails later turns tracing off with one message on stderr: training never stops
// because its trace could not be written. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "stoker/status.h"

namespace stoker::trace {

namespace internal {
extern std::atomic<bool> enabled;
}

inline bool Enabled() { return internal::enabled.load(std::memory_order_relaxed); }

// Starts writing to `path` (replacing a trace under way); `process` names this process's track
// ("stoker rank 0").
Status Start(const std::string& path, const std::string& process);
// Finishes the file; OK when no trace was running.
Status Stop();

// Nanoseconds of the monotonic clock (CLOCK_MONOTONIC, which Python's time.monotonic_ns reads).
uint64_t NowNs();

// A complete event [start_ns, end_ns) on the calling thread. `args`: a JSON object's members
// without braces ("\"bytes\": 4096"), or empty.
void Complete(std::string_view name, std::string_view category, uint64_t start_ns, uint64_t end_ns,
              std::string_view args = {});
// An event that may overlap others on its thread (a read in flight): begin and end of `id`.
void AsyncBegin(std::string_view name, std::string_view category, uint64_t id, uint64_t ts_ns);
void AsyncEnd(std::string_view name, std::string_view category, uint64_t id, uint64_t ts_ns);
// Names the calling thread's track ("decode", "read").
void NameThread(std::string_view name);
// A process-unique id for async events.
uint64_t NextId();

// Records [construction, destruction) as a complete event when tracing is on.
class Span {
 public:
  Span(std::string_view name, std::string_view category)
      : name_(name), category_(category), start_(Enabled() ? NowNs() : 0) {}
  ~Span() {
    if (start_ != 0 && Enabled()) Complete(name_, category_, start_, NowNs(), args_);
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;
  void set_args(std::string args) { args_ = std::move(args); }

 private:
  std::string_view name_, category_;
  uint64_t start_;
  std::string args_;
};

}  // namespace stoker::trace
