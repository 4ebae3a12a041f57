// Writes a transformed image into its slot of a batch: optional horizontal flip, uint8 or
// normalized float32, NCHW or NHWC — one pass over the pixels.
// Thread-safety: a pure function (slots of one batch are written by different threads).
#pragma once

#include <cstdint>

#include "decode/image.h"

namespace stoker::decode {

enum class DType : uint8_t { kUint8, kFloat32 };
enum class Layout : uint8_t { kNCHW, kNHWC };

struct OutputSpec {
  uint32_t width = 224, height = 224;
  DType dtype = DType::kFloat32;
  Layout layout = Layout::kNCHW;
  // float32 only: value = (pixel / 255 - mean[c]) / std[c] (torchvision ToTensor + Normalize).
  // uint8 output is written as is.
  float mean[3] = {0.485f, 0.456f, 0.406f};
  float std[3] = {0.229f, 0.224f, 0.225f};
  size_t sample_bytes() const {
    return size_t{width} * height * 3 * (dtype == DType::kFloat32 ? 4 : 1);
  }
};

// `src` must be spec.width x spec.height; `dst` points at sample_bytes() bytes.
void WriteSample(ImageView src, bool flip_horizontal, const OutputSpec& spec, void* dst);

}  // namespace stoker::decode
