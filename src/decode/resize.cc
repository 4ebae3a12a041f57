// Pillow-compatible resampling (see resize.h), bit-exact with Pillow's Image.resize.
//
// Why bit-exact rather than "close": the tests can then compare with PIL value for value, and a
// model trained with torchvision's PIL transforms sees exactly the same pixels here. Pillow's
// arithmetic is reproduced step by step: the box as float, the filter windows and weights in
// double with the same expressions, 22-bit fixed-point coefficients, two passes in Pillow's
// order with the intermediate image rounded to 8 bits, NEAREST as Pillow's affine sampling.
//
// Speed comes from doing that arithmetic wider, not differently, with AVX2 where the CPU has
// it (checked at run time; other CPUs run the scalar twins):
//  - only the source rows and columns that some window touches take part;
//  - the horizontal pass (the expensive one: interleaved RGB, a window per pixel) computes two
//    pixels per instruction, splitting each 22-bit coefficient into two 16-bit halves so that
//    vpmaddwd (16x16-bit multiplies, pairwise sums) still yields the exact 32-bit sums;
//  - the vertical pass multiplies whole rows, 32 bytes per step.
// Thread-safety: one Resizer per thread; a call reuses the Resizer's buffers.
#include "decode/resize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "decode/cpu_features.h"
#include "decode/resample_coeffs.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define STOKER_RESIZE_AVX2 1
#endif

