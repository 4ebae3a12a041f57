// JPEG decoding through libjpeg-turbo's libjpeg API (what a decode does: decoder.h).
//
// Errors: libjpeg reports a fatal error through error_exit, which must not return (the default
// calls exit()). Ours longjmps back to the setjmp in RunProtected, so the code in between
// (DecodeBody, ReadInfoBody and what they call) keeps only trivially destructible locals: a
// longjmp skips destructors. Corrupt-data warnings (premature end of data, bad Huffman code,
// lost restart markers ...) take the same way out: libjpeg would otherwise fill the missing
// blocks with gray and carry on, and we never hand such pixels on. After any error the
// decompressor is reset with jpeg_abort_decompress and reused.
//
// Completeness: a decode reads no further than the last row it needs and never calls
// jpeg_finish_decompress, so trailing bytes after the scan data are not examined, except that
// the EOI marker must be present after the first scan (found by a backward search, cheap since
// it is normally the last two bytes). This keeps the answer to "is this file truncated?" the
// same for region decodes (which stop early) and full ones: a file cut anywhere, even just
// before its EOI, is InvalidArgument (damaged input; Corruption is for bytes that changed in
// storage, which CRCs catch before a decode).
//
// Accuracy: libjpeg's defaults are kept (JDCT_ISLOW, fancy upsampling), as PIL keeps them, so
// full and DCT-scaled decodes are bit-identical to PIL's Image.open().convert("RGB") and
// Image.draft("RGB", size) (tests/python/test_decode_pixels.py). Region decodes equal the same
// pixels of a full decode at the same scale: jpeg_crop_scanline treats the crop's left and right
// edges as image edges for fancy chroma upsampling (libjpeg.txt, "Partial image
// decompression"), so the crop is one pixel wider on each side than the region needs, and at
// least two iMCUs wide (see DecodeBody). jpeg_skip_scanlines keeps rows exact by itself.
//
// Which DCT scales (M/8): whole-image decode time by M, best of 7 passes, AMD EPYC (2 cores,
// shared), libjpeg-turbo 2.1.5, ms per image:
//   M                               1     2     3     4     5     6     7     8
//   500 ImageNet-like, ~470x390   0.76  0.85  0.99  0.87  1.22  1.46  1.74  0.99
//   18 photos, 1600x1000          2.32  2.73  3.75  3.09  5.81  7.05  8.83  3.88
// (4:2:0 baseline, quality ~90; the first set is /var/tmp/stoker-bench/imagenet-20000-c100-s1.)
// 3/8, 5/8, 6/8 and 7/8 have only plain-C IDCTs (jidctint.c): each is slower than the next
// scale up with a SIMD one, and 5/8-7/8 slower than not scaling at all. So only 1, 2, 4 and 8
// are used (kJpegScales in codecs.h).
//
// Thread-safety: a JpegCodec is used by one thread at a time (libjpeg's state lives in it).
#include <algorithm>
#include <csetjmp>
#include <cstdarg>
#include <cstdio>  // jpeglib.h needs FILE and size_t declared first
#include <cstring>
#include <string>
#include <vector>

#include <jerror.h>
#include <jpeglib.h>

#include "decode/codecs.h"

