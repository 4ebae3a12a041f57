// The one sink for what stoker tells a person while it works — a warning once per condition
// (a node daemon not there, tracing stopped), a failed FUSE request, a daemon's events — as
// opposed to the errors it returns (Status) and progress lines on a terminal
// (common/progress.h). Every line is one write to stderr, so lines from threads never mix:
//   "stoker <component>: <line>", "stoker <component>: warning: <line>" (warnings),
// with "HH:MM:SS " in front in a daemon (SetTimestamps). A program may take the lines itself
// (SetSink): tests do.
// Thread-safety: Write from any thread; SetSink and SetTimestamps before threads start.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

namespace stoker::log {

enum class Level : uint8_t { kInfo, kWarning, kError };

// The line as it is written: "stoker node: peer 10.0.0.2:7071 is back".
using Sink = std::function<void(Level level, std::string_view line)>;

void SetSink(Sink sink);  // empty: stderr
void SetTimestamps(bool on);

void Write(Level level, std::string_view component, std::string_view line);
inline void Info(std::string_view component, std::string_view line) {
  Write(Level::kInfo, component, line);
}
inline void Warning(std::string_view component, std::string_view line) {
  Write(Level::kWarning, component, line);
}
inline void Error(std::string_view component, std::string_view line) {
  Write(Level::kError, component, line);
}

}  // namespace stoker::log
