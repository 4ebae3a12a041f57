// The library's log lines in a Python process: common/log.h's sink puts them in a queue, and a
// Python thread (stoker._log) takes them out and logs them with `logging`. The library's own
// threads never take the GIL: one that logged while holding a lock the main thread waits for,
// with the GIL held, would deadlock. Nor does the Python thread wait inside C++: a daemon
// thread woken during interpreter exit is ended by unwinding, which must not cross C++ frames.
#include "log.h"

#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>

#include "common/log.h"

namespace nb = nanobind;

namespace stoker::python {
namespace {

// Bounded, so a process whose Python thread cannot keep up (or never runs) does not grow: the
// oldest lines go first, and the next line says how many.
constexpr size_t kMaxQueued = 1000;

struct LogQueue {
  std::mutex mu;
  std::deque<std::pair<int, std::string>> lines;
  uint64_t dropped = 0;
};

// Never destroyed: the Python thread may still wait on it while the process exits.
LogQueue& TheQueue() {
  static auto* queue = new LogQueue;
  return *queue;
}

// logging's levels: INFO 20, WARNING 30, ERROR 40.
int PythonLevel(log::Level level) {
  switch (level) {
    case log::Level::kInfo:
      return 20;
    case log::Level::kWarning:
      return 30;
    case log::Level::kError:
      return 40;
  }
  return 30;
}

}  // namespace

void RegisterLog(nb::module_& m) {
  log::SetSink([](log::Level level, std::string_view line) {
    LogQueue& q = TheQueue();
    {
      std::lock_guard lock(q.mu);
      if (q.lines.size() >= kMaxQueued) {
        q.lines.pop_front();
        ++q.dropped;
      }
      q.lines.emplace_back(PythonLevel(level), std::string(line));
    }
  });
  m.def(
      "log_next",
      []() -> std::optional<std::pair<int, std::string>> {
        LogQueue& q = TheQueue();
        std::lock_guard lock(q.mu);
        if (q.lines.empty()) return std::nullopt;
        auto line = std::move(q.lines.front());
        q.lines.pop_front();
        if (q.dropped > 0) {
          line.second = "(" + std::to_string(q.dropped) + " earlier lines dropped) " + line.second;
          q.dropped = 0;
        }
        return line;
      },
      "The next queued log line of the library as (logging level, text); None if there is "
      "none.");
}

}  // namespace stoker::python
