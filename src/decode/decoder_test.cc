// decode::Decoder against plain libjpeg/libpng decodes of images encoded here: full, DCT-scaled
// and region decodes must give the reference's pixels exactly; the region geometry must place
// them; hostile input (every truncation, flipped bytes, absurd headers, too many scans) must
// come back as a Status.
#include "decode/decoder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>  // before jpeglib.h
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <jpeglib.h>
#include <png.h>

#include "common/random.h"
#include "decode/codecs.h"
#include "testing/test_images.h"

namespace stoker::decode {
namespace {

using Bytes = std::vector<uint8_t>;

std::span<const std::byte> AsBytes(const Bytes& bytes) { return std::as_bytes(std::span(bytes)); }

// ---------------------------------------------------------------------------------------------
// JPEG encoding and the reference decode

struct JpegSpec {
  const char* name = "";
  uint32_t width = 160, height = 120;
  int components = 3;          // 1 gray, 3 YCbCr, 4 CMYK
  int h_samp = 2, v_samp = 2;  // of the first component (and of K for YCCK); others 1x1
  bool ycck = false;
  bool progressive = false;
  int restart_rows = 0;
  bool arithmetic = false;              // arithmetic entropy coding instead of Huffman
  bool every_coefficient_scan = false;  // progressive, one scan per coefficient: 379 scans
};

Bytes EncodeJpeg(const JpegSpec& spec, uint64_t seed = 1) {
  const std::vector<uint8_t> rgb = test::PhotoLikePixels(spec.width, spec.height, seed);
  jpeg_compress_struct cinfo;
  jpeg_error_mgr jerr;
  cinfo.err = jpeg_std_error(&jerr);  // test input is valid: exit() on error is fine
  jpeg_create_compress(&cinfo);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buffer, &size);
  cinfo.image_width = spec.width;
  cinfo.image_height = spec.height;
  cinfo.input_components = spec.components;
  cinfo.in_color_space = spec.components == 1   ? JCS_GRAYSCALE
                         : spec.components == 3 ? JCS_RGB
                                                : JCS_CMYK;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, 90, TRUE);
  if (spec.ycck) jpeg_set_colorspace(&cinfo, JCS_YCCK);
  for (int i = 0; i < cinfo.num_components; ++i) {
    const bool full = i == 0 || (spec.ycck && i == 3);
    cinfo.comp_info[i].h_samp_factor = full ? spec.h_samp : 1;
    cinfo.comp_info[i].v_samp_factor = full ? spec.v_samp : 1;
  }
  cinfo.restart_in_rows = spec.restart_rows;
  cinfo.arith_code = spec.arithmetic;
  if (spec.progressive) jpeg_simple_progression(&cinfo);
  // DC, then each AC coefficient of each component on its own, first its high bits, then a
  // refinement scan: a valid file with far more scans than any encoder writes.
  std::vector<jpeg_scan_info> scans;
  if (spec.every_coefficient_scan) {
    scans.push_back({cinfo.num_components, {0, 1, 2, 3}, 0, 0, 0, 0});
    for (const auto& [ah, al] : {std::pair{0, 1}, std::pair{1, 0}}) {
      for (int c = 0; c < cinfo.num_components; ++c) {
        for (int k = 1; k < 64; ++k) scans.push_back({1, {c}, k, k, ah, al});
      }
    }
    cinfo.scan_info = scans.data();
    cinfo.num_scans = static_cast<int>(scans.size());
  }
  jpeg_start_compress(&cinfo, TRUE);
  std::vector<uint8_t> row(size_t{spec.width} * spec.components);
  while (cinfo.next_scanline < spec.height) {
    const uint8_t* src = rgb.data() + size_t{cinfo.next_scanline} * spec.width * 3;
    for (uint32_t x = 0; x < spec.width; ++x) {
      const uint8_t* p = src + x * 3;
      uint8_t* q = row.data() + x * spec.components;
      if (spec.components == 1) q[0] = p[1];
      if (spec.components >= 3) std::memcpy(q, p, 3);
      if (spec.components == 4) q[3] = static_cast<uint8_t>(255 - (p[0] + p[2]) / 4);
    }
    JSAMPROW rows[1] = {row.data()};
    jpeg_write_scanlines(&cinfo, rows, 1);
  }
  jpeg_finish_compress(&cinfo);
  Bytes out(buffer, buffer + size);
  jpeg_destroy_compress(&cinfo);
  std::free(buffer);
  return out;
}

struct Pixels {
  uint32_t width = 0, height = 0;
  std::vector<uint8_t> rgb;
  const uint8_t* at(uint32_t x, uint32_t y) const {
    return rgb.data() + (size_t{y} * width + x) * 3;
  }
};

// A whole-image decode at scale m/8 with nothing but libjpeg, to RGB the way PIL does it
// (CMYK: Adobe-inverted, R = round(C * K / 255) on the stored values).
Pixels ReferenceJpeg(const Bytes& jpeg, uint32_t m) {
  jpeg_decompress_struct cinfo;
  jpeg_error_mgr jerr;
  cinfo.err = jpeg_std_error(&jerr);
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, jpeg.data(), jpeg.size());
  jpeg_read_header(&cinfo, TRUE);
  const bool cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
  cinfo.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  cinfo.scale_num = m;
  cinfo.scale_denom = 8;
  jpeg_start_decompress(&cinfo);
  Pixels out;
  out.width = cinfo.output_width;
  out.height = cinfo.output_height;
  out.rgb.resize(size_t{out.width} * out.height * 3);
  std::vector<uint8_t> row(size_t{out.width} * cinfo.output_components);
  for (uint32_t y = 0; y < out.height; ++y) {
    JSAMPROW rows[1] = {row.data()};
    jpeg_read_scanlines(&cinfo, rows, 1);
    uint8_t* dst = out.rgb.data() + size_t{y} * out.width * 3;
    for (uint32_t x = 0; x < out.width; ++x) {
      if (!cmyk) {
        std::memcpy(dst + x * 3, row.data() + x * 3, 3);
        continue;
      }
      const uint32_t k = row[x * 4 + 3];
      for (int c = 0; c < 3; ++c) dst[x * 3 + c] = (2 * row[x * 4 + c] * k + 255) / 510;
    }
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return out;
}