namespace stoker::decode {
namespace {

// kPrecisionBits (resample_coeffs.h): the coefficients' fixed point. Sums start at one half, so
// that the final shift rounds.
constexpr int32_t kHalf = 1 << (kPrecisionBits - 1);

// The AVX2 kernel splits a coefficient c into hi * 2^kSplitBits + lo with 0 <= lo < 2^kSplitBits;
// both halves fit int16 for any coefficient up to 2^26, far above Pillow's (about 1.3 * 2^22).
constexpr int kSplitBits = 11;

uint8_t Clip8(int32_t sum) {
  const int32_t v = sum >> kPrecisionBits;  // arithmetic shift: floor, as Pillow's
  return static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}

// Pillow truncates doubles to int for rounding; COORD maps everything below 0 to -1.
int Coord(double v) { return v < 0.0 ? -1 : static_cast<int>(v); }

}  // namespace

// The AVX2 horizontal kernel's coefficients (see there), laid out once per call: for each pair
// of pixels and each group of four taps, four vectors (hi and lo halves x taps 01 and 23) of 16
// int16. Pixels are padded to a multiple of four with zero coefficients; `offsets` holds each
// pixel's window start in bytes.
struct Avx2Plan {
  static constexpr int kInt16PerGroup = 64;
  int groups = 0;
  std::vector<int16_t> coefs;
  std::vector<int32_t> offsets;
  // The pixels [0, n) whose loads stay within the first `readable` bytes of the row (the
  // windows move right as x grows, so they are a prefix).
  int SafePixels(int64_t readable) const {
    const int64_t last_load = int64_t{12} * (groups - 1) + 16;
    int n = 0;
    while (n < int(offsets.size()) && offsets[n] + last_load <= readable) ++n;
    return n;
  }
};

struct Resizer::Buffers {
  AxisPlan horizontal, vertical;
  Avx2Plan avx2;
  std::vector<uint8_t> temp;  // the first pass's output
  std::vector<const uint8_t*> rows;
  std::vector<int32_t> offsets;  // nearest: source byte offset per output column, -1 = outside
};

namespace {

// --- Horizontal pass -------------------------------------------------------------------------

void HorizontalPixelsScalar(const uint8_t* in, const AxisPlan& plan, int from, int to,
                            uint8_t* out) {
  for (int x = from; x < to; ++x) {
    const uint8_t* p = in + size_t(plan.start[x]) * 3;
    const int32_t* c = &plan.coefs[size_t(x) * plan.stride];
    int32_t r = kHalf, g = kHalf, b = kHalf;
    for (int k = 0; k < plan.taps[x]; ++k, p += 3) {
      r += p[0] * c[k];
      g += p[1] * c[k];
      b += p[2] * c[k];
    }
    out[x * 3 + 0] = Clip8(r);
    out[x * 3 + 1] = Clip8(g);
    out[x * 3 + 2] = Clip8(b);
  }
}

#ifdef STOKER_RESIZE_AVX2

// The AVX2 kernel computes two output pixels at once, one per 128-bit lane, four taps per group:
// a 16-byte load at the window start holds taps t..t+3 (12 bytes), and two byte shuffles turn
// it into int16 pairs (t, t+1) and (t+2, t+3) per channel, [r r g g b b 0 0], so that
// vpmaddwd with [c c c c c c 0 0] adds two taps into each channel's int32 sum.
void PlanAvx2(const AxisPlan& plan, int out_width, Avx2Plan& avx) {
  avx.groups = (plan.max_taps + 3) / 4;
  const int padded = (out_width + 3) & ~3;
  avx.offsets.resize(padded);
  avx.coefs.resize(size_t(padded / 2) * avx.groups * Avx2Plan::kInt16PerGroup);
  for (int x = 0; x < padded; ++x) {
    const int real = std::min(x, out_width - 1);
    avx.offsets[x] = plan.start[real] * 3;
    const int32_t* c = &plan.coefs[size_t(real) * plan.stride];
    const int taps = x < out_width ? plan.taps[x] : 0;
    for (int g = 0; g < avx.groups; ++g) {
      int16_t lanes[4][8] = {};  // hi 01, hi 23, lo 01, lo 23
      for (int k = 0; k < 4; ++k) {
        const int32_t coef = 4 * g + k < taps ? c[4 * g + k] : 0;
        for (int channel = 0; channel < 3; ++channel) {
          lanes[k / 2][channel * 2 + k % 2] = static_cast<int16_t>(coef >> kSplitBits);
          lanes[2 + k / 2][channel * 2 + k % 2] =
              static_cast<int16_t>(coef & ((1 << kSplitBits) - 1));
        }
      }
      int16_t* v = &avx.coefs[(size_t(x / 2) * avx.groups + g) * Avx2Plan::kInt16PerGroup];
      for (int i = 0; i < 4; ++i) std::memcpy(v + i * 16 + (x % 2) * 8, lanes[i], 16);
    }
  }
}

// The sums of one pixel pair (one pixel per 128-bit lane, [r g b 0] as int32) in kRows rows at
// once, scaled back to the pixel range. The rows share the pair's windows and coefficients, so
// these are loaded once for all of them. kGroups > 0 fixes the number of groups at compile time
// (the common narrow windows); 0 takes it from `groups`.
template <int kGroups, int kRows>
__attribute__((target("avx2"), always_inline)) inline void PairSumsAvx2(const uint8_t* const* rows,
                                                                        int32_t o0, int32_t o1,
                                                                        const int16_t* c,
                                                                        int groups, __m256i* sums) {
  if constexpr (kGroups > 0) groups = kGroups;
  constexpr char z = -1;  // vpshufb: a set high bit writes zero
  const __m256i taps01 = _mm256_setr_epi8(0, z, 3, z, 1, z, 4, z, 2, z, 5, z, z, z, z, z,  //
                                          0, z, 3, z, 1, z, 4, z, 2, z, 5, z, z, z, z, z);
  const __m256i taps23 = _mm256_setr_epi8(6, z, 9, z, 7, z, 10, z, 8, z, 11, z, z, z, z, z,  //
                                          6, z, 9, z, 7, z, 10, z, 8, z, 11, z, z, z, z, z);
  __m256i sum_hi[kRows], sum_lo[kRows];
  for (int r = 0; r < kRows; ++r) {
    sum_hi[r] = _mm256_setzero_si256();
    sum_lo[r] = _mm256_set1_epi32(kHalf);
  }
  for (int g = 0; g < groups; ++g, o0 += 12, o1 += 12, c += Avx2Plan::kInt16PerGroup) {
    const auto* cv = reinterpret_cast<const __m256i*>(c);
    const __m256i hi01 = _mm256_loadu_si256(cv + 0), hi23 = _mm256_loadu_si256(cv + 1);
    const __m256i lo01 = _mm256_loadu_si256(cv + 2), lo23 = _mm256_loadu_si256(cv + 3);
    for (int r = 0; r < kRows; ++r) {
      const __m256i pixels = _mm256_inserti128_si256(
          _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[r] + o0))),
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[r] + o1)), 1);
      const __m256i a = _mm256_shuffle_epi8(pixels, taps01);
      const __m256i b = _mm256_shuffle_epi8(pixels, taps23);
      sum_hi[r] = _mm256_add_epi32(sum_hi[r], _mm256_madd_epi16(a, hi01));
      sum_hi[r] = _mm256_add_epi32(sum_hi[r], _mm256_madd_epi16(b, hi23));
      sum_lo[r] = _mm256_add_epi32(sum_lo[r], _mm256_madd_epi16(a, lo01));
      sum_lo[r] = _mm256_add_epi32(sum_lo[r], _mm256_madd_epi16(b, lo23));
    }
  }
  for (int r = 0; r < kRows; ++r) {
    const __m256i sum = _mm256_add_epi32(_mm256_slli_epi32(sum_hi[r], kSplitBits), sum_lo[r]);
    sums[r] = _mm256_srai_epi32(sum, kPrecisionBits);
  }
}

