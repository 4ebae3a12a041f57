// Writing a sample into its batch slot (see output.h).
//
// Float output is p * scale[c] + bias[c] with scale = 1 / (255 std), bias = -mean / std: one
// multiply and add per value, which the compiler vectorizes. It differs from torchvision's
// (p / 255 - mean) / std, rounded after each step, by at most a few float ulps (the tests bound
// it). An exact 256-entry table per channel was measured as well: 2.8x slower (table lookups do
// not vectorize), so the exactness was not worth it at this precision.
//
// Rows pass through a small local buffer, mirrored there when flipping (a byte shuffle per five
// pixels with AVX2), so that the conversions always read forwards from memory that cannot alias
// the output. The loops are compiled twice, for AVX2 and for the baseline, and picked at run
// time.
#include "decode/output.h"

#include <algorithm>
#include <cstring>

#include "decode/cpu_features.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define STOKER_OUTPUT_AVX2 1
#endif

namespace stoker::decode {
namespace {

struct Affine {
  float scale[3], bias[3];
};

// Scalar mirror: out pixel i = in pixel (width - 1 - first - i), for i in [from, n).
void MirrorScalar(const uint8_t* in, uint32_t width, uint32_t first, uint32_t from, uint32_t n,
                  uint8_t* out) {
  for (uint32_t i = from; i < n; ++i) {
    std::memcpy(out + size_t(i) * 3, in + size_t(width - 1 - first - i) * 3, 3);
  }
}

#ifdef STOKER_OUTPUT_AVX2
// Five pixels per step: a 16-byte load ending one byte past the last of them, reversed by one
// byte shuffle, stored as 16 bytes whose last one lands on the next step's first pixel. Steps
// stop where the load would start before the row or the store run past `out`'s n pixels.
__attribute__((target("avx2"))) void MirrorAvx2(const uint8_t* in, uint32_t width, uint32_t first,
                                                uint32_t n, uint8_t* out) {
  constexpr char z = -1;
  const __m128i reverse = _mm_setr_epi8(12, 13, 14, 9, 10, 11, 6, 7, 8, 3, 4, 5, 0, 1, 2, z);
  uint32_t i = first == 0 ? 1 : 0;  // the row's last pixel: its load would end past the row
  MirrorScalar(in, width, first, 0, i, out);
  const int64_t last_load = int64_t{width} - 5 - first;  // source chunks need index >= 0
  for (; int64_t{i} <= last_load && int64_t{i} + 6 <= int64_t{n}; i += 5) {
    const uint8_t* chunk = in + size_t(width - 5 - first - i) * 3;
    const __m128i pixels = _mm_loadu_si128(reinterpret_cast<const __m128i*>(chunk));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + size_t(i) * 3),
                     _mm_shuffle_epi8(pixels, reverse));
  }
  MirrorScalar(in, width, first, i, n, out);
}
#endif

// Converts n interleaved pixels: planar (three outputs `plane` apart) or interleaved.
template <typename Out, typename Convert>
__attribute__((always_inline)) inline void ConvertPixels(const uint8_t* in, uint32_t n, bool planar,
                                                         size_t plane, Out* out, Convert convert) {
  if (planar) {
    Out* r = out;
    Out* g = out + plane;
    Out* b = out + 2 * plane;
    for (uint32_t x = 0; x < n; ++x) {
      r[x] = convert(in[x * 3 + 0], 0);
      g[x] = convert(in[x * 3 + 1], 1);
      b[x] = convert(in[x * 3 + 2], 2);
    }
  } else {
    for (uint32_t x = 0; x < n; ++x) {
      out[x * 3 + 0] = convert(in[x * 3 + 0], 0);
      out[x * 3 + 1] = convert(in[x * 3 + 1], 1);
      out[x * 3 + 2] = convert(in[x * 3 + 2], 2);
    }
  }
}