// The reference pixels over [x0, x1) x [y0, y1) (reference coordinates) against `image`,
// placed by `where`'s origin.
::testing::AssertionResult SamePixels(const Image& image, const DecodedRegion& where,
                                      const Pixels& ref, uint32_t x0, uint32_t y0, uint32_t x1,
                                      uint32_t y1) {
  const auto ox = static_cast<int64_t>(where.origin_x), oy = static_cast<int64_t>(where.origin_y);
  if (ox < 0 || oy < 0 || x0 < ox || y0 < oy || x1 - ox > image.width() ||
      y1 - oy > image.height()) {
    return ::testing::AssertionFailure()
           << "image " << image.width() << "x" << image.height() << " at (" << ox << ", " << oy
           << ") does not cover [" << x0 << ", " << x1 << ") x [" << y0 << ", " << y1 << ")";
  }
  for (uint32_t y = y0; y < y1; ++y) {
    const uint8_t* row = image.data() + (y - oy) * image.stride();
    for (uint32_t x = x0; x < x1; ++x) {
      const uint8_t* got = row + (x - ox) * 3;
      const uint8_t* want = ref.at(x, y);
      if (std::memcmp(got, want, 3) != 0) {
        return ::testing::AssertionFailure()
               << "pixel (" << x << ", " << y << "): got " << int(got[0]) << "," << int(got[1])
               << "," << int(got[2]) << " want " << int(want[0]) << "," << int(want[1]) << ","
               << int(want[2]);
      }
    }
  }
  return ::testing::AssertionSuccess();
}

// The minimum size that makes the decoder pick scale `m` (or the next one up that fits) for a
// width x height region.
std::pair<uint32_t, uint32_t> MinSizeFor(uint32_t width, uint32_t height, uint32_t m) {
  return {std::max<uint32_t>(1, width * m / 8), std::max<uint32_t>(1, height * m / 8)};
}

// ---------------------------------------------------------------------------------------------
// Pixels and geometry, over encodings

class JpegDecodeTest : public ::testing::TestWithParam<JpegSpec> {};

TEST_P(JpegDecodeTest, FullDecodeMatchesLibjpeg) {
  const JpegSpec& spec = GetParam();
  const Bytes jpeg = EncodeJpeg(spec);
  Decoder decoder;
  Image image;
  auto decoded = decoder.Decode(AsBytes(jpeg), {}, image);
  ASSERT_TRUE(decoded.has_value()) << decoded.error().ToString();
  EXPECT_EQ(decoded->info.format, ImageFormat::kJpeg);
  EXPECT_EQ(decoded->info.width, spec.width);
  EXPECT_EQ(decoded->info.height, spec.height);
  EXPECT_EQ(decoded->info.components, uint32_t(spec.components));
  EXPECT_EQ(decoded->info.progressive, spec.progressive);
  EXPECT_EQ(decoded->scale_x, 1.0);
  EXPECT_EQ(decoded->scale_y, 1.0);
  EXPECT_EQ(decoded->origin_x, 0.0);
  EXPECT_EQ(decoded->origin_y, 0.0);
  ASSERT_EQ(image.width(), spec.width);
  ASSERT_EQ(image.height(), spec.height);
  EXPECT_TRUE(SamePixels(image, *decoded, ReferenceJpeg(jpeg, 8), 0, 0, spec.width, spec.height));
}

TEST_P(JpegDecodeTest, ScaledDecodeMatchesLibjpeg) {
  const JpegSpec& spec = GetParam();
  const Bytes jpeg = EncodeJpeg(spec);
  Decoder decoder;
  Image image;
  for (const uint32_t target : {1u, 2u, 4u}) {
    SCOPED_TRACE("target M=" + std::to_string(target));
    DecodeRequest request;
    std::tie(request.min_width, request.min_height) = MinSizeFor(spec.width, spec.height, target);
    auto decoded = decoder.Decode(AsBytes(jpeg), request, image);
    ASSERT_TRUE(decoded.has_value()) << decoded.error().ToString();
    const uint32_t m =
        internal::ChooseJpegScale(spec.width, spec.height, request.min_width, request.min_height);
    EXPECT_GE(m, target);
    EXPECT_EQ(decoded->scale_x, m / 8.0);
    EXPECT_EQ(decoded->scale_y, m / 8.0);
    const Pixels ref = ReferenceJpeg(jpeg, m);
    ASSERT_EQ(image.width(), ref.width);
    ASSERT_EQ(image.height(), ref.height);
    EXPECT_GE(image.width() * 8, spec.width * m);  // ceil(width * m / 8)
    EXPECT_TRUE(SamePixels(image, *decoded, ref, 0, 0, ref.width, ref.height));
  }
}

