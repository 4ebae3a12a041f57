#include "format/version_record.h"

#include <fmt/format.h>

#include "common/crc32c.h"
#include "format/columns.h"
#include "format/segment_layout.h"
#include "format/text_fields.h"

namespace stoker::format {
namespace {

constexpr std::string_view kRecord = "version record";
constexpr std::string_view kRecordSuffix = ".version";

// Splits "a b c" into exactly `n` space-separated words.
bool SplitWords(std::string_view s, size_t n, std::string_view* out) {
  for (size_t i = 0; i < n; ++i) {
    const size_t sp = i + 1 < n ? s.find(' ') : s.size();
    if (sp == std::string_view::npos || sp == 0) return false;
    out[i] = s.substr(0, sp);
    s.remove_prefix(i + 1 < n ? sp + 1 : sp);
  }
  return s.empty();
}

Result<uint64_t> Decimal(std::string_view& text, std::string_view key) {
  STOKER_ASSIGN_OR_RETURN(auto value, TakeField(text, key, kRecord));
  return ParseNumber(value, 10, key, kRecord);
}

Result<uint64_t> Hex(std::string_view s, size_t digits, std::string_view what) {
  if (s.size() != digits) {
    return Err(Status::Corruption(fmt::format("{}: bad {} '{}'", kRecord, what, s.substr(0, 40))));
  }
  return ParseNumber(s, 16, what, kRecord);
}

}  // namespace

std::string VersionRecordPath(uint64_t version) {
  return fmt::format("{}/{:016x}{}", kVersionsDir, version, kRecordSuffix);
}

std::string SegmentPath(uint64_t id) { return fmt::format("{}/{:016x}.seg", kSegmentsDir, id); }

uint64_t VersionOfRecordName(std::string_view name) {
  if (name.size() != 16 + kRecordSuffix.size() || !name.ends_with(kRecordSuffix)) return 0;
  auto v = Hex(name.substr(0, 16), 16, "name");
  return v ? *v : 0;
}

std::string EncodeVersionRecord(const VersionRecord& r) {
  std::string body = fmt::format(
      "stoker-version {}\nversion {}\nparent {}\ncreated {}\nwriter {:016x}\nflags {}\nfiles {}\n"
      "samples {}\nclasses {}\nchunks {}\nbytes {}\n",
      r.columns.empty() ? 2 : 3, r.version, r.parent, r.created_unix_seconds, r.writer, r.flags,
      r.files, r.samples, r.classes, r.chunks, r.bytes);
  if (!r.columns.empty()) body += fmt::format("columns {}\n", r.columns);
  for (const SegmentRef& s : r.segments) {
    body += fmt::format("segment {:016x} {} {:08x} {} {} {} {}\n", s.id, s.bytes, s.footer_crc32c,
                        s.files, s.samples, s.classes, s.chunks);
  }
  return body + fmt::format("record-crc32c {:08x}\n", crc32c::Value(body));
}

Result<VersionRecord> ParseVersionRecord(std::string_view text) {
  if (text.size() > kMaxVersionRecordSize)
    return Err(Status::Corruption("version record: too large"));
  // The CRC first: every later complaint is then about a well-formed record.
  const size_t last = text.size() >= 2 ? text.rfind('\n', text.size() - 2) : std::string_view::npos;
  if (last == std::string_view::npos || !text.ends_with('\n')) {
    return Err(Status::Corruption("version record: truncated"));
  }
  std::string_view crc_line = text.substr(last + 1);
  STOKER_ASSIGN_OR_RETURN(auto crc_text, TakeField(crc_line, "record-crc32c", kRecord));
  STOKER_ASSIGN_OR_RETURN(const uint64_t crc, Hex(crc_text, 8, "record-crc32c"));
  if (crc != crc32c::Value(text.substr(0, last + 1))) {
    return Err(Status::Corruption("version record: CRC32C mismatch"));
  }
  text = text.substr(0, last + 1);
  STOKER_ASSIGN_OR_RETURN(auto format, TakeField(text, "stoker-version", kRecord));
  if (format != "2" && format != "3") {
    return Err(
        Status::Unsupported(fmt::format("version record: format '{}' (this build reads 2 "
                                        "and 3)",
                                        format.substr(0, 20))));
  }
  VersionRecord r;
  STOKER_ASSIGN_OR_RETURN(r.version, Decimal(text, "version"));
  STOKER_ASSIGN_OR_RETURN(r.parent, Decimal(text, "parent"));
  STOKER_ASSIGN_OR_RETURN(r.created_unix_seconds, Decimal(text, "created"));
  STOKER_ASSIGN_OR_RETURN(auto writer, TakeField(text, "writer", kRecord));
  STOKER_ASSIGN_OR_RETURN(r.writer, Hex(writer, 16, "writer"));
  STOKER_ASSIGN_OR_RETURN(const uint64_t flags, Decimal(text, "flags"));
  STOKER_ASSIGN_OR_RETURN(r.files, Decimal(text, "files"));
  STOKER_ASSIGN_OR_RETURN(r.samples, Decimal(text, "samples"));
  STOKER_ASSIGN_OR_RETURN(r.classes, Decimal(text, "classes"));
  STOKER_ASSIGN_OR_RETURN(r.chunks, Decimal(text, "chunks"));
  STOKER_ASSIGN_OR_RETURN(r.bytes, Decimal(text, "bytes"));
  if (format == "3") {
    STOKER_ASSIGN_OR_RETURN(auto columns, TakeField(text, "columns", kRecord));
    auto schema = ParseSchema(columns);
    if (!schema) return Err(Status::Corruption("version record: " + schema.error().message()));
    r.columns = std::string(columns);
  }
  if (r.version == 0 || r.parent >= r.version || (flags & ~uint64_t{kSegmentDatasetFlags}) != 0) {
    return Err(Status::Corruption("version record: bad version, parent or flags"));
  }
  r.flags = static_cast<uint32_t>(flags);
  uint64_t files = 0, samples = 0, classes = 0, chunks = 0;
  while (!text.empty()) {
    STOKER_ASSIGN_OR_RETURN(auto line, TakeField(text, "segment", kRecord));
    std::string_view w[7];
    if (!SplitWords(line, 7, w)) return Err(Status::Corruption("version record: bad segment line"));
    SegmentRef s;
    STOKER_ASSIGN_OR_RETURN(s.id, Hex(w[0], 16, "segment id"));
    STOKER_ASSIGN_OR_RETURN(s.bytes, ParseNumber(w[1], 10, "segment size", kRecord));
    STOKER_ASSIGN_OR_RETURN(s.footer_crc32c, Hex(w[2], 8, "segment footer CRC"));
    STOKER_ASSIGN_OR_RETURN(s.files, ParseNumber(w[3], 10, "segment files", kRecord));
    STOKER_ASSIGN_OR_RETURN(s.samples, ParseNumber(w[4], 10, "segment samples", kRecord));
    STOKER_ASSIGN_OR_RETURN(s.classes, ParseNumber(w[5], 10, "segment classes", kRecord));
    STOKER_ASSIGN_OR_RETURN(s.chunks, ParseNumber(w[6], 10, "segment chunks", kRecord));
    if (s.samples > s.files || files + s.files < files) {
      return Err(Status::Corruption("version record: bad segment counts"));
    }
    files += s.files;
    samples += s.samples;
    classes += s.classes;
    chunks += s.chunks;
    r.segments.push_back(s);
  }
  if (files != r.files || samples != r.samples || classes != r.classes || chunks != r.chunks) {
    return Err(Status::Corruption("version record: totals differ from the segments' sums"));
  }
  return r;
}

}  // namespace stoker::format
