// The GPU resampling kernels' interface and their per-pixel arithmetic.
//
// The arithmetic is written once, as host+device inline functions, so that the very code the
// kernels run can also run on the CPU (RunResampleOnHost): the tests check it value for value
// against decode::Resizer and WriteSample on machines without a GPU, which leaves only the
// kernel launch and memory transfers unverified there. It is Pillow's fixed-point resampling
// (see decode/resize.cc): 22-bit coefficients, the horizontal pass first with its result
// rounded to 8 bits, then the vertical pass (or the other way round where Pillow
// does that), then flip + normalize + layout (decode/output.h).
//
// This header is compiled by nvcc (C++20) as well as the host compiler, so it includes no stoker
// header that needs C++23. Thread-safety: plain functions.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#if defined(__CUDACC__)
#define STOKER_HD __host__ __device__
#else
#define STOKER_HD
#endif

namespace stoker::decode::cuda {

inline constexpr int kPrecisionBits = 22;  // Pillow's coefficient precision

// One sample's resampling, all pointers in the memory the code runs on (device for kernels).
// Window starts are relative to `src`, which points at the first pixel any window touches.
// Pass 1 resamples one axis of the source into `temp`, pass 2 the other axis of `temp` into the
// output: horizontal first, or vertical first where Pillow (and so decode::Resizer) does that.
struct ResampleJob {
  const uint8_t* src = nullptr;      // RGB interleaved
  uint64_t src_stride = 0;           // bytes from one row to the next
  const int32_t* h_start = nullptr;  // per output column: first source column, tap count,
  const int32_t* h_taps = nullptr;   // and h_stride coefficients
  const int32_t* h_coefs = nullptr;
  int32_t h_stride = 0;
  const int32_t* v_start = nullptr;  // per output row: first source row, ...
  const int32_t* v_taps = nullptr;
  const int32_t* v_coefs = nullptr;
  int32_t v_stride = 0;
  int32_t vertical_first = 0;
  // temp: temp_width x temp_height RGB, packed. Horizontal first: output width x the source
  // rows the vertical windows cover; vertical first: the source columns the horizontal windows
  // cover x output height.
  uint8_t* temp = nullptr;
  int32_t temp_width = 0, temp_height = 0;
  void* dst = nullptr;  // the sample's slot: OutputFormat::width * height * 3 values
  int32_t flip = 0;     // mirror horizontally
};

// The batch's output (decode::OutputSpec without the C++23 parts). Float values are
// v * scale[c] + bias[c], with scale and bias computed as decode/output.cc does (FormatFor in
// resample_plan.h), so that both paths round alike.
struct OutputFormat {
  uint32_t width = 0, height = 0;
  bool float32 = true;
  bool nchw = true;
  float scale[3] = {1, 1, 1};
  float bias[3] = {0, 0, 0};
};

STOKER_HD inline uint8_t Clip8(int32_t sum) {
  const int32_t v = sum >> kPrecisionBits;  // arithmetic shift: floor, as Pillow's
  return static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}

// One filter window over RGB pixels `step` bytes apart, rounded to 8 bits as Pillow does.
STOKER_HD inline void Tap(const uint8_t* p, uint64_t step, const int32_t* c, int taps,
                          uint8_t rgb[3]) {
  constexpr int32_t half = 1 << (kPrecisionBits - 1);
  int32_t r = half, g = half, b = half;
  for (int k = 0; k < taps; ++k, p += step) {
    r += p[0] * c[k];
    g += p[1] * c[k];
    b += p[2] * c[k];
  }
  rgb[0] = Clip8(r);
  rgb[1] = Clip8(g);
  rgb[2] = Clip8(b);
}

// Pass 1, one temp pixel (x, y).
STOKER_HD inline void FirstPassPixel(const ResampleJob& job, int x, int y) {
  uint8_t* out = job.temp + (static_cast<uint64_t>(y) * job.temp_width + x) * 3;
  if (job.vertical_first) {
    Tap(job.src + job.v_start[y] * job.src_stride + static_cast<uint64_t>(x) * 3, job.src_stride,
        job.v_coefs + static_cast<int64_t>(y) * job.v_stride, job.v_taps[y], out);
  } else {
    Tap(job.src + y * job.src_stride + static_cast<uint64_t>(job.h_start[x]) * 3, 3,
        job.h_coefs + static_cast<int64_t>(x) * job.h_stride, job.h_taps[x], out);
  }
}

// Pass 2, flip and output, one output pixel: column x (before the flip) of row y.
STOKER_HD inline void SecondPassPixel(const ResampleJob& job, const OutputFormat& out, int x,
                                      int y) {
  const uint64_t temp_stride = static_cast<uint64_t>(job.temp_width) * 3;
  uint8_t rgb[3];
  if (job.vertical_first) {
    Tap(job.temp + y * temp_stride + static_cast<uint64_t>(job.h_start[x]) * 3, 3,
        job.h_coefs + static_cast<int64_t>(x) * job.h_stride, job.h_taps[x], rgb);
  } else {
    Tap(job.temp + job.v_start[y] * temp_stride + static_cast<uint64_t>(x) * 3, temp_stride,
        job.v_coefs + static_cast<int64_t>(y) * job.v_stride, job.v_taps[y], rgb);
  }
  const uint32_t ox =
      job.flip ? out.width - 1 - static_cast<uint32_t>(x) : static_cast<uint32_t>(x);
  const uint64_t plane = static_cast<uint64_t>(out.width) * out.height;
  const uint64_t at = static_cast<uint64_t>(y) * out.width + ox;
  for (int ch = 0; ch < 3; ++ch) {
    const uint64_t index = out.nchw ? ch * plane + at : at * 3 + ch;
    if (out.float32) {
#if defined(__CUDA_ARCH__)
      // Rounded after the multiply, as on the CPU: nvcc would otherwise fuse it into an FMA.
      const float v =
          __fadd_rn(__fmul_rn(static_cast<float>(rgb[ch]), out.scale[ch]), out.bias[ch]);
#else
      const float v = static_cast<float>(rgb[ch]) * out.scale[ch] + out.bias[ch];
#endif
      static_cast<float*>(job.dst)[index] = v;
    } else {
      static_cast<uint8_t*>(job.dst)[index] = rgb[ch];
    }
  }
}

// The kernels' work on the CPU, pixel by pixel through the same functions (for the tests).
inline void RunResampleOnHost(const ResampleJob* jobs, int count, const OutputFormat& out) {
  for (int j = 0; j < count; ++j) {
    for (int y = 0; y < jobs[j].temp_height; ++y) {
      for (int x = 0; x < jobs[j].temp_width; ++x) FirstPassPixel(jobs[j], x, y);
    }
    for (uint32_t y = 0; y < out.height; ++y) {
      for (uint32_t x = 0; x < out.width; ++x) SecondPassPixel(jobs[j], out, int(x), int(y));
    }
  }
}

// Enqueues both passes for `count` jobs (`device_jobs` in device memory; the largest temp_width
// and temp_height among them) on `stream`. Returns the launch error, if any.
cudaError_t LaunchResample(const ResampleJob* device_jobs, int count, int max_temp_width,
                           int max_temp_height, const OutputFormat& out, cudaStream_t stream);

}  // namespace stoker::decode::cuda