// Random regions at every scale: the decoded pixels over the region must be the full decode's
// at that scale, and ToImage(region) must land inside the decoded image.
TEST_P(JpegDecodeTest, RegionDecodeMatchesFullDecode) {
  const JpegSpec& spec = GetParam();
  const Bytes jpeg = EncodeJpeg(spec);
  Pixels refs[9];
  for (const uint32_t m : internal::kJpegScales) refs[m] = ReferenceJpeg(jpeg, m);
  Decoder decoder;
  Image image;
  Pcg32 rng(42);
  for (int i = 0; i < 90; ++i) {
    DecodeRequest request;
    auto& r = request.region;
    r.x = static_cast<uint32_t>(rng.Below(spec.width));
    r.y = static_cast<uint32_t>(rng.Below(spec.height));
    // A third of them narrow or flat: crops of one or two iMCUs are where libjpeg's special
    // cases live.
    const uint32_t max_width = i % 3 == 0 ? std::min(spec.width - r.x, 9u) : spec.width - r.x;
    const uint32_t max_height = i % 3 == 1 ? std::min(spec.height - r.y, 9u) : spec.height - r.y;
    r.width = 1 + static_cast<uint32_t>(rng.Below(max_width));
    r.height = 1 + static_cast<uint32_t>(rng.Below(max_height));
    const uint32_t target = internal::kJpegScales[rng.Below(4)];
    std::tie(request.min_width, request.min_height) = MinSizeFor(r.width, r.height, target);
    SCOPED_TRACE(testing::Message()
                 << "region " << r.x << "," << r.y << " " << r.width << "x" << r.height << " min "
                 << request.min_width << "x" << request.min_height);
    auto decoded = decoder.Decode(AsBytes(jpeg), request, image);
    ASSERT_TRUE(decoded.has_value()) << decoded.error().ToString();
    const uint32_t m =
        internal::ChooseJpegScale(r.width, r.height, request.min_width, request.min_height);
    ASSERT_EQ(decoded->scale_x, m / 8.0);
    ASSERT_EQ(decoded->scale_y, m / 8.0);

    const Box box =
        decoded->ToImage({double(r.x), double(r.y), double(r.x + r.width), double(r.y + r.height)});
    EXPECT_GE(box.x0, 0);
    EXPECT_GE(box.y0, 0);
    EXPECT_LE(box.x1, image.width());
    EXPECT_LE(box.y1, image.height());
    EXPECT_GE(box.width(), request.min_width);
    EXPECT_GE(box.height(), request.min_height);

    // Every decoded pixel the box touches.
    const Pixels& ref = refs[m];
    const uint32_t sx0 = r.x * m / 8, sy0 = r.y * m / 8;
    const uint32_t sx1 = std::min(ref.width, ((r.x + r.width) * m + 7) / 8);
    const uint32_t sy1 = std::min(ref.height, ((r.y + r.height) * m + 7) / 8);
    ASSERT_TRUE(SamePixels(image, *decoded, ref, sx0, sy0, sx1, sy1));
  }
}

const JpegSpec kJpegSpecs[] = {
    {.name = "ycc420"},
    {.name = "ycc422", .h_samp = 2, .v_samp = 1},
    {.name = "ycc440", .h_samp = 1, .v_samp = 2},
    {.name = "ycc444", .h_samp = 1, .v_samp = 1},
    {.name = "ycc411", .h_samp = 4, .v_samp = 1},  // no partial decode: full width from the top
    {.name = "gray", .components = 1, .h_samp = 1, .v_samp = 1},
    {.name = "gray2x2", .components = 1},
    {.name = "cmyk", .components = 4, .h_samp = 1, .v_samp = 1},
    {.name = "ycck420", .components = 4, .ycck = true},
    {.name = "progressive420", .progressive = true},
    {.name = "progressive444", .h_samp = 1, .v_samp = 1, .progressive = true},
    {.name = "progressive_gray", .components = 1, .h_samp = 1, .v_samp = 1, .progressive = true},
    {.name = "restart420", .restart_rows = 1},
    {.name = "restart_progressive", .progressive = true, .restart_rows = 2},
    {.name = "arithmetic", .arithmetic = true},
    {.name = "arithmetic_progressive", .h_samp = 1, .progressive = true, .arithmetic = true},
    {.name = "odd1x1", .width = 1, .height = 1},
    {.name = "odd17x9", .width = 17, .height = 9},
    {.name = "odd1001x3", .width = 1001, .height = 3},
    {.name = "odd3x1001", .width = 3, .height = 1001, .progressive = true},
    {.name = "odd97x61_422", .width = 97, .height = 61, .h_samp = 2, .v_samp = 1},
    {.name = "odd203x151_440", .width = 203, .height = 151, .h_samp = 1, .v_samp = 2},
};

INSTANTIATE_TEST_SUITE_P(Encodings, JpegDecodeTest, ::testing::ValuesIn(kJpegSpecs),
                         [](const auto& p) { return std::string(p.param.name); });

TEST(JpegRegion, DecodesOnlyTheCropAndTheRowsNeeded) {
  const Bytes jpeg = EncodeJpeg({.width = 160, .height = 120});  // 4:2:0: 16x16 iMCUs
  Decoder decoder;
  Image image;
  DecodeRequest request;
  request.region = {100, 80, 40, 30};
  auto decoded = decoder.Decode(AsBytes(jpeg), request, image);
  ASSERT_TRUE(decoded.has_value()) << decoded.error().ToString();
  // Columns: from 99 (one left of the region) down to the iMCU edge at 96, to 141 (one right).
  EXPECT_EQ(decoded->origin_x, 96);
  EXPECT_EQ(image.width(), 141u - 96u);
  // Rows: exactly the region's.
  EXPECT_EQ(decoded->origin_y, 80);
  EXPECT_EQ(image.height(), 30u);
  EXPECT_EQ(decoded->scale_x, 1.0);
}

