// Pixel buffers shared by the decoders and the transforms.
//
// Everything the decode module hands around is 8-bit RGB, interleaved (HWC), rows `stride`
// bytes apart: the decoders convert grayscale, CMYK/YCCK and palette/alpha images to it, so
// transforms deal with one layout. Thread-safety: plain values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace stoker::decode {

inline constexpr uint32_t kChannels = 3;  // RGB

enum class ImageFormat : uint8_t { kUnknown = 0, kJpeg, kPng };

// A read-only view of RGB pixels.
struct ImageView {
  const uint8_t* data = nullptr;
  uint32_t width = 0, height = 0;
  size_t stride = 0;  // bytes from one row to the next (>= width * 3)
  const uint8_t* row(uint32_t y) const { return data + y * stride; }
};

// A writable view of RGB pixels.
struct MutableImageView {
  uint8_t* data = nullptr;
  uint32_t width = 0, height = 0;
  size_t stride = 0;
  uint8_t* row(uint32_t y) const { return data + y * stride; }
  ImageView view() const { return {data, width, height, stride}; }
};

// An owned RGB image, rows packed (stride = width * 3). Reused between samples by the thread
// that owns it: Reset() keeps the allocation when the new image fits.
class Image {
 public:
  void Reset(uint32_t width, uint32_t height) {
    width_ = width;
    height_ = height;
    const size_t bytes = size_t{width} * height * kChannels;
    if (pixels_.size() < bytes) pixels_.resize(bytes);
  }
  uint32_t width() const { return width_; }
  uint32_t height() const { return height_; }
  size_t stride() const { return size_t{width_} * kChannels; }
  uint8_t* data() { return pixels_.data(); }
  const uint8_t* data() const { return pixels_.data(); }
  ImageView view() const { return {pixels_.data(), width_, height_, stride()}; }
  MutableImageView mutable_view() { return {pixels_.data(), width_, height_, stride()}; }

 private:
  std::vector<uint8_t> pixels_;
  uint32_t width_ = 0, height_ = 0;
};

// A rectangle in pixel coordinates of some image, as floats: crops computed by augmentations
// are integers in source pixels, but after DCT-domain scaling they land between pixels.
struct Box {
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;  // left, top, right, bottom (exclusive edges)
  double width() const { return x1 - x0; }
  double height() const { return y1 - y0; }
};

}  // namespace stoker::decode
