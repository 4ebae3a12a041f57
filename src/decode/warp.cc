// Rotation and zoom about the centre (see warp.h), bit-exact with what torchvision does to a PIL
// image: the inverse matrix comes from the same double expressions as Pillow's Image.rotate
// (zoom 1: RandomRotation) or torchvision's _get_inverse_affine_matrix (otherwise:
// RandomAffine), and each output pixel is sampled the way Pillow's Image.transform(AFFINE)
// samples it: nearest in 16.16 fixed point stepped across the row, bilinear and bicubic in
// double arithmetic truncated to 8 bits. Thread-safety: a pure function.
#include "decode/warp.h"

#include <charconv>
#include <cmath>
#include <cstring>

#include "common/parse_number.h"
#include "decode/cpu_features.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define STOKER_WARP_AVX2 1
#endif

namespace stoker::decode {
namespace {

// Python's math.radians multiplies by this constant.
constexpr double kDegreesToRadians = M_PI / 180.0;

// Python's round(v, 15): the double nearest to v's correctly rounded 15-decimal form.
// to_chars rounds exactly and ParseDouble reads back exactly, as Python's dtoa does, and unlike
// printf or a plain strtod neither depends on the locale.
double RoundTo15Decimals(double v) {
  char text[400];  // fixed notation of any double in [-1, 1] with 15 decimals fits easily
  const auto printed = std::to_chars(text, text + sizeof text, v, std::chars_format::fixed, 15);
  return ParseDouble(std::string_view(text, printed.ptr)).value_or(v);
}

// Python's float modulo: the result has the divisor's sign.
double PythonModulo(double v, double m) {
  double r = std::fmod(v, m);
  if (r != 0 && ((r < 0) != (m < 0))) r += m;
  return r == 0 ? std::copysign(0.0, m) : r;
}

// The inverse affine map (output pixel centre -> source position):
// x_in = m[0] * x + m[1] * y + m[2], y_in = m[3] * x + m[4] * y + m[5].
struct Matrix {
  double m[6];
};

Matrix InverseMatrix(const WarpParams& params, uint32_t width, uint32_t height) {
  const double cx = width * 0.5, cy = height * 0.5;
  Matrix r;
  double* m = r.m;
  if (params.zoom == 1) {
    // Image.rotate(angle, center=None): the matrix rounded to 15 decimals, as there.
    const double theta = -(PythonModulo(params.angle_degrees, 360.0) * kDegreesToRadians);
    const double c = RoundTo15Decimals(std::cos(theta)), s = RoundTo15Decimals(std::sin(theta));
    m[0] = c;
    m[1] = s;
    m[3] = RoundTo15Decimals(-std::sin(theta));
    m[4] = c;
    m[2] = m[0] * -cx + m[1] * -cy + 0.0 + cx;
    m[5] = m[3] * -cx + m[4] * -cy + 0.0 + cy;
  } else {
    // _get_inverse_affine_matrix(center, angle, translate=0, scale=zoom, shear=0), whose angle
    // turns clockwise; with zero shear its terms reduce exactly to these.
    const double rot = -params.angle_degrees * kDegreesToRadians;
    const double cos_rot = std::cos(rot), sin_rot = std::sin(rot);
    m[0] = cos_rot / params.zoom;
    m[1] = sin_rot / params.zoom;
    m[3] = -sin_rot / params.zoom;
    m[4] = cos_rot / params.zoom;
    m[2] = 0.0 + (m[0] * -cx + m[1] * -cy) + cx;
    m[5] = 0.0 + (m[3] * -cx + m[4] * -cy) + cy;
  }
  return r;
}

void PutFill(uint8_t* out, const WarpParams& params) { std::memcpy(out, params.fill, 3); }

void FillAll(const WarpParams& params, MutableImageView dst) {
  for (uint32_t y = 0; y < dst.height; ++y) {
    for (uint32_t x = 0; x < dst.width; ++x) PutFill(dst.row(y) + x * 3, params);
  }
}

// Pillow's floor for doubles.
int Floor(double v) { return v < 0.0 ? static_cast<int>(std::floor(v)) : static_cast<int>(v); }

// Nearest when the matrix has no rotation (ImagingScaleAffine): positions accumulate in double.
void NearestScale(ImageView src, const double* m, const WarpParams& params, MutableImageView dst) {
  double yo = m[5] + m[4] * 0.5;
  for (uint32_t y = 0; y < dst.height; ++y, yo += m[4]) {
    uint8_t* out = dst.row(y);
    const bool row_inside = yo >= 0 && yo < src.height;  // COORD, without casting huge values
    const uint8_t* in = row_inside ? src.row(static_cast<uint32_t>(yo)) : nullptr;
    double xo = m[2] + m[0] * 0.5;
    for (uint32_t x = 0; x < dst.width; ++x, xo += m[0], out += 3) {
      if (in && xo >= 0 && xo < src.width) {
        std::memcpy(out, in + static_cast<uint32_t>(xo) * 3, 3);
      } else {
        PutFill(out, params);
      }
    }
  }
}

// Whether Pillow's 16.16 fixed-point path applies: the map of every output corner fits.
bool FitsFixedPoint(const double* m, int w, int h) {
  const auto fits = [m](int x, int y) {
    return std::fabs(x * m[0] + y * m[1] + m[2]) < 32768.0 &&
           std::fabs(x * m[3] + y * m[4] + m[5]) < 32768.0;
  };
  return fits(0, 0) && fits(w, h) && fits(0, h) && fits(w, 0);
}

// Moves 3-byte pixels 4 bytes at a time where that is safe: the 4th byte read exists (it is
// not past the source's last pixel) and the 4th byte written lands on the next output pixel,
// which is written after it.
class PixelMover {
 public:
  PixelMover(ImageView src, const WarpParams& params)
      : src_(src), readable_(size_t(src.height - 1) * src.stride + size_t(src.width) * 3) {
    std::memcpy(fill_, params.fill, 3);
    fill_[3] = params.fill[0];
  }
  // Output pixel `out` (not the last of its row) from source pixel (x, y), or the fill if null.
  void Wide(uint8_t* out, const uint8_t* in) const {
    if (in == nullptr) {
      std::memcpy(out, fill_, 4);
    } else if (size_t(in - src_.data) + 4 <= readable_) {
      std::memcpy(out, in, 4);
    } else {
      std::memcpy(out, in, 3);
    }
  }
  void Narrow(uint8_t* out, const uint8_t* in) const { std::memcpy(out, in ? in : fill_, 3); }

