// See jpeg_markers.h. The rules are ITU T.81 Annex B: a marker is FF followed by a code other
// than 00 and FF (extra FFs before it are fill bytes); RSTn (D0-D7), SOI, EOI and TEM (01) stand
// alone, every other marker has a 2-byte big-endian length that counts itself. Inside
// entropy-coded data an FF is followed by 00 (a stuffed byte) or RSTn.
#include "decode/cuda/jpeg_markers.h"

#include <cstddef>

#include <fmt/format.h>

namespace stoker::decode::cuda {
namespace {

uint8_t At(std::span<const std::byte> b, size_t i) { return std::to_integer<uint8_t>(b[i]); }

uint32_t Be16(std::span<const std::byte> b, size_t i) {
  return uint32_t{At(b, i)} << 8 | At(b, i + 1);
}

bool IsStandalone(uint8_t m) { return (m >= 0xD0 && m <= 0xD7) || m == 0x01 || m == 0xD8; }

// SOF0..SOF15 without DHT (C4), JPG (C8) and DAC (CC), which share the range.
bool IsFrameHeader(uint8_t m) {
  return m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC;
}

// The first marker after the entropy-coded data starting at `pos`; `size` if there is none.
size_t SkipEntropyCoded(std::span<const std::byte> b, size_t pos) {
  for (; pos + 1 < b.size(); ++pos) {
    if (At(b, pos) != 0xFF) continue;
    const uint8_t next = At(b, pos + 1);
    if (next == 0x00 || (next >= 0xD0 && next <= 0xD7)) {
      ++pos;  // a stuffed byte or a restart marker: still inside the scan
    } else if (next != 0xFF) {
      return pos;  // (an FF FF pair: the first is fill, look again from the second)
    }
  }
  return b.size();
}

Status Truncated() { return Status::InvalidArgument("truncated JPEG (no end-of-image marker)"); }

}  // namespace

bool LooksLikeJpeg(std::span<const std::byte> bytes) {
  return bytes.size() >= 3 && At(bytes, 0) == 0xFF && At(bytes, 1) == 0xD8 && At(bytes, 2) == 0xFF;
}

Result<JpegStructure> ScanJpeg(std::span<const std::byte> b) {
  if (!LooksLikeJpeg(b)) return Err(Status::InvalidArgument("not a JPEG stream"));
  JpegStructure s;
  size_t pos = 2;
  while (true) {
    if (pos >= b.size()) return Err(Truncated());
    if (At(b, pos) != 0xFF) {
      return Err(Status::InvalidArgument(fmt::format("corrupt JPEG: no marker at byte {}", pos)));
    }
    while (pos < b.size() && At(b, pos) == 0xFF) ++pos;  // fill bytes
    if (pos >= b.size()) return Err(Truncated());
    const uint8_t marker = At(b, pos++);
    if (marker == 0xD9) break;  // EOI
    if (IsStandalone(marker)) continue;
    if (marker == 0x00) return Err(Status::InvalidArgument("corrupt JPEG: stray FF 00"));
    if (pos + 2 > b.size()) return Err(Truncated());
    const uint32_t length = Be16(b, pos);
    if (length < 2) return Err(Status::InvalidArgument("corrupt JPEG: segment length below 2"));
    if (pos + length > b.size()) return Err(Truncated());
    const size_t body = pos + 2;
    pos += length;
    if (IsFrameHeader(marker)) {
      if (s.sof != 0) return Err(Status::InvalidArgument("corrupt JPEG: two frame headers"));
      if (length < 8) return Err(Status::InvalidArgument("corrupt JPEG: short frame header"));
      s.sof = marker;
      s.precision = At(b, body);
      s.height = Be16(b, body + 1);
      s.width = Be16(b, body + 3);
      s.components = At(b, body + 5);
    } else if (marker == 0xDA) {  // SOS: the header, then entropy-coded data up to a marker
      if (s.sof == 0) return Err(Status::InvalidArgument("corrupt JPEG: scan before frame header"));
      ++s.scans;
      pos = SkipEntropyCoded(b, pos);
    }
  }
  if (s.sof == 0 || s.scans == 0)
    return Err(Status::InvalidArgument("corrupt JPEG: no image data"));
  if (s.width == 0 || s.height == 0)
    return Err(Status::InvalidArgument("corrupt JPEG: empty image"));
  return s;
}

}  // namespace stoker::decode::cuda