// Four output pixels x..x+3 (windows at byte offsets o[0..3]) of each of kRows rows: 12 bytes
// per row, then 4 of garbage.
template <int kGroups, int kRows>
__attribute__((target("avx2"), always_inline)) inline void FourPixelsAvx2(
    const uint8_t* const* rows, const int32_t* o, const int16_t* c, int groups, __m128i* pixels) {
  constexpr char z = -1;
  // After the packs below, pixel x + i sits in 32-bit slot i of this order.
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 0, 0, 0, 0);
  const __m128i compact = _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, z, z, z, z);
  const size_t pair = size_t(kGroups > 0 ? kGroups : groups) * Avx2Plan::kInt16PerGroup;
  __m256i first[kRows], second[kRows];
  PairSumsAvx2<kGroups, kRows>(rows, o[0], o[1], c, groups, first);
  PairSumsAvx2<kGroups, kRows>(rows, o[2], o[3], c + pair, groups, second);
  for (int r = 0; r < kRows; ++r) {
    // Saturating packs clamp to 0..255 as Pillow's clip8 does.
    const __m256i words = _mm256_packs_epi32(first[r], second[r]);
    const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(words, words), order);
    pixels[r] = _mm_shuffle_epi8(_mm256_castsi256_si128(bytes), compact);
  }
}

// Writes pixels [0, end) of kRows rows of `out_width` pixels. Full steps store 16 bytes, the
// last four landing on pixels written after them; a step too close to the row's end goes
// through a local buffer, with the windows of pixels past `end` moved back to the last one.
template <int kGroups, int kRows>
__attribute__((target("avx2"))) void HorizontalRowsAvx2(const uint8_t* const* in,
                                                        const Avx2Plan& avx, int end, int out_width,
                                                        uint8_t* const* out) {
  const int groups = avx.groups;
  const size_t step = 2 * size_t(groups) * Avx2Plan::kInt16PerGroup;  // per four pixels
  const int16_t* c = avx.coefs.data();
  __m128i pixels[kRows];
  int x = 0;
  for (; x + 4 <= end && (x + 6) * 3 <= out_width * 3 + 2; x += 4, c += step) {
    FourPixelsAvx2<kGroups, kRows>(in, &avx.offsets[x], c, groups, pixels);
    for (int r = 0; r < kRows; ++r) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out[r] + x * 3), pixels[r]);
    }
  }
  for (; x < end; x += 4, c += step) {
    int32_t offsets[4];
    for (int i = 0; i < 4; ++i) offsets[i] = avx.offsets[std::min(x + i, end - 1)];
    FourPixelsAvx2<kGroups, kRows>(in, offsets, c, groups, pixels);
    for (int r = 0; r < kRows; ++r) {
      alignas(16) uint8_t buffer[16];
      _mm_store_si128(reinterpret_cast<__m128i*>(buffer), pixels[r]);
      std::memcpy(out[r] + x * 3, buffer, size_t(std::min(4, end - x)) * 3);
    }
  }
}

template <int kGroups>
void HorizontalRowsAvx2(const uint8_t* const* in, int rows, const Avx2Plan& avx, int end,
                        int out_width, uint8_t* const* out) {
  if (rows == 2) {
    HorizontalRowsAvx2<kGroups, 2>(in, avx, end, out_width, out);
  } else {
    HorizontalRowsAvx2<kGroups, 1>(in, avx, end, out_width, out);
  }
}