TEST(JpegRegion, ClampsToTheImageAndRejectsRegionsOutsideIt) {
  const Bytes jpeg = EncodeJpeg({.width = 64, .height = 48});
  Decoder decoder;
  Image image;
  DecodeRequest request;
  request.region = {40, 30, 1000, 1000};
  auto decoded = decoder.Decode(AsBytes(jpeg), request, image);
  ASSERT_TRUE(decoded.has_value()) << decoded.error().ToString();
  EXPECT_EQ(decoded->origin_y, 30);
  EXPECT_EQ(image.height(), 18u);
  EXPECT_EQ(decoded->origin_x + image.width(), 64);
  EXPECT_TRUE(SamePixels(image, *decoded, ReferenceJpeg(jpeg, 8), 40, 30, 64, 48));

  request.region = {64, 0, 10, 10};
  decoded = decoder.Decode(AsBytes(jpeg), request, image);
  ASSERT_FALSE(decoded.has_value());
  EXPECT_EQ(decoded.error().code(), StatusCode::kInvalidArgument);
}

TEST(JpegScale, ChoosesTheSmallestScaleThatKeepsTheMinimumSize) {
  using internal::ChooseJpegScale;
  EXPECT_EQ(ChooseJpegScale(400, 300, 100, 75), 2u);  // exactly 1/4
  EXPECT_EQ(ChooseJpegScale(400, 300, 101, 75), 4u);
  EXPECT_EQ(ChooseJpegScale(400, 300, 50, 37), 1u);
  EXPECT_EQ(ChooseJpegScale(400, 300, 50, 38), 2u);  // 300/8 = 37.5 < 38
  EXPECT_EQ(ChooseJpegScale(400, 300, 201, 1), 8u);
  EXPECT_EQ(ChooseJpegScale(400, 300, 401, 1), 8u);  // never upscales
  EXPECT_EQ(ChooseJpegScale(400, 300, 0, 10), 8u);   // 0: no DCT scaling
  EXPECT_EQ(ChooseJpegScale(400, 300, 10, 0), 8u);
  EXPECT_EQ(ChooseJpegScale(7, 7, 1, 1), 2u);
  // Never 3, 5, 6, 7 (slower than the next scale with a SIMD IDCT).
  EXPECT_EQ(ChooseJpegScale(800, 800, 300, 300), 4u);
  EXPECT_EQ(ChooseJpegScale(800, 800, 500, 500), 8u);

  Pcg32 rng(7);
  for (int i = 0; i < 10000; ++i) {
    const auto w = static_cast<uint32_t>(1 + rng.Below(5000));
    const auto h = static_cast<uint32_t>(1 + rng.Below(5000));
    const auto mw = static_cast<uint32_t>(1 + rng.Below(w));
    const auto mh = static_cast<uint32_t>(1 + rng.Below(h));
    const uint32_t m = ChooseJpegScale(w, h, mw, mh);
    EXPECT_TRUE(uint64_t{w} * m >= uint64_t{mw} * 8 && uint64_t{h} * m >= uint64_t{mh} * 8);
    for (const uint32_t smaller : internal::kJpegScales) {
      if (smaller >= m) break;
      EXPECT_FALSE(uint64_t{w} * smaller >= uint64_t{mw} * 8 &&
                   uint64_t{h} * smaller >= uint64_t{mh} * 8);
    }
  }
}

TEST(JpegScale, DecodesAtTheChosenScale) {
  const Bytes jpeg = EncodeJpeg({.width = 160, .height = 120});
  Decoder decoder;
  Image image;
  DecodeRequest request;
  request.min_width = 40;
  request.min_height = 30;
  auto decoded = decoder.Decode(AsBytes(jpeg), request, image);
  ASSERT_TRUE(decoded.has_value()) << decoded.error().ToString();
  EXPECT_EQ(decoded->scale_x, 0.25);
  EXPECT_EQ(image.width(), 40u);
  EXPECT_EQ(image.height(), 30u);
}

// ---------------------------------------------------------------------------------------------
// Hostile JPEG input

Status DecodeError(Decoder& decoder, const Bytes& bytes, const DecodeRequest& request = {}) {
  Image image;
  auto decoded = decoder.Decode(AsBytes(bytes), request, image);
  if (decoded.has_value()) return Status::OK();
  return decoded.error();
}

// Every prefix of a file is an error, for full and region decodes alike: the cut is caught by
// the missing EOI even when a region decode would stop before reaching it.
TEST(JpegErrors, EveryTruncationIsAnError) {
  for (const JpegSpec& spec : {JpegSpec{.width = 48, .height = 40},
                               JpegSpec{.width = 48, .height = 40, .progressive = true}}) {
    const Bytes jpeg = EncodeJpeg(spec);
    Decoder decoder;
    DecodeRequest top_left;
    top_left.region = {0, 0, 8, 8};
    for (size_t size = 0; size < jpeg.size(); ++size) {
      const Bytes prefix(jpeg.begin(), jpeg.begin() + size);
      for (const DecodeRequest& request : {DecodeRequest{}, top_left}) {
        const Status status = DecodeError(decoder, prefix, request);
        ASSERT_FALSE(status.ok()) << "prefix of " << size << " bytes decoded";
        ASSERT_EQ(status.code(), StatusCode::kInvalidArgument) << size << ": " << status.ToString();
      }
    }
    EXPECT_TRUE(DecodeError(decoder, jpeg).ok());
  }
}

TEST(JpegErrors, MissingEndMarkerIsDamagedInput) {
  Bytes jpeg = EncodeJpeg({.width = 32, .height = 32});
  jpeg.resize(jpeg.size() - 2);
  Decoder decoder;
  const Status status = DecodeError(decoder, jpeg);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("EOI"), std::string::npos) << status.ToString();
}

