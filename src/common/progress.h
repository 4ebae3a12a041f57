// A one-line progress bar for long CLI work (pack, verify): count, rate and ETA, redrawn at most
// ten times a second on stderr, and only when stderr is a terminal.
// Not thread-safe: call from one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "stoker/status.h"

namespace stoker {

class ProgressBar {
 public:
  // `enabled` false (or stderr not a TTY) makes every call a no-op.
  ProgressBar(std::string label, bool enabled);
  ~ProgressBar();

  // `done`/`total` drive the percentage and ETA (total 0: unknown); `bytes` drives the rate.
  void Update(uint64_t done, uint64_t total, uint64_t bytes, std::string_view unit = "files");
  // Clears the line.
  void Finish();

 private:
  std::string label_;
  bool enabled_;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

// "1.5 GiB", "320 KiB", "17 B"
std::string HumanBytes(uint64_t bytes);
// "1 chunk", "2 chunks", "1 class", "0 classes": `noun` is the singular; nouns ending in s, x,
// ch or sh take "es".
std::string Counted(uint64_t n, std::string_view noun);
// "1:02:03" / "2:03"
std::string HumanDuration(double seconds);
// Parses "65536", "64K", "64M", "1G", "64MiB", "2T" (binary multiples; "MB" is MiB too): the
// one syntax of sizes in the CLI and the Python API. InvalidArgument naming the text.
Result<uint64_t> ParseByteSize(std::string_view text);
// The shortest text ParseByteSize reads back as `bytes`: "64MiB", "2GiB", "4097".
std::string ByteSizeText(uint64_t bytes);
// Parses "90s", "15m", "36h", "7d" (and a bare "0") into seconds; InvalidArgument naming the
// text, also for a number without its unit.
Result<std::chrono::seconds> ParseDuration(std::string_view text);

}  // namespace stoker
