#include "common/escape.h"

#include <cstdint>

#include <fmt/format.h>

namespace stoker {
namespace {

// Length of the well-formed UTF-8 character at the start of `s` (RFC 3629's table), or 0.
size_t Utf8CharLength(std::string_view s) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  const auto continuation = [&](size_t i, uint8_t lo = 0x80, uint8_t hi = 0xBF) {
    return i < s.size() && byte(i) >= lo && byte(i) <= hi;
  };
  const uint8_t b0 = byte(0);
  if (b0 < 0x80) return 1;
  if (b0 >= 0xC2 && b0 <= 0xDF) return continuation(1) ? 2 : 0;
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    const uint8_t lo = b0 == 0xE0 ? 0xA0 : 0x80;  // no overlong forms
    const uint8_t hi = b0 == 0xED ? 0x9F : 0xBF;  // no surrogates
    return continuation(1, lo, hi) && continuation(2) ? 3 : 0;
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    const uint8_t lo = b0 == 0xF0 ? 0x90 : 0x80;
    const uint8_t hi = b0 == 0xF4 ? 0x8F : 0xBF;  // nothing above U+10FFFF
    return continuation(1, lo, hi) && continuation(2) && continuation(3) ? 4 : 0;
  }
  return 0;
}

bool IsControl(std::string_view ch) {
  const auto b0 = static_cast<uint8_t>(ch[0]);
  if (ch.size() == 1) return b0 < 0x20 || b0 == 0x7F;
  // C1 controls U+0080..U+009F are C2 80..C2 9F; some terminals obey them (CSI is U+009B).
  return ch.size() == 2 && b0 == 0xC2 && static_cast<uint8_t>(ch[1]) <= 0x9F;
}

void AppendHexBytes(std::string& out, std::string_view bytes) {
  for (char c : bytes) out += fmt::format("\\x{:02x}", static_cast<uint8_t>(c));
}

}  // namespace

bool IsUtf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const size_t n = Utf8CharLength(text.substr(i));
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string TerminalSafe(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t n = Utf8CharLength(text.substr(i));
    const std::string_view ch = text.substr(i, n == 0 ? 1 : n);
    if (n == 0 || IsControl(ch)) {
      AppendHexBytes(out, ch);
    } else if (ch == "\\") {
      out += "\\\\";
    } else {
      out += ch;
    }
    i += ch.size();
  }
  return out;
}

std::string JsonQuoted(std::string_view text) {
  std::string out = "\"";
  out.reserve(text.size() + 2);
  for (size_t i = 0; i < text.size();) {
    const size_t n = Utf8CharLength(text.substr(i));
    if (n == 0) {
      out += fmt::format("\\udc{:02x}", static_cast<uint8_t>(text[i]));
      i += 1;
      continue;
    }
    const char c = text[i];
    if (c == '"') {
      out += "\\\"";
    } else if (c == '\\') {
      out += "\\\\";
    } else if (n == 1 && static_cast<uint8_t>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<uint8_t>(c));
    } else {
      out.append(text.substr(i, n));
    }
    i += n;
  }
  out += '"';
  return out;
}

}  // namespace stoker