// A marker where entropy-coded data should be: libjpeg would fill the rest with gray.
TEST(JpegErrors, MarkerInsideScanDataIsDamagedInput) {
  for (const bool progressive : {false, true}) {
    Bytes jpeg = EncodeJpeg({.width = 64, .height = 64, .progressive = progressive});
    const size_t middle = jpeg.size() * 3 / 4;
    jpeg[middle] = 0xFF;
    jpeg[middle + 1] = 0xD9;
    Decoder decoder;
    const Status status = DecodeError(decoder, jpeg);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
    EXPECT_NE(status.message().find("jpeg: "), std::string::npos);
  }
}

// Junk after the last scan, before EOI, is a common quirk (some ImageNet files) and harmless.
TEST(JpegErrors, JunkBeforeEndMarkerIsAccepted) {
  for (const bool progressive : {false, true}) {
    const Bytes clean = EncodeJpeg({.width = 64, .height = 48, .progressive = progressive});
    Bytes jpeg = clean;
    jpeg.insert(jpeg.end() - 2, {0x00, 0x12, 0x34, 0x56, 0x00, 0x00});
    Decoder decoder;
    Image image;
    auto decoded = decoder.Decode(AsBytes(jpeg), {}, image);
    ASSERT_TRUE(decoded.has_value()) << decoded.error().ToString();
    EXPECT_TRUE(SamePixels(image, *decoded, ReferenceJpeg(clean, 8), 0, 0, 64, 48));
  }
}

TEST(JpegErrors, FlippedBytesNeverCrash) {
  for (const JpegSpec& spec :
       {JpegSpec{.width = 40, .height = 24},
        JpegSpec{.width = 40, .height = 24, .progressive = true},
        JpegSpec{.width = 24, .height = 16, .components = 4, .ycck = true}}) {
    const Bytes jpeg = EncodeJpeg(spec);
    Decoder decoder;
    Pcg32 rng(3);
    int ok = 0;
    for (size_t i = 0; i < jpeg.size(); ++i) {
      Bytes damaged = jpeg;
      damaged[i] ^= (i % 2 == 0) ? 0xFF : static_cast<uint8_t>(1u << rng.Below(8));
      DecodeRequest request;
      if (i % 3 == 0) request.region = {8, 8, 16, 8};
      if (i % 5 == 0) request.min_width = request.min_height = 4;
      request.limits.max_pixels = 1 << 20;
      Image image;
      auto decoded = decoder.Decode(AsBytes(damaged), request, image);
      if (decoded.has_value()) {
        ++ok;  // damage that libjpeg cannot notice (a coefficient changed): fine
        EXPECT_GT(image.width(), 0u);
        EXPECT_GT(image.height(), 0u);
      }
    }
    // The decoder still works after all that.
    EXPECT_TRUE(DecodeError(decoder, jpeg).ok());
    RecordProperty(std::string(spec.progressive ? "progressive" : "baseline") + "_ok", ok);
  }
}

// Patches the SOF segment's height and width.
void SetJpegSize(Bytes& jpeg, uint16_t width, uint16_t height) {
  for (size_t i = 2; i + 9 < jpeg.size(); ++i) {
    if (jpeg[i] == 0xFF && (jpeg[i + 1] == 0xC0 || jpeg[i + 1] == 0xC2)) {
      jpeg[i + 5] = height >> 8;
      jpeg[i + 6] = height & 0xFF;
      jpeg[i + 7] = width >> 8;
      jpeg[i + 8] = width & 0xFF;
      return;
    }
  }
  FAIL() << "no SOF";
}

TEST(JpegErrors, HugeHeaderIsRejectedBeforeAllocating) {
  Bytes jpeg = EncodeJpeg({.width = 32, .height = 32, .progressive = true});
  SetJpegSize(jpeg, 65000, 65000);
  Decoder decoder;
  Image image;
  auto decoded = decoder.Decode(AsBytes(jpeg), {}, image);
  ASSERT_FALSE(decoded.has_value());
  EXPECT_EQ(decoded.error().code(), StatusCode::kResourceExhausted) << decoded.error().ToString();
  EXPECT_EQ(image.width(), 0u);  // never sized
  auto info = ReadImageInfo(AsBytes(jpeg));
  ASSERT_FALSE(info.has_value());
  EXPECT_EQ(info.error().code(), StatusCode::kResourceExhausted);

  const Bytes small = EncodeJpeg({.width = 160, .height = 120});
  DecodeRequest request;
  request.limits.max_dimension = 150;
  EXPECT_EQ(DecodeError(decoder, small, request).code(), StatusCode::kResourceExhausted);
  request.limits = {};
  request.limits.max_pixels = 160 * 120 - 1;
  EXPECT_EQ(DecodeError(decoder, small, request).code(), StatusCode::kResourceExhausted);
  request.limits.max_pixels = 160 * 120;
  EXPECT_TRUE(DecodeError(decoder, small, request).ok());
}

TEST(JpegErrors, TooManyScansIsAnError) {
  const Bytes jpeg = EncodeJpeg({.width = 64, .height = 64, .progressive = true});  // 10 scans
  Decoder decoder;
  DecodeRequest request;
  request.limits.max_scans = 9;
  const Status status = DecodeError(decoder, jpeg, request);
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted) << status.ToString();
  EXPECT_NE(status.message().find("scans"), std::string::npos);
  request.limits.max_scans = 10;
  EXPECT_TRUE(DecodeError(decoder, jpeg, request).ok());

  // 379 scans: over the default limit of 256.
  const Bytes many = EncodeJpeg({.width = 32, .height = 32, .every_coefficient_scan = true});
  EXPECT_EQ(DecodeError(decoder, many).code(), StatusCode::kResourceExhausted);
  request.limits.max_scans = 379;
  Image image;
  auto decoded = decoder.Decode(AsBytes(many), request, image);
  ASSERT_TRUE(decoded.has_value()) << decoded.error().ToString();
  EXPECT_TRUE(SamePixels(image, *decoded, ReferenceJpeg(many, 8), 0, 0, 32, 32));
}

