// Rotation and zoom about the image centre, as torchvision's RandomRotation / RandomAffine do
// for PIL images (inverse mapping of output pixel centres, points outside the source get
// `fill`), into an output of the same size. Thread-safety: a pure function.
#pragma once

#include "decode/image.h"
#include "decode/resize.h"

namespace stoker::decode {

struct WarpParams {
  double angle_degrees = 0;  // counter-clockwise, as torchvision
  double zoom = 1;           // > 1 enlarges the content (RandomAffine's scale)
  uint8_t fill[3] = {0, 0, 0};
  Interpolation interpolation = Interpolation::kNearest;  // torchvision's default; or kBilinear
};

// dst must have the same size as src and not alias it.
void Warp(ImageView src, const WarpParams& params, MutableImageView dst);

}  // namespace stoker::decode
