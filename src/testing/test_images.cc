#include "testing/test_images.h"

#include <cmath>
#include <cstdio>
#include <stdexcept>

#include <jpeglib.h>
#include <png.h>

#include "common/random.h"

namespace stoker::test {

TestImage Noise(uint32_t w, uint32_t h, uint64_t seed, size_t padding) {
  TestImage image(w, h, padding);
  Pcg32 rng(seed);
  for (uint32_t y = 0; y < h; ++y) {
    for (uint32_t x = 0; x < w * 3; ++x) image.at(0, y)[x] = uint8_t(rng.Next());
  }
  return image;
}

std::vector<uint8_t> PhotoLikePixels(uint32_t width, uint32_t height, uint64_t seed) {
  Pcg32 rng(seed);
  const double fx = 1 + rng.NextDouble() * 6, fy = 1 + rng.NextDouble() * 6;
  const double edge = rng.NextDouble();
  std::vector<uint8_t> px(size_t{width} * height * 3);
  for (uint32_t y = 0; y < height; ++y) {
    for (uint32_t x = 0; x < width; ++x) {
      const double u = double(x) / width, v = double(y) / height;
      const bool right_of_edge = u + 0.3 * v > edge;
      for (int c = 0; c < 3; ++c) {
        double value = 128 + 90 * std::sin(fx * u * (c + 1) + fy * v) + (right_of_edge ? 30 : -30);
        value += double(rng.Below(41)) - 20;  // texture
        px[(size_t{y} * width + x) * 3 + c] =
            static_cast<uint8_t>(std::fmin(255.0, std::fmax(0.0, value)));
      }
    }
  }
  return px;
}

std::string EncodeJpeg(const std::vector<uint8_t>& rgb, uint32_t width, uint32_t height,
                       const JpegOptions& options) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr jerr;
  cinfo.err = jpeg_std_error(&jerr);  // test input is always valid: exit() on error is fine
  jpeg_create_compress(&cinfo);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buffer, &size);
  cinfo.image_width = width;
  cinfo.image_height = height;
  cinfo.input_components = options.grayscale ? 1 : 3;
  cinfo.in_color_space = options.grayscale ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, options.quality, TRUE);
  if (!options.grayscale && !options.subsample_420) {
    cinfo.comp_info[0].h_samp_factor = cinfo.comp_info[0].v_samp_factor = 1;
  }
  if (options.progressive) jpeg_simple_progression(&cinfo);
  cinfo.restart_in_rows = static_cast<int>(options.restart_rows);
  jpeg_start_compress(&cinfo, TRUE);
  std::vector<uint8_t> row(size_t{width} * 3);
  while (cinfo.next_scanline < height) {
    const uint8_t* src = rgb.data() + size_t{cinfo.next_scanline} * width * 3;
    if (options.grayscale) {
      for (uint32_t x = 0; x < width; ++x) row[x] = src[x * 3 + 1];
    } else {
      std::copy(src, src + size_t{width} * 3, row.begin());
    }
    JSAMPROW rows[1] = {row.data()};
    jpeg_write_scanlines(&cinfo, rows, 1);
  }
  jpeg_finish_compress(&cinfo);
  std::string out(reinterpret_cast<const char*>(buffer), size);
  jpeg_destroy_compress(&cinfo);
  std::free(buffer);
  return out;
}

std::string EncodePng(const std::vector<uint8_t>& rgb, uint32_t width, uint32_t height) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = width;
  image.height = height;
  image.format = PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  if (!png_image_write_to_memory(&image, nullptr, &size, 0, rgb.data(), 0, nullptr)) {
    throw std::runtime_error(image.message);
  }
  std::string out(size, '\0');
  if (!png_image_write_to_memory(&image, out.data(), &size, 0, rgb.data(), 0, nullptr)) {
    throw std::runtime_error(image.message);
  }
  out.resize(size);
  return out;
}

}  // namespace stoker::test