// Every row goes through a small local buffer, in chunks: mirrored there when flipping, else
// copied. The copy pays for itself: reading straight from the source, whose uint8_t rows may
// alias the output as far as the compiler knows, left the conversion loops half as fast.
template <typename Out, typename Convert>
__attribute__((always_inline)) inline void WriteRows(ImageView src, bool flip, bool planar,
                                                     bool use_avx2, Out* dst, Convert convert) {
  constexpr uint32_t kChunk = 256;  // pixels
  const uint32_t w = src.width;
  const size_t plane = size_t(w) * src.height;
  const size_t pixel_step = planar ? 1 : 3;  // output elements per pixel within a row
  for (uint32_t y = 0; y < src.height; ++y) {
    const uint8_t* in = src.row(y);
    Out* out = dst + size_t(y) * w * pixel_step;
    for (uint32_t first = 0; first < w; first += kChunk) {
      const uint32_t n = std::min(kChunk, w - first);
      uint8_t pixels[kChunk * 3];
      if (!flip) {
        std::memcpy(pixels, in + size_t(first) * 3, size_t(n) * 3);
      } else {
#ifdef STOKER_OUTPUT_AVX2
        if (use_avx2) {
          MirrorAvx2(in, w, first, n, pixels);
        } else {
          MirrorScalar(in, w, first, 0, n, pixels);
        }
#else
        (void)use_avx2;
        MirrorScalar(in, w, first, 0, n, pixels);
#endif
      }
      ConvertPixels(pixels, n, planar, plane, out + first * pixel_step, convert);
    }
  }
}

__attribute__((always_inline)) inline void WriteBody(ImageView src, bool flip,
                                                     const OutputSpec& spec, const Affine& affine,
                                                     bool use_avx2, void* dst) {
  const bool planar = spec.layout == Layout::kNCHW;
  if (spec.dtype == DType::kUint8) {
    auto* out = static_cast<uint8_t*>(dst);
    if (!planar && !flip) {
      for (uint32_t y = 0; y < src.height; ++y) {
        std::memcpy(out + size_t(y) * src.width * 3, src.row(y), size_t(src.width) * 3);
      }
      return;
    }
    WriteRows(src, flip, planar, use_avx2, out, [](uint8_t v, int) { return v; });
    return;
  }
  // Copied so that the compiler knows the coefficients do not alias the output.
  const Affine a = affine;
  WriteRows(src, flip, planar, use_avx2, static_cast<float*>(dst),
            [a](uint8_t v, int c) { return float(v) * a.scale[c] + a.bias[c]; });
}

void WriteScalar(ImageView src, bool flip, const OutputSpec& spec, const Affine& affine,
                 void* dst) {
  WriteBody(src, flip, spec, affine, /*use_avx2=*/false, dst);
}

#ifdef STOKER_OUTPUT_AVX2
__attribute__((target("avx2"))) void WriteAvx2(ImageView src, bool flip, const OutputSpec& spec,
                                               const Affine& affine, void* dst) {
  WriteBody(src, flip, spec, affine, /*use_avx2=*/true, dst);
}
#endif

}  // namespace

void WriteSample(ImageView src, bool flip_horizontal, const OutputSpec& spec, void* dst) {
  if (src.width != spec.width || src.height != spec.height) {
    // A caller's bug; zeros are at least visible, where reading past `src` would not be.
    std::memset(dst, 0, spec.sample_bytes());
    return;
  }
  Affine affine;
  for (int c = 0; c < 3; ++c) {
    affine.scale[c] = 1.0f / (255.0f * spec.std[c]);
    affine.bias[c] = -spec.mean[c] / spec.std[c];
  }
#ifdef STOKER_OUTPUT_AVX2
  if (CpuHasAvx2()) {
    WriteAvx2(src, flip_horizontal, spec, affine, dst);
    return;
  }
#endif
  WriteScalar(src, flip_horizontal, spec, affine, dst);
}

}  // namespace stoker::decode