#endif  // STOKER_RESIZE_AVX2

// --- Vertical pass ---------------------------------------------------------------------------

// out[i] = sum_k coefs[k] * rows[k][i] over contiguous bytes.
void VerticalRowScalar(const uint8_t* const* rows, const int32_t* coefs, int taps, size_t from,
                       size_t length, uint8_t* out) {
  for (size_t i = from; i < length; ++i) {
    int32_t sum = kHalf;
    for (int k = 0; k < taps; ++k) sum += rows[k][i] * coefs[k];
    out[i] = Clip8(sum);
  }
}

#ifdef STOKER_RESIZE_AVX2

// Eight bytes widened to int32 lanes.
__attribute__((target("avx2"), always_inline)) inline __m256i Load8Avx2(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

// 32 bytes per step, the sums in four registers across the taps (GCC's own vectorization of the
// scalar loop kept them in memory). A row that is not a multiple of 32 ends with a step that
// overlaps the one before, recomputing a few bytes to the same values.
__attribute__((target("avx2"))) void VerticalRowAvx2(const uint8_t* const* rows,
                                                     const int32_t* coefs, int taps, size_t length,
                                                     uint8_t* out) {
  constexpr size_t kStep = 32;
  if (length < kStep) {
    VerticalRowScalar(rows, coefs, taps, 0, length, out);
    return;
  }
  // packs/packus interleave 128-bit lanes; this puts the four 8-byte groups back in order.
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (size_t at = 0; at < length; at += kStep) {
    at = std::min(at, length - kStep);
    __m256i s0 = _mm256_set1_epi32(kHalf), s1 = s0, s2 = s0, s3 = s0;
    for (int k = 0; k < taps; ++k) {
      const uint8_t* row = rows[k] + at;
      const __m256i c = _mm256_set1_epi32(coefs[k]);
      s0 = _mm256_add_epi32(s0, _mm256_mullo_epi32(Load8Avx2(row), c));
      s1 = _mm256_add_epi32(s1, _mm256_mullo_epi32(Load8Avx2(row + 8), c));
      s2 = _mm256_add_epi32(s2, _mm256_mullo_epi32(Load8Avx2(row + 16), c));
      s3 = _mm256_add_epi32(s3, _mm256_mullo_epi32(Load8Avx2(row + 24), c));
    }
    const __m256i lo = _mm256_packs_epi32(_mm256_srai_epi32(s0, kPrecisionBits),
                                          _mm256_srai_epi32(s1, kPrecisionBits));
    const __m256i hi = _mm256_packs_epi32(_mm256_srai_epi32(s2, kPrecisionBits),
                                          _mm256_srai_epi32(s3, kPrecisionBits));
    const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(lo, hi), order);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + at), bytes);
  }
}

#endif  // STOKER_RESIZE_AVX2

// --- Whole images ----------------------------------------------------------------------------

void CopyBox(ImageView src, int x0, int y0, MutableImageView dst) {
  for (uint32_t y = 0; y < dst.height; ++y) {
    std::memcpy(dst.row(y), src.row(y0 + y) + size_t(x0) * 3, size_t(dst.width) * 3);
  }
}