TEST(JpegErrors, TwelveBitSamplesAreUnsupported) {
  Bytes jpeg = EncodeJpeg({.width = 16, .height = 16});
  for (size_t i = 2; i + 4 < jpeg.size(); ++i) {
    if (jpeg[i] == 0xFF && jpeg[i + 1] == 0xC0) {
      jpeg[i + 4] = 12;  // precision
      break;
    }
  }
  Decoder decoder;
  EXPECT_EQ(DecodeError(decoder, jpeg).code(), StatusCode::kUnsupported);
}

TEST(DecodeErrors, NonImagesAreInvalidArgument) {
  Decoder decoder;
  for (const std::string& text : {std::string(), std::string("GIF89a"), std::string("\xFF\xD8"),
                                  std::string("<html>"), std::string(1000, '\0')}) {
    const Bytes bytes(text.begin(), text.end());
    const Status status = DecodeError(decoder, bytes);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find("not a JPEG or PNG image"), std::string::npos);
    EXPECT_EQ(ReadImageInfo(AsBytes(bytes)).error().code(), StatusCode::kInvalidArgument);
  }
  // The magic alone is not enough.
  Pcg32 rng(11);
  for (int i = 0; i < 200; ++i) {
    Bytes bytes = {0xFF, 0xD8, 0xFF};
    if (i % 2) bytes = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
    for (int j = 0; j < 300; ++j) bytes.push_back(static_cast<uint8_t>(rng.Below(256)));
    EXPECT_FALSE(DecodeError(decoder, bytes).ok());
  }
}

// ---------------------------------------------------------------------------------------------
// PNG

struct PngFile {
  Bytes bytes;
  std::vector<uint8_t> rgb;  // what PIL's convert("RGB") gives (16-bit gray: the high byte)
};

void AppendToVector(png_structp png, png_bytep data, size_t size) {
  auto* out = static_cast<Bytes*>(png_get_io_ptr(png));
  out->insert(out->end(), data, data + size);
}