 private:
  ImageView src_;
  size_t readable_;
  uint8_t fill_[4];
};

// Nearest with rotation (Pillow's affine_fixed): positions in 16.16 fixed point, stepped by
// the rounded matrix entries, so that rounding happens where Pillow's does.
void NearestFixed(ImageView src, const double* m, const WarpParams& params, MutableImageView dst) {
  const auto fix = [](double v) { return Floor(v * 65536.0 + 0.5); };
  const int32_t a0 = fix(m[0]), a1 = fix(m[1]), a3 = fix(m[3]), a4 = fix(m[4]);
  int32_t row_x = fix(m[2] + m[0] * 0.5 + m[1] * 0.5);
  int32_t row_y = fix(m[5] + m[3] * 0.5 + m[4] * 0.5);
  const uint32_t w = src.width, h = src.height;
  const PixelMover mover(src, params);
  for (uint32_t y = 0; y < dst.height; ++y, row_x += a1, row_y += a4) {
    uint8_t* out = dst.row(y);
    int32_t xx = row_x, yy = row_y;
    const auto source = [&]() -> const uint8_t* {
      // Arithmetic shifts floor; a negative position wraps to a huge unsigned one.
      const auto xin = static_cast<uint32_t>(xx >> 16), yin = static_cast<uint32_t>(yy >> 16);
      return xin < w && yin < h ? src.row(yin) + xin * 3 : nullptr;
    };
    for (uint32_t x = 0; x + 1 < dst.width; ++x, xx += a0, yy += a3, out += 3) {
      mover.Wide(out, source());
    }
    mover.Narrow(out, source());
  }
}

// Nearest with rotation where fixed point would overflow (Pillow's double fallback).
void NearestDouble(ImageView src, const double* m, const WarpParams& params, MutableImageView dst) {
  double row_x = m[2] + m[1] * 0.5 + m[0] * 0.5;
  double row_y = m[5] + m[4] * 0.5 + m[3] * 0.5;
  for (uint32_t y = 0; y < dst.height; ++y, row_x += m[1], row_y += m[4]) {
    uint8_t* out = dst.row(y);
    double xx = row_x, yy = row_y;
    for (uint32_t x = 0; x < dst.width; ++x, xx += m[0], yy += m[3], out += 3) {
      if (xx >= 0 && xx < src.width && yy >= 0 && yy < src.height) {
        std::memcpy(out, src.row(static_cast<uint32_t>(yy)) + static_cast<uint32_t>(xx) * 3, 3);
      } else {
        PutFill(out, params);
      }
    }
  }
}

// Pillow's affine sampling (bilinear_filter32RGB, bicubic_filter32RGB) at every output pixel
// centre: a source position outside the image gets the fill; inside, `sample(out, sx, sy, ix,
// iy)` gets it in pixel-centre coordinates (shifted by -0.5) with its floor (ix, iy).
template <typename Sample>
__attribute__((always_inline)) inline void SampleAtCentres(ImageView src, const double* m,
                                                           const WarpParams& params,
                                                           MutableImageView dst, Sample sample) {
  const int w = int(src.width), h = int(src.height);
  for (uint32_t y = 0; y < dst.height; ++y) {
    uint8_t* out = dst.row(y);
    const double yc = y + 0.5;
    for (uint32_t x = 0; x < dst.width; ++x, out += 3) {
      const double xc = x + 0.5;
      double sx = m[0] * xc + m[1] * yc + m[2];
      double sy = m[3] * xc + m[4] * yc + m[5];
      if (!(sx >= 0.0 && sx < w && sy >= 0.0 && sy < h)) {
        PutFill(out, params);
        continue;
      }
      sx -= 0.5;
      sy -= 0.5;
      sample(out, sx, sy, Floor(sx), Floor(sy));
    }
  }
}

// Bilinear: neighbours past the edge repeat the edge pixel. `Lerp3` interpolates the three
// channels of two rows' pixels at byte offsets x0, x1 (bottom null: only the top row), as
// Pillow does per channel: in double, truncated to 8 bits.
template <typename Lerp3>
__attribute__((always_inline)) inline void BilinearBody(ImageView src, const double* m,
                                                        const WarpParams& params,
                                                        MutableImageView dst, Lerp3 lerp3) {
  const int w = int(src.width), h = int(src.height);
  SampleAtCentres(src, m, params, dst,
                  [&](uint8_t* out, double sx, double sy, int ix, int iy)
                      __attribute__((always_inline)) {
                        const int x0 = (ix < 0 ? 0 : ix) * 3;  // ix <= w - 1 always
                        const int x1 = (ix + 1 < w ? ix + 1 : w - 1) * 3;
                        const uint8_t* top = src.row(iy < 0 ? 0 : iy);
                        const uint8_t* bottom = iy + 1 < h ? src.row(iy + 1) : nullptr;
                        lerp3(top, bottom, x0, x1, sx - ix, sy - iy, out);
                      });
}

void BilinearScalar(ImageView src, const double* m, const WarpParams& params,
                    MutableImageView dst) {
  BilinearBody(src, m, params, dst,
               [](const uint8_t* top, const uint8_t* bottom, int x0, int x1, double dx, double dy,
                  uint8_t* out) {
                 for (int c = 0; c < 3; ++c) {
                   const double upper = top[x0 + c] + (top[x1 + c] - top[x0 + c]) * dx;
                   const double lower =
                       bottom ? bottom[x0 + c] + (bottom[x1 + c] - bottom[x0 + c]) * dx : upper;
                   out[c] = static_cast<uint8_t>(upper + (lower - upper) * dy);
                 }
               });
}

#ifdef STOKER_WARP_AVX2
// A pixel's three bytes as int32 lanes r, g, b, 0, never reading past them. (Assembled in a
// register: a 3-byte memcpy went through the stack and stalled on store forwarding.)
__attribute__((target("avx2"), always_inline)) inline __m128i LoadPixel(const uint8_t* p) {
  const uint32_t v = p[0] | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16;
  return _mm_cvtepu8_epi32(_mm_cvtsi32_si128(static_cast<int>(v)));
}

// The three channels in one register of four doubles: each lane does the scalar code's exact
// operations (integer difference, then double multiply and add), so results are identical.
__attribute__((target("avx2"))) void BilinearAvx2(ImageView src, const double* m,
                                                  const WarpParams& params, MutableImageView dst) {
  BilinearBody(
      src, m, params, dst,
      [](const uint8_t* top, const uint8_t* bottom, int x0, int x1, double dx, double dy,
         uint8_t* out) __attribute__((target("avx2"))) {
        const __m256d vdx = _mm256_set1_pd(dx);
        const auto row = [&](const uint8_t* r) __attribute__((target("avx2"))) {
          const __m128i a = LoadPixel(r + x0), b = LoadPixel(r + x1);
          return _mm256_add_pd(_mm256_cvtepi32_pd(a),
                               _mm256_mul_pd(_mm256_cvtepi32_pd(_mm_sub_epi32(b, a)), vdx));
        };
        const __m256d upper = row(top);
        const __m256d lower = bottom ? row(bottom) : upper;
        const __m256d value =
            _mm256_add_pd(upper, _mm256_mul_pd(_mm256_sub_pd(lower, upper), _mm256_set1_pd(dy)));
        const __m128i ints = _mm256_cvttpd_epi32(value);  // truncation, as the cast
        const __m128i bytes = _mm_packus_epi16(_mm_packus_epi32(ints, ints), ints);
        const auto packed = static_cast<uint32_t>(_mm_cvtsi128_si32(bytes));
        std::memcpy(out, &packed, 3);
      });
}
#endif

void Bilinear(ImageView src, const double* m, const WarpParams& params, MutableImageView dst) {
#ifdef STOKER_WARP_AVX2
  if (CpuHasAvx2()) {
    BilinearAvx2(src, m, params, dst);
    return;
  }
#endif
  BilinearScalar(src, m, params, dst);
}

// One step of Pillow's cubic convolution (a = -0.5) through four samples at offset d in [0, 1).
// Called with ints for the row pass (the differences stay exact integers, as in Pillow) and
// with doubles for the column pass.
template <typename T>
double Cubic(T v1, T v2, T v3, T v4, double d) {
  const double p1 = v2;
  const double p2 = -v1 + v3;
  const double p3 = 2 * (v1 - v2) + v3 - v4;
  const double p4 = -v1 + v2 - v3 + v4;
  return p1 + d * (p2 + d * (p3 + d * p4));
}

// Pillow's bicubic_filter32RGB: as Bilinear, over a 4x4 neighbourhood, clamped to 0..255.
void Bicubic(ImageView src, const double* m, const WarpParams& params, MutableImageView dst) {
  const int w = int(src.width), h = int(src.height);
  const auto clamp_x = [w](int x) { return (x < 0 ? 0 : x < w ? x : w - 1) * 3; };
  SampleAtCentres(src, m, params, dst, [&](uint8_t* out, double sx, double sy, int ix, int iy) {
    const double dx = sx - ix, dy = sy - iy;
    const int cols[4] = {clamp_x(ix - 1), clamp_x(ix), clamp_x(ix + 1), clamp_x(ix + 2)};
    // The first row is clamped into the image; a later row past the edge repeats the one
    // before it.
    const uint8_t* rows[4];
    rows[0] = src.row(iy - 1 < 0 ? 0 : iy - 1 < h ? iy - 1 : h - 1);
    for (int k = 1; k < 4; ++k) {
      const int r = iy - 1 + k;
      rows[k] = r >= 0 && r < h ? src.row(r) : nullptr;
    }
    for (int c = 0; c < 3; ++c) {
      const auto row_value = [&](const uint8_t* row) {
        return Cubic<int>(row[cols[0] + c], row[cols[1] + c], row[cols[2] + c], row[cols[3] + c],
                          dx);
      };
      double v[4];
      v[0] = row_value(rows[0]);
      for (int k = 1; k < 4; ++k) v[k] = rows[k] ? row_value(rows[k]) : v[k - 1];
      const double value = Cubic<double>(v[0], v[1], v[2], v[3], dy);
      out[c] = value <= 0.0 ? 0 : value >= 255.0 ? 255 : static_cast<uint8_t>(value);
    }
  });
}

}  // namespace

void Warp(ImageView src, const WarpParams& params, MutableImageView dst) {
  if (dst.width == 0 || dst.height == 0) return;
  // Nothing maps into an empty source, and a degenerate zoom or angle maps nowhere sensible.
  if (src.width == 0 || src.height == 0 || !(params.zoom > 0) || !std::isfinite(params.zoom) ||
      !std::isfinite(params.angle_degrees)) {
    FillAll(params, dst);
    return;
  }
  const Matrix matrix = InverseMatrix(params, src.width, src.height);
  const double* m = matrix.m;
  if (params.interpolation == Interpolation::kBilinear) {
    Bilinear(src, m, params, dst);
  } else if (params.interpolation == Interpolation::kBicubic) {
    Bicubic(src, m, params, dst);
  } else if (m[1] == 0 && m[3] == 0) {
    NearestScale(src, m, params, dst);
  } else if (FitsFixedPoint(m, int(dst.width), int(dst.height))) {
    NearestFixed(src, m, params, dst);
  } else {
    NearestDouble(src, m, params, dst);
  }
}

}  // namespace stoker::decode