// Pillow's NEAREST resize is an affine transform sampling pixel centres (ImagingScaleAffine):
// positions accumulate by repeated addition, as there, so that ties round the same way.
// Samples outside the image (only reachable through that rounding) are black, as in Pillow.
void ResizeNearest(ImageView src, float x0, float y0, float x1, float y1, MutableImageView dst,
                   std::vector<int32_t>& offsets) {
  const double step_x = static_cast<double>(x1 - x0) / dst.width;
  const double step_y = static_cast<double>(y1 - y0) / dst.height;
  const int64_t row_bytes = int64_t{src.width} * 3;
  offsets.resize(dst.width);
  double pos = x0 + step_x * 0.5;
  for (uint32_t x = 0; x < dst.width; ++x, pos += step_x) {
    const int xin = Coord(pos);
    offsets[x] = xin >= 0 && xin < int(src.width) ? xin * 3 : -1;
  }
  // Columns [0, wide) copy 4 bytes (the 4th lands on the next pixel, written after it): their
  // sources are inside the image with a byte to spare, and they are not the row's last pixel.
  uint32_t wide = 0;
  while (wide + 1 < dst.width && offsets[wide] >= 0 && offsets[wide] + 4 <= row_bytes) ++wide;
  pos = y0 + step_y * 0.5;
  for (uint32_t y = 0; y < dst.height; ++y, pos += step_y) {
    const int yin = Coord(pos);
    uint8_t* out = dst.row(y);
    if (yin < 0 || yin >= int(src.height)) {
      std::memset(out, 0, size_t(dst.width) * 3);
      continue;
    }
    const uint8_t* in = src.row(yin);
    uint32_t x = 0;
    for (; x < wide; ++x) std::memcpy(out + x * 3, in + offsets[x], 4);
    for (; x < dst.width; ++x) {
      if (offsets[x] < 0) {
        std::memset(out + x * 3, 0, 3);
      } else {
        std::memcpy(out + x * 3, in + offsets[x], 3);
      }
    }
  }
}

// Rows of pixels: row i at base + i * stride.
struct Rows {
  const uint8_t* base;
  size_t stride;
  const uint8_t* row(int i) const { return base + size_t(i) * stride; }
};

// Resamples `count` rows horizontally into out.row(0..count). Loads may read past a row's end
// into the next row of the same image (their coefficients are zero), so only the last row of
// the whole buffer, if it is among these (`last_row_ends_buffer`), limits the vector path to
// `in_width` pixels.
void HorizontalPass(Rows in, int count, int in_width, bool last_row_ends_buffer,
                    const AxisPlan& plan, Avx2Plan& avx, MutableImageView out) {
  const int out_width = int(out.width);
#ifdef STOKER_RESIZE_AVX2
  if (CpuHasAvx2()) {
    PlanAvx2(plan, out_width, avx);
    const int inner_end = std::min(avx.SafePixels(int64_t{3} * in_width + in.stride), out_width);
    const int last_end = std::min(avx.SafePixels(int64_t{3} * in_width), out_width);
    auto* vector_rows = avx.groups == 1   ? &HorizontalRowsAvx2<1>
                        : avx.groups == 2 ? &HorizontalRowsAvx2<2>
                                          : &HorizontalRowsAvx2<0>;
    // Two rows at a time share the coefficient loads (measured: 5% faster with one group of
    // taps, 5% slower with two, which run short of registers); the buffer's last row goes alone
    // (its loads stop at its end).
    const int max_rows = avx.groups == 1 ? 2 : 1;
    const int last_alone = last_row_ends_buffer ? count - 1 : count;
    for (int r = 0; r < count;) {
      const int n = r + 1 < last_alone ? max_rows : 1;
      const int end = r < last_alone ? inner_end : last_end;
      const uint8_t* rows_in[2] = {in.row(r), in.row(r + n - 1)};
      uint8_t* rows_out[2] = {out.row(r), out.row(r + n - 1)};
      vector_rows(rows_in, n, avx, end, out_width, rows_out);
      for (int i = 0; i < n; ++i) {
        HorizontalPixelsScalar(in.row(r + i), plan, end, out_width, out.row(r + i));
      }
      r += n;
    }
    return;
  }
#endif
  (void)in_width;
  (void)last_row_ends_buffer;
  (void)avx;
  for (int r = 0; r < count; ++r) {
    HorizontalPixelsScalar(in.row(r), plan, 0, out_width, out.row(r));
  }
}

// Resamples `in` vertically into out.row(0..out.height); the plan's row indices are relative to
// in.base. Each output row is `length` bytes.
void VerticalPass(Rows in, const AxisPlan& plan, size_t length, std::vector<const uint8_t*>& rows,
                  MutableImageView out) {
  rows.resize(plan.max_taps);
  for (uint32_t y = 0; y < out.height; ++y) {
    for (int k = 0; k < plan.taps[y]; ++k) rows[k] = in.row(plan.start[y] + k);
    const int32_t* coefs = &plan.coefs[size_t(y) * plan.stride];
#ifdef STOKER_RESIZE_AVX2
    if (CpuHasAvx2()) {
      VerticalRowAvx2(rows.data(), coefs, plan.taps[y], length, out.row(y));
      continue;
    }
#endif
    VerticalRowScalar(rows.data(), coefs, plan.taps[y], 0, length, out.row(y));
  }
}

