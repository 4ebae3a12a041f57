#include "common/progress.h"

#include <unistd.h>

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>

#include <fmt/format.h>

namespace stoker {

ProgressBar::ProgressBar(std::string label, bool enabled)
    : label_(std::move(label)),
      enabled_(enabled && ::isatty(STDERR_FILENO)),
      start_(std::chrono::steady_clock::now()),
      last_draw_() {}

ProgressBar::~ProgressBar() { Finish(); }

void ProgressBar::Update(uint64_t done, uint64_t total, uint64_t bytes, std::string_view unit) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double rate = elapsed > 0 ? static_cast<double>(bytes) / elapsed : 0;
  std::string line = fmt::format("{} {} {}", label_, done, unit);
  if (total > 0) {
    const double fraction = std::min(1.0, static_cast<double>(done) / static_cast<double>(total));
    constexpr int kWidth = 24;
    const int filled = static_cast<int>(fraction * kWidth);
    line = fmt::format("{} [{}{}] {:3.0f}% {}/{} {}", label_, std::string(filled, '#'),
                       std::string(kWidth - filled, '.'), fraction * 100, done, total, unit);
    if (fraction > 0 && elapsed > 0.5) {
      line += fmt::format("  ETA {}", HumanDuration(elapsed * (1 - fraction) / fraction));
    }
  }
  line += fmt::format("  {}  {}/s", HumanBytes(bytes), HumanBytes(static_cast<uint64_t>(rate)));
  std::fprintf(stderr, "\r\033[2K%s", line.c_str());
  std::fflush(stderr);
}

void ProgressBar::Finish() {
  if (!enabled_) return;
  std::fprintf(stderr, "\r\033[2K");
  std::fflush(stderr);
  enabled_ = false;
}

std::string Counted(uint64_t n, std::string_view noun) {
  std::string out = fmt::format("{} {}", n, noun);
  if (n == 1) return out;
  const bool sibilant =
      noun.ends_with('s') || noun.ends_with('x') || noun.ends_with("ch") || noun.ends_with("sh");
  return out + (sibilant ? "es" : "s");
}

std::string HumanBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 5) {
    value /= 1024;
    ++unit;
  }
  return unit == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", value, kUnits[unit]);
}

std::string HumanDuration(double seconds) {
  const auto total = static_cast<uint64_t>(std::llround(seconds));
  const uint64_t h = total / 3600, m = total / 60 % 60, s = total % 60;
  return h > 0 ? fmt::format("{}:{:02}:{:02}", h, m, s) : fmt::format("{}:{:02}", m, s);
}

namespace {

bool ParseSizeText(std::string_view text, uint64_t* out) {
  uint64_t value = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr == text.data()) return false;
  std::string suffix(ptr, text.data() + text.size());
  for (auto& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (suffix.ends_with("IB"))
    suffix.resize(suffix.size() - 2);
  else if (suffix.size() == 2 && suffix.ends_with("B"))
    suffix.resize(1);
  int shift = 0;
  if (suffix.empty() || suffix == "B")
    shift = 0;
  else if (suffix == "K")
    shift = 10;
  else if (suffix == "M")
    shift = 20;
  else if (suffix == "G")
    shift = 30;
  else if (suffix == "T")
    shift = 40;
  else
    return false;
  if (shift > 0 && value > (UINT64_MAX >> shift)) return false;
  *out = value << shift;
  return true;
}

}  // namespace

Result<uint64_t> ParseByteSize(std::string_view text) {
  uint64_t bytes = 0;
  if (!ParseSizeText(text, &bytes)) {
    return Err(Status::InvalidArgument(fmt::format(
        "'{}' is not a size (bytes, or a whole number with K, M, G or T: 65536, 64MiB, 48G)",
        text)));
  }
  return bytes;
}

std::string ByteSizeText(uint64_t bytes) {
  static constexpr std::string_view kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  int unit = -1;
  while (unit < 3 && bytes != 0 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++unit;
  }
  return unit < 0 ? fmt::format("{}", bytes) : fmt::format("{}{}", bytes, kUnits[unit]);
}

Result<std::chrono::seconds> ParseDuration(std::string_view text) {
  uint64_t n = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  const std::string_view unit =
      ec == std::errc() ? std::string_view(ptr, text.data() + text.size()) : std::string_view("?");
  // A bare number is refused (is "5" seconds or hours?), but for 0, which is 0 in any unit.
  const uint64_t scale = (unit.empty() && n == 0) || unit == "s" ? 1
                         : unit == "m"                           ? 60
                         : unit == "h"                           ? 3600
                         : unit == "d"                           ? 86400
                                                                 : 0;
  if (scale == 0 || n > UINT32_MAX) {
    return Err(Status::InvalidArgument(
        fmt::format("'{}' is not a duration (a number with s, m, h or d)", text)));
  }
  return std::chrono::seconds(n * scale);
}

}  // namespace stoker
