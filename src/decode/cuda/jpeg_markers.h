// A JPEG's structure from its marker segments, read on the host without decoding anything.
//
// Why the GPU path needs it: nvJPEG does not count scans (DecodeLimits::max_scans, a defence
// against progressive files with thousands of tiny scans) nor say whether a stream was cut
// short — a hardware decoder may fill the missing part in silently, where the CPU path reports
// a truncated file. Walking the markers answers both for the cost of a scan over the bytes, and
// keeps malformed segment structure away from nvJPEG's own parser.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>

#include "stoker/status.h"

namespace stoker::decode::cuda {

struct JpegStructure {
  uint8_t sof = 0;         // frame marker: 0xC0 baseline, 0xC1 extended, 0xC2 progressive, ...
  uint32_t precision = 0;  // bits per sample
  uint32_t width = 0, height = 0, components = 0;
  uint32_t scans = 0;  // SOS markers
};

// Walks the segments up to EOI. InvalidArgument (damaged input) for a malformed segment, a second
// frame header, a scan before the frame header, no scan, or bytes that end before EOI (a truncated
// file).
Result<JpegStructure> ScanJpeg(std::span<const std::byte> bytes);

// Whether the bytes start like a JPEG (as decode::Decoder sniffs them: FF D8 FF).
bool LooksLikeJpeg(std::span<const std::byte> bytes);

}  // namespace stoker::decode::cuda
