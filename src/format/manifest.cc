#include "format/manifest.h"

#include <fmt/format.h>

#include "common/crc32c.h"
#include "format/text_fields.h"

namespace stoker::format {
namespace {

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
  STOKER_ASSIGN_OR_RETURN(auto format, TakeField(text, "stoker-manifest", "MANIFEST"));
  if (format != "1") {
    // A newer format keeps the final CRC line; without a valid one this is a damaged line.
    const auto last = all.rfind('\n', all.size() >= 2 ? all.size() - 2 : 0);
    const std::string_view crc_line = last == std::string_view::npos ? "" : all.substr(last + 1);
    const std::string expected =
        fmt::format("manifest-crc32c {:08x}\n", crc32c::Value(all.substr(0, last + 1)));
    if (crc_line != expected) return Err(Status::Corruption("MANIFEST: CRC32C mismatch"));
    return Err(Status::Unsupported(
        fmt::format("MANIFEST: format '{}' (this build reads 1)", format.substr(0, 20))));
  }
  STOKER_ASSIGN_OR_RETURN(auto version, TakeField(text, "version", "MANIFEST"));
  STOKER_ASSIGN_OR_RETURN(m.version, ParseNumber(version, 10, "version", "MANIFEST"));
  STOKER_ASSIGN_OR_RETURN(auto path, TakeField(text, "snapshot", "MANIFEST"));
  if (!SafeSnapshotPath(path)) return Err(Status::Corruption("MANIFEST: bad snapshot path"));
  m.snapshot_path = std::string(path);
  STOKER_ASSIGN_OR_RETURN(auto bytes, TakeField(text, "snapshot-bytes", "MANIFEST"));
  STOKER_ASSIGN_OR_RETURN(m.snapshot_bytes, ParseNumber(bytes, 10, "snapshot-bytes", "MANIFEST"));
  STOKER_ASSIGN_OR_RETURN(auto crc, TakeField(text, "snapshot-crc32c", "MANIFEST"));
  if (crc.size() != 8) return Err(Status::Corruption("MANIFEST: bad snapshot-crc32c"));
  STOKER_ASSIGN_OR_RETURN(m.snapshot_crc32c, ParseNumber(crc, 16, "snapshot-crc32c", "MANIFEST"));
  const std::string_view body = all.substr(0, all.size() - text.size());
  STOKER_ASSIGN_OR_RETURN(auto mcrc_text, TakeField(text, "manifest-crc32c", "MANIFEST"));
  if (mcrc_text.size() != 8) return Err(Status::Corruption("MANIFEST: bad manifest-crc32c"));
  STOKER_ASSIGN_OR_RETURN(auto mcrc, ParseNumber(mcrc_text, 16, "manifest-crc32c", "MANIFEST"));
  if (!text.empty()) return Err(Status::Corruption("MANIFEST: trailing bytes"));
  if (mcrc != crc32c::Value(body)) return Err(Status::Corruption("MANIFEST: CRC32C mismatch"));
  return m;
}

}  // namespace stoker::format