namespace stoker::decode::internal {
namespace {

// libjpeg's error manager plus where to jump and what went wrong. Lives in the JpegSession.
struct ErrorManager {
  jpeg_error_mgr pub;  // first member: libjpeg hands &pub back to the callbacks
  std::jmp_buf jump;
  StatusCode code = StatusCode::kOk;
  char message[JMSG_LENGTH_MAX + 96];
};

// libjpeg's progress manager plus the scan limit. libjpeg calls its monitor (OnProgress) once
// per chunk of input it consumes (an iMCU row, a marker), which stops a progressive file with
// thousands of tiny scans before it burns seconds of CPU (the "Two Issues with the JPEG
// Standard" exploit; TurboJPEG's scan limit works the same way).
struct ProgressMonitor {
  jpeg_progress_mgr pub;  // first member, as above
  uint32_t max_scans = 0;
};

ErrorManager& ErrorsOf(j_common_ptr cinfo) { return *reinterpret_cast<ErrorManager*>(cinfo->err); }

[[noreturn]] __attribute__((format(printf, 3, 4))) void Fail(j_common_ptr cinfo, StatusCode code,
                                                             const char* format, ...) {
  ErrorManager& err = ErrorsOf(cinfo);
  va_list args;
  va_start(args, format);
  std::vsnprintf(err.message, sizeof(err.message), format, args);
  va_end(args);
  err.code = code;
  std::longjmp(err.jump, 1);
}

StatusCode CodeFor(int msg_code) {
  switch (msg_code) {
    case JERR_OUT_OF_MEMORY:
    case JERR_IMAGE_TOO_BIG:
    case JERR_WIDTH_OVERFLOW:
    case JERR_NO_BACKING_STORE:
      return StatusCode::kResourceExhausted;
    case JERR_BAD_PRECISION:  // 12- and 16-bit samples: this libjpeg is built for 8
    case JERR_SOF_UNSUPPORTED:
    case JERR_CONVERSION_NOTIMPL:
    case JERR_NOT_COMPILED:
    case JERR_NOTIMPL:
    case JERR_ARITH_NOTIMPL:
      return StatusCode::kUnsupported;
    case JERR_BAD_STATE:  // we called libjpeg wrongly
    case JERR_BAD_CROP_SPEC:
    case JERR_BAD_BUFFER_MODE:
    case JERR_BUFFER_SIZE:
    case JERR_TOO_LITTLE_DATA:
      return StatusCode::kInternal;
    default:
      return StatusCode::kInvalidArgument;  // damaged image data: bad input, not a bad read
  }
}

[[noreturn]] void OnError(j_common_ptr cinfo) {
  ErrorManager& err = ErrorsOf(cinfo);
  char text[JMSG_LENGTH_MAX];
  (*cinfo->err->format_message)(cinfo, text);
  Fail(cinfo, CodeFor(err.pub.msg_code), "%s", text);
}

// Warnings that say nothing about the pixels. Everything else libjpeg warns about means data
// was missing or damaged and the decoder made something up.
bool IsHarmlessWarning(const jpeg_error_mgr& err) {
  switch (err.msg_code) {
    case JWRN_JFIF_MAJOR:   // unknown JFIF version in APP0
    case JWRN_ADOBE_XFORM:  // unknown transform code: libjpeg guesses the colour space, as PIL
      return true;
    case JWRN_EXTRANEOUS_DATA:  // junk after the last scan, before EOI (seen in ImageNet)
      return err.msg_parm.i[1] == 0xD9;
    default:
      return false;
  }
}

void OnMessage(j_common_ptr cinfo, int msg_level) {
  if (msg_level >= 0) return;  // trace messages
  if (IsHarmlessWarning(*cinfo->err)) return;
  char text[JMSG_LENGTH_MAX];
  (*cinfo->err->format_message)(cinfo, text);
  Fail(cinfo, StatusCode::kInvalidArgument, "%s", text);
}

void OnProgress(j_common_ptr cinfo) {
  const auto* progress = reinterpret_cast<ProgressMonitor*>(cinfo->progress);
  const auto* dinfo = reinterpret_cast<j_decompress_ptr>(cinfo);
  if (dinfo->input_scan_number > 0 &&
      static_cast<uint32_t>(dinfo->input_scan_number) > progress->max_scans) {
    Fail(cinfo, StatusCode::kResourceExhausted, "more than %u scans (the limit)",
         progress->max_scans);
  }
}

// Adobe CMYK, as Photoshop writes it and PIL reads it: samples are stored inverted (255 = no
// ink). PIL un-inverts ("CMYK;I") and converts with R = round((255 - C) * (255 - K) / 255),
// which on the stored values is round(c * k / 255), computed exactly as PIL's MULDIV255.
void CmykToRgb(const uint8_t* cmyk, uint8_t* rgb, uint32_t width) {
  for (uint32_t x = 0; x < width; ++x, cmyk += 4, rgb += 3) {
    const uint32_t k = cmyk[3];
    for (int c = 0; c < 3; ++c) {
      const uint32_t t = cmyk[c] * k + 128;
      rgb[c] = static_cast<uint8_t>(((t >> 8) + t) >> 8);
    }
  }
}

// Whether libjpeg-turbo 2.1.5's partial decompression is trusted with this sampling layout.
// jpeg_crop_scanline miscomputes the downsampled width for 4x2 and 2x4 factors when scaling
// (fixed in 3.0.0), and the exotic layouts (3x, 4x) are rare enough that a full-width decode
// from the top costs nothing worth the risk.
bool PartialDecodeSupported(const jpeg_decompress_struct& cinfo) {
  for (int i = 0; i < cinfo.num_components; ++i) {
    const jpeg_component_info& c = cinfo.comp_info[i];
    if (c.h_samp_factor > 2 || c.v_samp_factor > 2) return false;
  }
  return true;
}

// Whether an EOI marker (FF D9) follows `from`. Entropy-coded data never contains FF D9 (FF is
// stuffed as FF 00), so its absence after the first scan means the file was cut short.
bool HasEndMarker(const uint8_t* from, const uint8_t* end) {
  for (const uint8_t* p = end; p - from >= 2; --p) {
    if (p[-1] == 0xD9 && p[-2] == 0xFF) return true;
  }
  return false;
}

void CheckLimits(j_decompress_ptr cinfo, const DecodeLimits& limits) {
  const uint32_t width = cinfo->image_width, height = cinfo->image_height;
  if (width > limits.max_dimension || height > limits.max_dimension) {
    Fail(reinterpret_cast<j_common_ptr>(cinfo), StatusCode::kResourceExhausted,
         "%ux%u image exceeds the limit of %u pixels per side", width, height,
         limits.max_dimension);
  }
  if (uint64_t{width} * height > limits.max_pixels) {
    Fail(reinterpret_cast<j_common_ptr>(cinfo), StatusCode::kResourceExhausted,
         "%ux%u image exceeds the limit of %llu pixels", width, height,
         static_cast<unsigned long long>(limits.max_pixels));
  }
}

ImageInfo InfoOf(const jpeg_decompress_struct& cinfo) {
  ImageInfo info;
  info.format = ImageFormat::kJpeg;
  info.width = cinfo.image_width;
  info.height = cinfo.image_height;
  info.components = static_cast<uint32_t>(cinfo.num_components);
  info.progressive = cinfo.progressive_mode != 0;
  return info;
}

// What DecodeBody produced besides the pixels. Plain data: it is written inside the protected
// region and read after it.
struct Placement {
  ImageInfo info;
  uint32_t scale = 8;                   // M: decoded at M/8
  uint32_t origin_x = 0, origin_y = 0;  // of the image, in decoded (scaled) pixels
};

// A half-open rectangle in source pixels.
struct SourceRect {
  uint32_t x0, y0, x1, y1;
};

}  // namespace

struct JpegSession {
  jpeg_decompress_struct cinfo;
  ErrorManager err;
  ProgressMonitor progress;
  bool created = false;
  std::vector<JSAMPROW> rows;     // row pointers into the output image
  std::vector<uint8_t> cmyk_row;  // one CMYK row before conversion
};

namespace {

// Runs `body(state, args...)` with libjpeg's errors caught: false if it longjmp'd out, with
// state.err saying why. `body` must not leave objects with destructors on the stack.
template <typename Body, typename... Args>
bool RunProtected(JpegSession& state, Body body, Args&... args) {
  if (setjmp(state.err.jump) != 0) return false;
  body(state, args...);
  return true;
}

void CreateBody(JpegSession& state) {
  jpeg_create_decompress(&state.cinfo);
  state.created = true;
}

void ReadInfoBody(JpegSession& state, const std::span<const std::byte>& bytes,
                  const DecodeLimits& limits, ImageInfo& info) {
  j_decompress_ptr cinfo = &state.cinfo;
  jpeg_abort_decompress(cinfo);  // in case an exception (bad_alloc) left a decode half done
  state.progress.max_scans = limits.max_scans;
  jpeg_mem_src(cinfo, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
  jpeg_read_header(cinfo, TRUE);
  info = InfoOf(*cinfo);
  CheckLimits(cinfo, limits);
  jpeg_abort_decompress(cinfo);
}

// The next `count` rows of the (cropped) output, as RGB, into `out` (sized here).
void ReadRows(JpegSession& state, bool cmyk, uint32_t count, Image& out) {
  j_decompress_ptr cinfo = &state.cinfo;
  const uint32_t width = cinfo->output_width;
  out.Reset(width, count);
  if (!cmyk) {
    // Straight into the image, as many rows per call as libjpeg will give.
    state.rows.resize(count);
    for (uint32_t y = 0; y < count; ++y) state.rows[y] = out.data() + y * out.stride();
    uint32_t done = 0;
    while (done < count) {
      const JDIMENSION n = jpeg_read_scanlines(cinfo, state.rows.data() + done, count - done);
      if (n == 0) Fail(reinterpret_cast<j_common_ptr>(cinfo), StatusCode::kInternal, "no rows");
      done += n;
    }
    return;
  }
  state.cmyk_row.resize(size_t{width} * 4);
  JSAMPROW row = state.cmyk_row.data();
  for (uint32_t y = 0; y < count; ++y) {
    if (jpeg_read_scanlines(cinfo, &row, 1) != 1) {
      Fail(reinterpret_cast<j_common_ptr>(cinfo), StatusCode::kInternal, "no rows");
    }
    CmykToRgb(row, out.data() + y * out.stride(), width);
  }
}

void DecodeBody(JpegSession& state, const std::span<const std::byte>& bytes,
                const DecodeRequest& request, Image& out, Placement& placement) {
  j_decompress_ptr cinfo = &state.cinfo;
  const auto common = reinterpret_cast<j_common_ptr>(cinfo);
  jpeg_abort_decompress(cinfo);  // in case an exception (bad_alloc) left a decode half done
  state.progress.max_scans = request.limits.max_scans;
  const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
  jpeg_mem_src(cinfo, data, bytes.size());
  jpeg_read_header(cinfo, TRUE);
  placement.info = InfoOf(*cinfo);
  CheckLimits(cinfo, request.limits);

  bool cmyk = false;
  switch (cinfo->jpeg_color_space) {
    case JCS_GRAYSCALE:
    case JCS_YCbCr:
    case JCS_RGB:
      cinfo->out_color_space = JCS_RGB;
      break;
    case JCS_CMYK:
    case JCS_YCCK:  // libjpeg turns YCCK into CMYK
      cinfo->out_color_space = JCS_CMYK;
      cmyk = true;
      break;
    default:
      Fail(common, StatusCode::kUnsupported, "unsupported colour space (%d components)",
           cinfo->num_components);
  }
  // jpeg_read_header stopped right after the first SOS header.
  if (!HasEndMarker(cinfo->src->next_input_byte, data + bytes.size())) {
    Fail(common, StatusCode::kInvalidArgument, "premature end of data (no EOI marker)");
  }

  // The source region, clamped.
  const uint32_t width = cinfo->image_width, height = cinfo->image_height;
  SourceRect region{0, 0, width, height};
  const DecodeRequest::Rect& r = request.region;
  if (r.width > 0 && r.height > 0) {
    if (r.x >= width || r.y >= height) {
      Fail(common, StatusCode::kInvalidArgument, "region at (%u, %u) is outside the %ux%u image",
           r.x, r.y, width, height);
    }
    region = {r.x, r.y, r.x + std::min(r.width, width - r.x),
              r.y + std::min(r.height, height - r.y)};
  }

  const uint32_t m = ChooseJpegScale(region.x1 - region.x0, region.y1 - region.y0,
                                     request.min_width, request.min_height);
  cinfo->scale_num = m;
  cinfo->scale_denom = 8;
  jpeg_start_decompress(cinfo);  // for multi-scan files this entropy-decodes everything

  // The region in output (scaled) pixels: floor the start, ceil the end.
  const uint32_t out_width = cinfo->output_width, out_height = cinfo->output_height;
  const uint32_t sx0 = static_cast<uint32_t>(uint64_t{region.x0} * m / 8);
  const uint32_t sy0 = static_cast<uint32_t>(uint64_t{region.y0} * m / 8);
  const uint32_t sx1 = std::min<uint32_t>(out_width, (uint64_t{region.x1} * m + 7) / 8);
  const uint32_t sy1 = std::min<uint32_t>(out_height, (uint64_t{region.y1} * m + 7) / 8);

  JDIMENSION crop_x = 0, crop_width = out_width;
  uint32_t first_row = 0;
  if (PartialDecodeSupported(*cinfo)) {
    // One extra column each side keeps the crop's edge columns, which fancy upsampling
    // computes as if they were the image's edges, outside the region.
    uint32_t left = sx0 > 0 ? sx0 - 1 : 0;
    uint32_t right = sx1 < out_width ? sx1 + 1 : out_width;
    // jpeg_crop_scanline moves the left edge down to an iMCU column (as computed here). A crop
    // less than two iMCUs wide can leave a subsampled component 1 sample wide, for which
    // libjpeg switches to plain (not fancy) upsampling and every pixel would change.
    const uint32_t imcu =
        cinfo->min_DCT_scaled_size * (cinfo->num_components == 1 ? 1 : cinfo->max_h_samp_factor);
    left = left / imcu * imcu;
    right = std::max(right, std::min(out_width, left + 2 * imcu));
    if (right - left < 2 * imcu) left = right > 2 * imcu ? (right - 2 * imcu) / imcu * imcu : 0;
    if (left > 0 || right < out_width) {
      crop_x = left;
      crop_width = right - left;
      jpeg_crop_scanline(cinfo, &crop_x, &crop_width);
    }
    first_row = sy0;
    if (first_row > 0) jpeg_skip_scanlines(cinfo, first_row);
  }
  ReadRows(state, cmyk, sy1 - first_row, out);
  // Not jpeg_finish_decompress: the rows below the region are never decoded.
  jpeg_abort_decompress(cinfo);

  placement.scale = m;
  placement.origin_x = crop_x;
  placement.origin_y = first_row;
}

Status ErrorStatus(const ErrorManager& err) {
  return Status(err.code, std::string("jpeg: ") + err.message);
}

}  // namespace

uint32_t ChooseJpegScale(uint32_t width, uint32_t height, uint32_t min_width, uint32_t min_height) {
  if (min_width == 0 || min_height == 0) return 8;
  for (const uint32_t m : kJpegScales) {
    if (uint64_t{width} * m >= uint64_t{min_width} * 8 &&
        uint64_t{height} * m >= uint64_t{min_height} * 8) {
      return m;
    }
  }
  return 8;
}

JpegCodec::JpegCodec() : session_(std::make_unique<JpegSession>()) {
  JpegSession& s = *session_;
  s.cinfo.err = jpeg_std_error(&s.err.pub);
  s.err.pub.error_exit = OnError;
  s.err.pub.emit_message = OnMessage;
  // Creation fails only when out of memory; Decode then says so.
  if (!RunProtected(s, CreateBody)) return;
  s.progress.pub.progress_monitor = OnProgress;
  s.cinfo.progress = &s.progress.pub;  // after jpeg_create_decompress, which zeroes cinfo
}

JpegCodec::~JpegCodec() {
  if (session_->created) jpeg_destroy_decompress(&session_->cinfo);
}

Result<ImageInfo> JpegCodec::ReadInfo(std::span<const std::byte> bytes,
                                      const DecodeLimits& limits) {
  JpegSession& s = *session_;
  if (!s.created) return Err(ErrorStatus(s.err));
  ImageInfo info;
  if (!RunProtected(s, ReadInfoBody, bytes, limits, info)) {
    jpeg_abort_decompress(&s.cinfo);
    return Err(ErrorStatus(s.err));
  }
  return info;
}

Result<DecodedRegion> JpegCodec::Decode(std::span<const std::byte> bytes,
                                        const DecodeRequest& request, Image& out) {
  JpegSession& s = *session_;
  if (!s.created) return Err(ErrorStatus(s.err));
  Placement placement;
  if (!RunProtected(s, DecodeBody, bytes, request, out, placement)) {
    jpeg_abort_decompress(&s.cinfo);
    return Err(ErrorStatus(s.err));
  }
  DecodedRegion decoded;
  decoded.scale_x = decoded.scale_y = placement.scale / 8.0;
  decoded.origin_x = placement.origin_x;
  decoded.origin_y = placement.origin_y;
  decoded.info = placement.info;
  return decoded;
}

}  // namespace stoker::decode::internal