MutableImageView TempImage(std::vector<uint8_t>& buffer, int width, int height) {
  const size_t stride = size_t(width) * 3;
  if (buffer.size() < stride * height) buffer.resize(stride * height);
  return {buffer.data(), uint32_t(width), uint32_t(height), stride};
}

}  // namespace

Resizer::Resizer() : buffers_(std::make_unique<Buffers>()) {}
Resizer::~Resizer() = default;

void Resizer::Resize(ImageView src, const Box& box, Interpolation interpolation,
                     MutableImageView dst) {
  if (dst.width == 0 || dst.height == 0) return;
  if (src.width == 0 || src.height == 0) {
    for (uint32_t y = 0; y < dst.height; ++y) std::memset(dst.row(y), 0, size_t(dst.width) * 3);
    return;
  }
  // Pillow takes the box as floats; rounding ours the same way keeps the arithmetic identical.
  const auto [x0, y0, x1, y1] = ClampBox(box, src.width, src.height);
  const int out_w = int(dst.width), out_h = int(dst.height);
  const int in_w = int(src.width), in_h = int(src.height);

  // Pillow copies an integer box of the output's size (every filter is the identity there).
  if (x0 == std::trunc(x0) && y0 == std::trunc(y0) && x1 - x0 == float(out_w) &&
      y1 - y0 == float(out_h)) {
    CopyBox(src, int(x0), int(y0), dst);
    return;
  }
  Buffers& b = *buffers_;
  if (interpolation == Interpolation::kNearest) {
    ResizeNearest(src, x0, y0, x1, y1, dst, b.offsets);
    return;
  }
  // Pillow skips a pass whose axis is the identity (the result is the same either way).
  const bool horizontal = out_w != in_w || x0 != 0 || x1 != float(out_w);
  const bool vertical = out_h != in_h || y0 != 0 || y1 != float(out_h);
  AxisPlan& hplan = b.horizontal;
  AxisPlan& vplan = b.vertical;
  PlanAxis(in_w, x0, x1, out_w, interpolation, hplan);
  PlanAxis(in_h, y0, y1, out_h, interpolation, vplan);
  // Only the source rows and columns some window touches take part; the window starts are
  // indices into `source` from here on.
  const auto [first_row, end_row] = RebaseToSpan(vplan);
  const auto [first_col, end_col] = RebaseToSpan(hplan);
  const Rows source{src.row(first_row) + size_t(first_col) * 3, src.stride};
  const int used_cols = end_col - first_col;

  if (!horizontal) {
    VerticalPass(source, vplan, size_t(out_w) * 3, b.rows, dst);
    return;
  }
  if (!vertical) {
    HorizontalPass(source, out_h, used_cols, /*last_row_ends_buffer=*/true, hplan, b.avx2, dst);
    return;
  }
  if (VerticalFirst(in_w, in_h, out_w, out_h)) {
    const MutableImageView temp = TempImage(b.temp, used_cols, out_h);
    VerticalPass(source, vplan, size_t(used_cols) * 3, b.rows, temp);
    HorizontalPass({temp.data, temp.stride}, out_h, used_cols, /*last_row_ends_buffer=*/true, hplan,
                   b.avx2, dst);
  } else {
    const MutableImageView temp = TempImage(b.temp, out_w, end_row - first_row);
    HorizontalPass(source, end_row - first_row, used_cols, end_row == in_h, hplan, b.avx2, temp);
    VerticalPass({temp.data, temp.stride}, vplan, size_t(out_w) * 3, b.rows, dst);
  }
}

std::optional<Interpolation> ParseInterpolation(std::string_view name) {
  if (name == "nearest") return Interpolation::kNearest;
  if (name == "bilinear") return Interpolation::kBilinear;
  if (name == "bicubic") return Interpolation::kBicubic;
  return std::nullopt;
}

std::string_view InterpolationName(Interpolation interpolation) {
  switch (interpolation) {
    case Interpolation::kNearest:
      return "nearest";
    case Interpolation::kBicubic:
      return "bicubic";
    case Interpolation::kBilinear:
      break;
  }
  return "bilinear";
}

}  // namespace stoker::decode
