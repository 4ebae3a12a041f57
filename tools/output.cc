#include "tools/output.h"

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "common/escape.h"
#include "common/parse_number.h"
#include "tools/commands.h"

namespace stoker::cli {
namespace {

// Every string nlohmann::json cannot write as given — not UTF-8 — or that holds a NUL is swapped
// for a placeholder "\0<n>\0" and kept in `held`. File names never hold NUL, so after the swap
// no other string does, and each "\u0000" in the dumped text starts a placeholder.
nlohmann::json HoldUnwritable(const nlohmann::json& value, std::vector<std::string>& held) {
  const auto hold = [&](const std::string& s) -> std::string {
    if (IsUtf8(s) && s.find('\0') == std::string::npos) return s;
    held.push_back(s);
    return std::string(1, '\0') + std::to_string(held.size() - 1) + '\0';
  };
  if (value.is_string()) return hold(value.get_ref<const std::string&>());
  if (value.is_array()) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& item : value) out.push_back(HoldUnwritable(item, held));
    return out;
  }
  if (value.is_object()) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [key, item] : value.items()) out[hold(key)] = HoldUnwritable(item, held);
    return out;
  }
  return value;
}

// "stoker <command>: <text>\n", each line of `text` terminal-safe (a message of several lines
// keeps its newlines; other control characters show as \xNN).
void PrintLines(std::string_view command, std::string_view text) {
  std::string out = "stoker " + std::string(command) + ": ";
  for (size_t at = 0;;) {
    const size_t end = text.find('\n', at);
    out += TerminalSafe(text.substr(at, end == std::string_view::npos ? end : end - at));
    out += '\n';
    if (end == std::string_view::npos) break;
    at = end + 1;
  }
  std::fwrite(out.data(), 1, out.size(), stderr);
}

bool g_json_output = false;

void PrintJsonError(std::string_view code, std::string_view message) {
  PrintJson({{"error", {{"code", code}, {"message", message}}}});
}

}  // namespace

void SetJsonOutput(bool json) { g_json_output = json; }
bool JsonOutput() { return g_json_output; }

void PrintError(std::string_view command, const Status& status) {
  PrintLines(command, status.ToString());
  if (g_json_output) PrintJsonError(StatusCodeName(status.code()), status.message());
}

void PrintUsageError(std::string_view message) {
  if (g_json_output) PrintJsonError("Usage", message);
}

void PrintNote(std::string_view command, std::string_view note) { PrintLines(command, note); }

int Fail(std::string_view command, const Status& status) {
  PrintError(command, status);
  return status.IsCorruption() ? kExitCorrupt : kExitError;
}

int FailUsage(std::string_view command, const Status& status) {
  PrintError(command, status);
  return kExitUsage;
}

void PrintJson(const nlohmann::json& value) {
  std::vector<std::string> held;
  const std::string text = HoldUnwritable(value, held).dump(2);
  constexpr std::string_view kOpen = "\"\\u0000", kClose = "\\u0000\"";
  std::string out;
  size_t at = 0;
  for (size_t open; (open = text.find(kOpen, at)) != std::string::npos;) {
    const size_t digits = open + kOpen.size();
    const size_t close = text.find(kClose, digits);
    out.append(text, at, open - at);
    // Every string holding a NUL was held, so each "\u0000 string is one of these placeholders.
    const std::optional<size_t> index =
        ParseUnsigned<size_t>(std::string_view(text).substr(digits, close - digits));
    out += JsonQuoted(index && *index < held.size() ? held[*index] : std::string());
    at = close + kClose.size();
  }
  out.append(text, at);
  std::cout << out << "\n";
}

}  // namespace stoker::cli
