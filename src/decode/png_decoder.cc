// PNG decoding through libpng's low-level read API, set up to give what PIL's
// Image.open().convert("RGB") gives:
//  - alpha (RGBA, gray+alpha, tRNS) is dropped, not composited, as PIL's convert does;
//  - 16-bit samples keep their high byte (png_set_strip_16), as PIL reads them ("RGB;16B");
//  - 1/2/4-bit gray and palette samples expand exactly as in PIL;
//  - no gamma or colour management: gAMA, cHRM, iCCP and sBIT are ignored, as PIL ignores them.
// The exception is 16-bit grayscale, which PIL opens as "I;16" and converts to RGB by clipping
// every value to 255 (mostly white); here it gets the high byte like the other 16-bit types.
//
// Why not libpng's simplified API (png_image_*): it applies the file's gAMA chunk, which PIL
// does not, so a PNG marked with, say, the old Mac gamma 1/1.8 came out up to 9 levels apart
// (72 for gamma 1.0), and it rounds 16-bit samples where PIL truncates.
//
// Errors: libpng reports them through an error callback that must not return; it longjmps back
// to the setjmp in ReadHeader/ReadPixels, which therefore hold only trivially destructible
// locals. Warnings (bad ancillary chunks, a known-bad sRGB profile) are ignored, as by PIL. The
// file must be complete up to IEND: like a JPEG without its EOI, a cut anywhere is InvalidArgument.
// Thread-safety: reentrant.
#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <string>

#include "decode/codecs.h"

namespace stoker::decode::internal {
namespace {

// One read: libpng's structs, the input and the error. Destroys the structs on every path.
struct PngRead {
  png_structp png = nullptr;
  png_infop info = nullptr;
  const uint8_t* data = nullptr;
  size_t size = 0, offset = 0;
  char message[256] = "";

  PngRead(std::span<const std::byte> bytes);
  ~PngRead() { png_destroy_read_struct(&png, info != nullptr ? &info : nullptr, nullptr); }
  PngRead(const PngRead&) = delete;
  PngRead& operator=(const PngRead&) = delete;

  Status Error() const { return Status::InvalidArgument(std::string("png: ") + message); }
};

[[noreturn]] void OnError(png_structp png, png_const_charp message) {
  auto* read = static_cast<PngRead*>(png_get_error_ptr(png));
  std::snprintf(read->message, sizeof(read->message), "%s", message);
  png_longjmp(png, 1);
}

void OnWarning(png_structp, png_const_charp) {}

void ReadFromMemory(png_structp png, png_bytep out, size_t count) {
  auto* read = static_cast<PngRead*>(png_get_io_ptr(png));
  if (count > read->size - read->offset) png_error(png, "premature end of data");
  std::memcpy(out, read->data + read->offset, count);
  read->offset += count;
}

PngRead::PngRead(std::span<const std::byte> bytes)
    : data(reinterpret_cast<const uint8_t*>(bytes.data())), size(bytes.size()) {
  std::snprintf(message, sizeof(message), "out of memory");
  png = png_create_read_struct(PNG_LIBPNG_VER_STRING, this, OnError, OnWarning);
  if (png != nullptr) info = png_create_info_struct(png);
  if (info != nullptr) png_set_read_fn(png, this, ReadFromMemory);
}

// Reads the chunks up to the image data. False on error (read.message says why).
bool ReadHeader(PngRead& read) {
  if (read.info == nullptr) return false;
  if (setjmp(png_jmpbuf(read.png)) != 0) return false;
  png_read_info(read.png, read.info);
  return true;
}

ImageInfo InfoOf(const PngRead& read) {
  ImageInfo info;
  info.format = ImageFormat::kPng;
  info.width = png_get_image_width(read.png, read.info);
  info.height = png_get_image_height(read.png, read.info);
  const int color_type = png_get_color_type(read.png, read.info);
  info.components = (color_type & PNG_COLOR_MASK_COLOR) != 0 ? 3 : 1;  // palette: colour
  if ((color_type & PNG_COLOR_MASK_ALPHA) != 0 ||
      png_get_valid(read.png, read.info, PNG_INFO_tRNS) != 0) {
    info.components += 1;
  }
  return info;
}

Status CheckLimits(const ImageInfo& info, const DecodeLimits& limits) {
  const std::string size = std::to_string(info.width) + "x" + std::to_string(info.height);
  if (info.width > limits.max_dimension || info.height > limits.max_dimension) {
    return Status::ResourceExhausted("png: " + size + " image exceeds the limit of " +
                                     std::to_string(limits.max_dimension) + " pixels per side");
  }
  if (uint64_t{info.width} * info.height > limits.max_pixels) {
    return Status::ResourceExhausted("png: " + size + " image exceeds the limit of " +
                                     std::to_string(limits.max_pixels) + " pixels");
  }
  return Status::OK();
}

// Decodes the pixels as 8-bit RGB into `out` (already sized) and reads on to IEND.
bool ReadPixels(PngRead& read, Image& out) {
  png_structp png = read.png;
  if (setjmp(png_jmpbuf(png)) != 0) return false;
  const int color_type = png_get_color_type(png, read.info);
  png_set_strip_16(png);
  if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if ((color_type & PNG_COLOR_MASK_COLOR) == 0) {
    png_set_expand_gray_1_2_4_to_8(png);
    png_set_gray_to_rgb(png);
  }
  png_set_strip_alpha(png);  // also what palette_to_rgb makes of tRNS
  const int passes = png_set_interlace_handling(png);
  png_read_update_info(png, read.info);
  if (png_get_rowbytes(png, read.info) != out.stride()) {
    png_error(png, "unexpected row layout after conversion to RGB");
  }
  // Each Adam7 pass fills in its pixels of every row.
  for (int pass = 0; pass < passes; ++pass) {
    for (uint32_t y = 0; y < out.height(); ++y) {
      png_read_row(png, out.data() + y * out.stride(), nullptr);
    }
  }
  png_read_end(png, nullptr);
  return true;
}

}  // namespace

Result<ImageInfo> ReadPngInfo(std::span<const std::byte> bytes, const DecodeLimits& limits) {
  PngRead read(bytes);
  if (!ReadHeader(read)) return Err(read.Error());
  const ImageInfo info = InfoOf(read);
  STOKER_RETURN_IF_ERROR(CheckLimits(info, limits));
  return info;
}

Result<DecodedRegion> DecodePng(std::span<const std::byte> bytes, const DecodeLimits& limits,
                                Image& out) {
  PngRead read(bytes);
  if (!ReadHeader(read)) return Err(read.Error());
  DecodedRegion decoded;  // always the whole image: scale 1, origin 0
  decoded.info = InfoOf(read);
  STOKER_RETURN_IF_ERROR(CheckLimits(decoded.info, limits));
  out.Reset(decoded.info.width, decoded.info.height);
  if (!ReadPixels(read, out)) return Err(read.Error());
  return decoded;
}

}  // namespace stoker::decode::internal