// A width x height PNG of random samples with the given colour type and bit depth.
PngFile MakePng(uint32_t width, uint32_t height, int color_type, int bit_depth,
                bool transparency = false, bool interlace = false, double gamma = 0,
                uint64_t seed = 5) {
  Pcg32 rng(seed);
  const int channels = color_type == PNG_COLOR_TYPE_GRAY         ? 1
                       : color_type == PNG_COLOR_TYPE_GRAY_ALPHA ? 2
                       : color_type == PNG_COLOR_TYPE_RGB        ? 3
                       : color_type == PNG_COLOR_TYPE_RGBA       ? 4
                                                                 : 1;
  const uint32_t max = (1u << bit_depth) - 1;
  std::vector<png_color> palette;
  if (color_type == PNG_COLOR_TYPE_PALETTE) {
    palette.resize(max + 1);
    for (png_color& c : palette) {
      c = {uint8_t(rng.Below(256)), uint8_t(rng.Below(256)), uint8_t(rng.Below(256))};
    }
  }
  std::vector<uint32_t> samples(size_t{width} * height * channels);
  for (uint32_t& s : samples) s = static_cast<uint32_t>(rng.Below(max + 1));

  PngFile file;
  file.rgb.resize(size_t{width} * height * 3);
  for (size_t i = 0; i < size_t{width} * height; ++i) {
    const uint32_t* s = &samples[i * channels];
    uint8_t* rgb = &file.rgb[i * 3];
    if (color_type == PNG_COLOR_TYPE_PALETTE) {
      rgb[0] = palette[s[0]].red, rgb[1] = palette[s[0]].green, rgb[2] = palette[s[0]].blue;
    } else if (bit_depth == 16) {
      for (int c = 0; c < 3; ++c) rgb[c] = static_cast<uint8_t>(s[channels >= 3 ? c : 0] >> 8);
    } else {
      for (int c = 0; c < 3; ++c) {
        rgb[c] = static_cast<uint8_t>(s[channels >= 3 ? c : 0] * 255 / max);
      }
    }
  }

  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  png_set_write_fn(png, &file.bytes, AppendToVector, nullptr);
  png_set_IHDR(png, info, width, height, bit_depth, color_type,
               interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  if (!palette.empty()) png_set_PLTE(png, info, palette.data(), static_cast<int>(palette.size()));
  if (gamma > 0) png_set_gAMA(png, info, gamma);
  std::vector<png_byte> alphas;
  png_color_16 trans_value{};
  if (transparency && color_type == PNG_COLOR_TYPE_PALETTE) {
    for (size_t i = 0; i < palette.size(); ++i) {
      alphas.push_back(static_cast<png_byte>(rng.Below(256)));
    }
    png_set_tRNS(png, info, alphas.data(), static_cast<int>(alphas.size()), nullptr);
  } else if (transparency) {
    trans_value.gray = trans_value.red = static_cast<png_uint_16>(samples[0]);
    trans_value.green = static_cast<png_uint_16>(samples[channels > 1 ? 1 : 0]);
    trans_value.blue = static_cast<png_uint_16>(samples[channels > 2 ? 2 : 0]);
    png_set_tRNS(png, info, nullptr, 0, &trans_value);
  }
  png_write_info(png, info);
  // Pack each row at the bit depth, most significant bits first, 16-bit big-endian.
  const size_t row_bytes = (size_t{width} * channels * bit_depth + 7) / 8;
  std::vector<std::vector<png_byte>> rows(height, std::vector<png_byte>(row_bytes));
  for (uint32_t y = 0; y < height; ++y) {
    for (size_t i = 0; i < size_t{width} * channels; ++i) {
      const uint32_t s = samples[size_t{y} * width * channels + i];
      if (bit_depth == 16) {
        rows[y][2 * i] = static_cast<png_byte>(s >> 8);
        rows[y][2 * i + 1] = static_cast<png_byte>(s);
      } else {
        const size_t bit = i * bit_depth;
        rows[y][bit / 8] |= static_cast<png_byte>(s << (8 - bit_depth - bit % 8));
      }
    }
  }
  std::vector<png_bytep> pointers;
  pointers.reserve(rows.size());
  for (auto& row : rows) pointers.push_back(row.data());
  png_write_image(png, pointers.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return file;
}

::testing::AssertionResult SameRgb(const Image& image, const PngFile& file) {
  for (size_t i = 0; i < file.rgb.size(); ++i) {
    if (image.data()[i] != file.rgb[i]) {
      return ::testing::AssertionFailure()
             << "byte " << i << ": got " << int(image.data()[i]) << " want " << int(file.rgb[i]);
    }
  }
  return ::testing::AssertionSuccess();
}

TEST(Png, DecodesEveryColourTypeLikePil) {
  struct Case {
    const char* name;
    int color_type, bit_depth;
    bool transparency = false, interlace = false;
    uint32_t components;
    double gamma = 0;  // a gAMA chunk; PIL ignores it, and so must we
  };
  const Case cases[] = {
      {"rgb8", PNG_COLOR_TYPE_RGB, 8, false, false, 3},
      {"rgb8_interlaced", PNG_COLOR_TYPE_RGB, 8, false, true, 3},
      {"rgb8_trns", PNG_COLOR_TYPE_RGB, 8, true, false, 4},
      {"rgba8", PNG_COLOR_TYPE_RGBA, 8, false, false, 4},
      {"gray8", PNG_COLOR_TYPE_GRAY, 8, false, false, 1},
      {"gray1", PNG_COLOR_TYPE_GRAY, 1, false, false, 1},
      {"gray2", PNG_COLOR_TYPE_GRAY, 2, false, false, 1},
      {"gray4_interlaced", PNG_COLOR_TYPE_GRAY, 4, false, true, 1},
      {"gray8_trns", PNG_COLOR_TYPE_GRAY, 8, true, false, 2},
      {"gray_alpha8", PNG_COLOR_TYPE_GRAY_ALPHA, 8, false, false, 2},
      {"palette8", PNG_COLOR_TYPE_PALETTE, 8, false, false, 3},
      {"palette4_trns", PNG_COLOR_TYPE_PALETTE, 4, true, false, 4},
      {"palette1", PNG_COLOR_TYPE_PALETTE, 1, false, false, 3},
      {"rgb16", PNG_COLOR_TYPE_RGB, 16, false, false, 3},
      {"gray16", PNG_COLOR_TYPE_GRAY, 16, false, false, 1},
      {"rgba16_interlaced", PNG_COLOR_TYPE_RGBA, 16, false, true, 4},
      {"rgb8_linear_gamma", PNG_COLOR_TYPE_RGB, 8, false, false, 3, 1.0},
      {"gray8_mac_gamma", PNG_COLOR_TYPE_GRAY, 8, false, false, 1, 1 / 1.8},
  };
  Decoder decoder;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const PngFile file =
        MakePng(37, 23, c.color_type, c.bit_depth, c.transparency, c.interlace, c.gamma);
    Image image;
    DecodeRequest request;
    request.region = {5, 5, 10, 10};  // PNG always decodes whole
    request.min_width = request.min_height = 2;
    auto decoded = decoder.Decode(AsBytes(file.bytes), request, image);
    ASSERT_TRUE(decoded.has_value()) << decoded.error().ToString();
    EXPECT_EQ(decoded->info.format, ImageFormat::kPng);
    EXPECT_EQ(decoded->info.components, c.components);
    EXPECT_EQ(decoded->scale_x, 1.0);
    EXPECT_EQ(decoded->origin_x, 0.0);
    EXPECT_EQ(decoded->origin_y, 0.0);
    ASSERT_EQ(image.width(), 37u);
    ASSERT_EQ(image.height(), 23u);
    EXPECT_TRUE(SameRgb(image, file));
    auto info = ReadImageInfo(AsBytes(file.bytes));
    ASSERT_TRUE(info.has_value());
    EXPECT_EQ(info->width, 37u);
    EXPECT_EQ(info->components, c.components);
  }
}

// Writes a chunk's CRC (PNG's CRC-32) after patching it.
void FixPngCrc(Bytes& png, size_t chunk_start) {
  const uint32_t length = (uint32_t{png[chunk_start]} << 24) | (png[chunk_start + 1] << 16) |
                          (png[chunk_start + 2] << 8) | png[chunk_start + 3];
  uint32_t crc = 0xFFFFFFFF;
  for (size_t i = chunk_start + 4; i < chunk_start + 8 + length; ++i) {
    crc ^= png[i];
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320 & (0u - (crc & 1)));
  }
  crc ^= 0xFFFFFFFF;
  for (int k = 0; k < 4; ++k) {
    png[chunk_start + 8 + length + k] = static_cast<uint8_t>(crc >> (24 - 8 * k));
  }
}

