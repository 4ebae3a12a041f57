#include "common/log.h"

#include <cstdio>
#include <ctime>
#include <mutex>
#include <string>

namespace stoker::log {
namespace {

struct Config {
  std::mutex mu;
  Sink sink;
  bool timestamps = false;
};

Config& TheConfig() {
  static Config config;
  return config;
}

}  // namespace

void SetSink(Sink sink) {
  Config& c = TheConfig();
  std::lock_guard lock(c.mu);
  c.sink = std::move(sink);
}

void SetTimestamps(bool on) {
  Config& c = TheConfig();
  std::lock_guard lock(c.mu);
  c.timestamps = on;
}

void Write(Level level, std::string_view component, std::string_view line) {
  std::string text = "stoker";
  if (!component.empty()) text.append(" ").append(component);
  text.append(": ");
  if (level == Level::kWarning) text.append("warning: ");
  text.append(line);
  Config& c = TheConfig();
  Sink sink;
  bool timestamps;
  {
    std::lock_guard lock(c.mu);
    sink = c.sink;
    timestamps = c.timestamps;
  }
  if (sink) {
    sink(level, text);
    return;
  }
  if (timestamps) {
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char stamp[16];
    std::strftime(stamp, sizeof stamp, "%H:%M:%S ", &local);
    text.insert(0, stamp);
  }
  text.push_back('\n');
  // One write per line: stdio locks the stream, so lines from threads do not mix.
  std::fwrite(text.data(), 1, text.size(), stderr);
}

}  // namespace stoker::log
