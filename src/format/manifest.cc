#include "format/manifest.h"

#include <charconv>

#include <fmt/format.h>

#include "common/crc32c.h"

namespace stoker::format {
namespace {

// Takes "<key> <value>\n" off the front of `text`.
Result<std::string_view> TakeField(std::string_view& text, std::string_view key) {
  const auto nl = text.find('\n');
  if (nl == std::string_view::npos) {
    return Err(Status::Corruption(fmt::format("MANIFEST: missing line '{}'", key)));
  }
  std::string_view line = text.substr(0, nl);
  text.remove_prefix(nl + 1);
  if (!line.starts_with(key) || line.size() <= key.size() + 1 || line[key.size()] != ' ') {
    // Escaped: the line may be damaged bytes, which a message must not pass on raw.
    return Err(Status::Corruption(fmt::format("MANIFEST: expected '{} ...', got {:?}", key,
                                              line.substr(0, 80))));
  }
  return line.substr(key.size() + 1);
}

template <typename T>
Result<T> ParseNumber(std::string_view s, int base, std::string_view what) {
  T value{};
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value, base);
  const bool leading_zero = base == 10 && s.size() > 1 && s[0] == '0';
  // Lowercase only: from_chars also takes 'A'-'F', and a flipped 0x20 bit in the final CRC line
  // (covered by no CRC) would otherwise still parse to the same value.
  const bool uppercase = base == 16 && s.find_first_of("ABCDEF") != std::string_view::npos;
  if (ec != std::errc() || ptr != s.data() + s.size() || leading_zero || uppercase || s.empty()) {
    return Err(Status::Corruption(fmt::format("MANIFEST: bad {} '{}'", what, s.substr(0, 40))));
  }
  return value;
}

bool SafeSnapshotPath(std::string_view p) {
  constexpr std::string_view kPrefix = "snapshots/";
  if (!p.starts_with(kPrefix) || p.size() == kPrefix.size() || p.size() > 200) return false;
  for (char c : p.substr(kPrefix.size())) {
    const bool ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || c == '-' || c == '.';
    if (!ok) return false;
  }
  return p.find("..") == std::string_view::npos;
}

}  // namespace

std::string EncodeManifest(const Manifest& m) {
  std::string body = fmt::format(
      "stoker-manifest 1\nversion {}\nsnapshot {}\nsnapshot-bytes {}\nsnapshot-crc32c {:08x}\n",
      m.version, m.snapshot_path, m.snapshot_bytes, m.snapshot_crc32c);
  return body + fmt::format("manifest-crc32c {:08x}\n", crc32c::Value(body));
}

Result<Manifest> ParseManifest(std::string_view text) {
  if (text.size() > kMaxManifestSize) return Err(Status::Corruption("MANIFEST: too large"));
  const std::string_view all = text;
  Manifest m;
  STOKER_ASSIGN_OR_RETURN(auto format, TakeField(text, "stoker-manifest"));
  if (format != "1") {
    // A newer format keeps the final CRC line; without a valid one this is a damaged line.
    const auto last = all.rfind('\n', all.size() >= 2 ? all.size() - 2 : 0);
    const std::string_view crc_line = last == std::string_view::npos ? "" : all.substr(last + 1);
    const std::string expected =
        fmt::format("manifest-crc32c {:08x}\n", crc32c::Value(all.substr(0, last + 1)));
    if (crc_line != expected) return Err(Status::Corruption("MANIFEST: CRC32C mismatch"));
    return Err(Status::Unsupported(fmt::format("MANIFEST: format '{}' (this build reads 1)",
                                               format.substr(0, 20))));
  }
  STOKER_ASSIGN_OR_RETURN(auto version, TakeField(text, "version"));
  STOKER_ASSIGN_OR_RETURN(m.version, ParseNumber<uint64_t>(version, 10, "version"));
  STOKER_ASSIGN_OR_RETURN(auto path, TakeField(text, "snapshot"));
  if (!SafeSnapshotPath(path)) return Err(Status::Corruption("MANIFEST: bad snapshot path"));
  m.snapshot_path = std::string(path);
  STOKER_ASSIGN_OR_RETURN(auto bytes, TakeField(text, "snapshot-bytes"));
  STOKER_ASSIGN_OR_RETURN(m.snapshot_bytes, ParseNumber<uint64_t>(bytes, 10, "snapshot-bytes"));
  STOKER_ASSIGN_OR_RETURN(auto crc, TakeField(text, "snapshot-crc32c"));
  if (crc.size() != 8) return Err(Status::Corruption("MANIFEST: bad snapshot-crc32c"));
  STOKER_ASSIGN_OR_RETURN(m.snapshot_crc32c, ParseNumber<uint32_t>(crc, 16, "snapshot-crc32c"));
  const std::string_view body = all.substr(0, all.size() - text.size());
  STOKER_ASSIGN_OR_RETURN(auto mcrc_text, TakeField(text, "manifest-crc32c"));
  if (mcrc_text.size() != 8) return Err(Status::Corruption("MANIFEST: bad manifest-crc32c"));
  STOKER_ASSIGN_OR_RETURN(auto mcrc, ParseNumber<uint32_t>(mcrc_text, 16, "manifest-crc32c"));
  if (!text.empty()) return Err(Status::Corruption("MANIFEST: trailing bytes"));
  if (mcrc != crc32c::Value(body)) return Err(Status::Corruption("MANIFEST: CRC32C mismatch"));
  return m;
}

}  // namespace stoker::format