TEST(PngErrors, HugeHeaderIsRejectedBeforeAllocating) {
  PngFile file = MakePng(16, 16, PNG_COLOR_TYPE_RGB, 8);
  Bytes& png = file.bytes;
  // IHDR is the first chunk, at byte 8: length, "IHDR", width, height.
  for (int k = 0; k < 4; ++k) png[16 + k] = static_cast<uint8_t>(100000u >> (24 - 8 * k));
  for (int k = 0; k < 4; ++k) png[20 + k] = static_cast<uint8_t>(100000u >> (24 - 8 * k));
  FixPngCrc(png, 8);
  Decoder decoder;
  Image image;
  auto decoded = decoder.Decode(AsBytes(png), {}, image);
  ASSERT_FALSE(decoded.has_value());
  EXPECT_EQ(decoded.error().code(), StatusCode::kResourceExhausted) << decoded.error().ToString();
  EXPECT_EQ(image.width(), 0u);
  EXPECT_EQ(ReadImageInfo(AsBytes(png)).error().code(), StatusCode::kResourceExhausted);
}

TEST(PngErrors, TruncationAndDamageAreErrors) {
  const PngFile file = MakePng(40, 30, PNG_COLOR_TYPE_RGB, 8);
  const Bytes& png = file.bytes;
  Decoder decoder;
  // Every prefix, even one that only cuts the final IEND chunk.
  for (size_t size = 0; size < png.size(); ++size) {
    const Bytes prefix(png.begin(), png.begin() + size);
    const Status status = DecodeError(decoder, prefix);
    ASSERT_FALSE(status.ok()) << "prefix of " << size << " bytes decoded";
    ASSERT_EQ(status.code(), StatusCode::kInvalidArgument) << size << ": " << status.ToString();
  }
  // A flipped byte inside IDAT fails its CRC.
  Bytes damaged = png;
  damaged[png.size() - 12 - 10] ^= 0x40;
  const Status status = DecodeError(decoder, damaged);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("png: "), std::string::npos) << status.ToString();
  // Any flipped byte: never a crash.
  for (size_t i = 0; i < png.size(); ++i) {
    Bytes copy = png;
    copy[i] ^= 0xFF;
    (void)DecodeError(decoder, copy);
  }
}

// ---------------------------------------------------------------------------------------------
// Info and reuse

TEST(ReadImageInfo, ReadsTheHeaderOnly) {
  const Bytes jpeg = EncodeJpeg({.width = 33, .height = 21, .components = 1, .progressive = true});
  auto info = ReadImageInfo(AsBytes(jpeg));
  ASSERT_TRUE(info.has_value()) << info.error().ToString();
  EXPECT_EQ(info->format, ImageFormat::kJpeg);
  EXPECT_EQ(info->width, 33u);
  EXPECT_EQ(info->height, 21u);
  EXPECT_EQ(info->components, 1u);
  EXPECT_TRUE(info->progressive);
  // The header is enough: a file cut in its scan data still has one.
  const Bytes cut(jpeg.begin(), jpeg.begin() + jpeg.size() / 2);
  EXPECT_TRUE(ReadImageInfo(AsBytes(cut)).has_value());
  DecodeLimits limits;
  limits.max_pixels = 33 * 21 - 1;
  EXPECT_EQ(ReadImageInfo(AsBytes(jpeg), limits).error().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(ReadImageInfo(AsBytes(Bytes{0xFF, 0xD8, 0xFF, 0xE0})).error().code(),
            StatusCode::kInvalidArgument);
}

// One Decoder through a mixed sequence, errors included, gives what fresh ones give.
TEST(Decoder, ReuseGivesTheSameResultsAsFreshDecoders) {
  DecodeRequest region;
  region.region = {50, 40, 60, 50};
  region.min_width = 20;
  region.min_height = 20;
  Bytes truncated = EncodeJpeg({.width = 200, .height = 100});
  truncated.resize(truncated.size() / 2);
  const std::vector<std::pair<Bytes, DecodeRequest>> inputs = {
      {EncodeJpeg({.width = 300, .height = 200}), {}},
      {truncated, {}},
      {EncodeJpeg({.width = 40, .height = 30, .progressive = true}), {}},
      {EncodeJpeg({.width = 160, .height = 120, .components = 4}), region},
      {MakePng(30, 20, PNG_COLOR_TYPE_RGBA, 8).bytes, {}},
      {EncodeJpeg({.width = 160, .height = 120}), region},
      {truncated, region},
      {EncodeJpeg({.width = 160, .height = 120, .components = 1, .h_samp = 1, .v_samp = 1}),
       region},
      {EncodeJpeg({.width = 300, .height = 200}), {}},
  };
  Decoder reused;
  Image reused_image;
  for (size_t i = 0; i < inputs.size(); ++i) {
    SCOPED_TRACE(i);
    const auto& [bytes, request] = inputs[i];
    auto a = reused.Decode(AsBytes(bytes), request, reused_image);
    Decoder fresh;
    Image fresh_image;
    auto b = fresh.Decode(AsBytes(bytes), request, fresh_image);
    ASSERT_EQ(a.has_value(), b.has_value());
    if (!a.has_value()) {
      EXPECT_EQ(a.error().ToString(), b.error().ToString());
      continue;
    }
    EXPECT_EQ(a->origin_x, b->origin_x);
    EXPECT_EQ(a->origin_y, b->origin_y);
    EXPECT_EQ(a->scale_x, b->scale_x);
    ASSERT_EQ(reused_image.width(), fresh_image.width());
    ASSERT_EQ(reused_image.height(), fresh_image.height());
    EXPECT_EQ(0, std::memcmp(reused_image.data(), fresh_image.data(),
                             fresh_image.stride() * fresh_image.height()));
  }
}

}  // namespace
}  // namespace stoker::decode
