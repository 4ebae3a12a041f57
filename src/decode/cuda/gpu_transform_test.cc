// The GPU decode path against the CPU path.
//
// Two tiers. Without a GPU (they run wherever STOKER_CUDA is built): the marker scan, and the
// kernels' arithmetic run on the host (RunResampleOnHost) against decode::Resizer — value for
// value — and against decode::Transformer end to end. With a GPU (skipped where
// CudaDeviceCount() is 0): GpuBatchTransformer against decode::Transformer (dct_scaling off, the
// same SampleParams) on photo-like JPEGs of odd sizes, 4:2:0/4:4:4, grayscale, progressive and
// restart intervals — within 2 per uint8 value and a mean below 0.5, since nvJPEG's IDCT and
// upsampling round differently from libjpeg-turbo's — plus per-sample errors for broken input.
#include "decode/cuda/gpu_transform.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "decode/cuda/gpu_kernels.h"
#include "decode/cuda/jpeg_markers.h"
#include "decode/cuda/nvjpeg_decoder.h"
#include "decode/cuda/resample_plan.h"
#include "decode/decoder.h"
#include "decode/resize.h"
#include "decode/transform.h"
#include "testing/test_images.h"

namespace stoker::decode::cuda {
namespace {

std::span<const std::byte> AsBytes(const std::string& s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

struct Variant {
  const char* name;
  uint32_t width, height;
  test::JpegOptions jpeg;
};

std::vector<Variant> Variants() {
  std::vector<Variant> v;
  v.push_back({"420", 320, 240, {}});
  v.push_back({"420_odd", 333, 251, {}});
  test::JpegOptions o444;
  o444.subsample_420 = false;
  v.push_back({"444_odd", 97, 141, o444});
  test::JpegOptions gray;
  gray.grayscale = true;
  v.push_back({"gray", 257, 199, gray});
  test::JpegOptions progressive;
  progressive.progressive = true;
  v.push_back({"progressive", 301, 227, progressive});
  test::JpegOptions restart;
  restart.restart_rows = 2;
  v.push_back({"restart", 240, 320, restart});
  return v;
}

std::string Encode(const Variant& v, uint64_t seed = 7) {
  return test::EncodeJpeg(test::PhotoLikePixels(v.width, v.height, seed), v.width, v.height,
                          v.jpeg);
}

TransformOptions CpuOptions(bool train, DType dtype, Layout layout) {
  TransformOptions o;
  o.train = train;
  o.dct_scaling = false;  // the GPU path decodes at full resolution
  o.output.width = 64;
  o.output.height = 48;
  o.output.dtype = dtype;
  o.output.layout = layout;
  o.resize = 72;
  return o;
}

GpuTransformOptions GpuOptions(const TransformOptions& cpu) {
  GpuTransformOptions g;
  g.output = cpu.output;
  g.interpolation = cpu.interpolation;
  g.limits = cpu.limits;
  return g;
}

// Differences between two outputs, in uint8 units (float outputs are scaled back by 255 * std).
struct Diff {
  double max = 0, mean = 0;
};

Diff Compare(const std::vector<std::byte>& a, const std::vector<std::byte>& b,
             const OutputSpec& spec) {
  Diff d;
  const size_t values = size_t{spec.width} * spec.height * 3;
  double sum = 0;
  for (size_t i = 0; i < values; ++i) {
    double diff;
    if (spec.dtype == DType::kUint8) {
      diff = std::abs(double(std::to_integer<uint8_t>(a[i])) - std::to_integer<uint8_t>(b[i]));
    } else {
      float x, y;
      std::memcpy(&x, &a[i * 4], 4);
      std::memcpy(&y, &b[i * 4], 4);
      const size_t c =
          spec.layout == Layout::kNCHW ? i / (size_t{spec.width} * spec.height) : i % 3;
      diff = std::abs(double(x) - y) * 255.0 * spec.std[c];
    }
    d.max = std::max(d.max, diff);
    sum += diff;
  }
  d.mean = sum / values;
  return d;
}

// ---------------------------------------------------------------------------------------------
// Host tier

TEST(JpegMarkersTest, ReadsTheStructure) {
  for (const Variant& v : Variants()) {
    SCOPED_TRACE(v.name);
    const std::string jpeg = Encode(v);
    Result<JpegStructure> s = ScanJpeg(AsBytes(jpeg));
    ASSERT_TRUE(s.has_value()) << s.error().ToString();
    EXPECT_EQ(s->width, v.width);
    EXPECT_EQ(s->height, v.height);
    EXPECT_EQ(s->components, v.jpeg.grayscale ? 1u : 3u);
    EXPECT_EQ(s->precision, 8u);
    EXPECT_EQ(s->sof, v.jpeg.progressive ? 0xC2 : 0xC0);
    if (v.jpeg.progressive) {
      EXPECT_GT(s->scans, 1u);
    } else {
      EXPECT_EQ(s->scans, 1u);
    }
  }
}

TEST(JpegMarkersTest, EveryTruncationIsDamagedInput) {
  const std::string jpeg = Encode(Variants()[0]);
  for (size_t n = 0; n < jpeg.size(); n += 1 + n / 64) {
    const Result<JpegStructure> s = ScanJpeg(AsBytes(jpeg).first(n));
    ASSERT_FALSE(s.has_value()) << n;
    EXPECT_EQ(s.error().code(), StatusCode::kInvalidArgument) << n;
  }
  const std::string png = test::EncodePng(test::PhotoLikePixels(8, 8, 1), 8, 8);
  EXPECT_FALSE(LooksLikeJpeg(AsBytes(png)));
  EXPECT_FALSE(ScanJpeg(AsBytes(png)).has_value());
}

// Runs one sample through the host twin of the GPU path, from a CPU decode of the whole image.
void HostTransform(const Image& full, const SampleParams& params, const TransformOptions& o,
                   std::vector<std::byte>& out) {
  const SampleGeometry g = PlanGeometry(full.width(), full.height(), params, o.interpolation,
                                        o.output.width, o.output.height);
  const ResamplePlan plan = PlanResample(g.view.width, g.view.height, g.box, o.interpolation,
                                         o.output.width, o.output.height);
  const uint32_t temp_width = plan.temp_width(o.output.width);
  const uint32_t temp_height = plan.temp_height(o.output.height);
  std::vector<uint8_t> temp(size_t{temp_width} * temp_height * 3);
  ResampleJob job;
  job.src = full.data() + (size_t{g.roi.y} + g.view.y + plan.first_row) * full.stride() +
            (size_t{g.roi.x} + g.view.x + plan.first_col) * 3;
  job.src_stride = full.stride();
  job.h_start = plan.horizontal.start.data();
  job.h_taps = plan.horizontal.taps.data();
  job.h_coefs = plan.horizontal.coefs.data();
  job.h_stride = plan.horizontal.stride;
  job.v_start = plan.vertical.start.data();
  job.v_taps = plan.vertical.taps.data();
  job.v_coefs = plan.vertical.coefs.data();
  job.v_stride = plan.vertical.stride;
  job.vertical_first = plan.vertical_first;
  job.temp = temp.data();
  job.temp_width = int32_t(temp_width);
  job.temp_height = int32_t(temp_height);
  out.assign(o.output.sample_bytes(), std::byte{0});
  job.dst = out.data();
  job.flip = params.flip;
  const OutputFormat f = FormatFor(o.output);
  RunResampleOnHost(&job, 1, f);
}

Image DecodeWhole(const std::string& jpeg) {
  Decoder decoder;
  Image image;
  const Result<DecodedRegion> r = decoder.Decode(AsBytes(jpeg), DecodeRequest{}, image);
  EXPECT_TRUE(r.has_value()) << r.error().ToString();
  return image;
}

// The kernels' arithmetic against decode::Resizer on the same view and box: no difference at
// all, train (clipped integer boxes) and validation (fractional boxes) alike, in both of
// Pillow's pass orders.
TEST(GpuArithmeticTest, ResamplingEqualsTheCpuResizer) {
  int vertical_first = 0, horizontal_first = 0;
  for (const Interpolation interpolation : {Interpolation::kBilinear, Interpolation::kBicubic}) {
    for (const Variant& v : Variants()) {
      const Image full = DecodeWhole(Encode(v));
      for (const bool train : {true, false}) {
        TransformOptions o = CpuOptions(train, DType::kUint8, Layout::kNHWC);
        o.interpolation = interpolation;
        for (uint64_t seed = 0; seed < 8; ++seed) {
          SCOPED_TRACE(testing::Message() << v.name << " train=" << train << " seed=" << seed);
          SampleParams params = ChooseParams(o, full.width(), full.height(), seed);
          params.flip = false;
          const SampleGeometry g = PlanGeometry(full.width(), full.height(), params, interpolation,
                                                o.output.width, o.output.height);
          const ImageView view{full.data() + (size_t{g.roi.y} + g.view.y) * full.stride() +
                                   (size_t{g.roi.x} + g.view.x) * 3,
                               g.view.width, g.view.height, full.stride()};
          Image expected;
          expected.Reset(o.output.width, o.output.height);
          Resizer().Resize(view, g.box, interpolation, expected.mutable_view());
          std::vector<std::byte> got;
          HostTransform(full, params, o, got);
          ASSERT_EQ(0, std::memcmp(got.data(), expected.data(), got.size()));
          const ResamplePlan plan = PlanResample(g.view.width, g.view.height, g.box, interpolation,
                                                 o.output.width, o.output.height);
          ++(plan.vertical_first ? vertical_first : horizontal_first);
        }
      }
    }
  }
  EXPECT_GT(vertical_first, 0);
  EXPECT_GT(horizontal_first, 0);
}

// End to end against decode::Transformer (its own region decode, WriteSample): flips, dtypes
// and layouts. Training boxes are integers: identical output, float bits included. Validation
// boxes are fractional and the CPU's are relative to its own decoded region's origin, whose
// float rounding can move a coefficient: within 1, rarely.
TEST(GpuArithmeticTest, MatchesTheCpuTransformer) {
  for (const Variant& v : Variants()) {
    const std::string jpeg = Encode(v);
    const Image full = DecodeWhole(jpeg);
    for (const bool train : {true, false}) {
      for (const DType dtype : {DType::kUint8, DType::kFloat32}) {
        const Layout layout = dtype == DType::kUint8 ? Layout::kNHWC : Layout::kNCHW;
        const TransformOptions o = CpuOptions(train, dtype, layout);
        Transformer cpu(o);
        for (uint64_t seed = 0; seed < 6; ++seed) {
          SCOPED_TRACE(testing::Message() << v.name << " train=" << train << " seed=" << seed);
          std::vector<std::byte> expected(o.output.sample_bytes());
          ASSERT_TRUE(cpu.Run(AsBytes(jpeg), seed, expected.data()).ok());
          std::vector<std::byte> got;
          HostTransform(full, ChooseParams(o, full.width(), full.height(), seed), o, got);
          const Diff d = Compare(got, expected, o.output);
          if (train) {
            EXPECT_EQ(got, expected);
          } else {
            EXPECT_LE(d.max, 1.0 + 1e-3);
            EXPECT_LT(d.mean, 0.01);
          }
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// GPU tier

class GpuTransformTest : public testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device (or no driver): GPU tests skipped";
  }

  // Runs `images` with `params` through a new GpuBatchTransformer; copies the outputs back.
  Result<std::vector<Status>> RunGpu(const GpuTransformOptions& options,
                                     const std::vector<std::string>& images,
                                     const std::vector<SampleParams>& params,
                                     std::vector<std::vector<std::byte>>& outputs) {
    STOKER_ASSIGN_OR_RETURN(auto gpu, GpuBatchTransformer::Create(options));
    std::vector<GpuSample> samples;
    for (size_t i = 0; i < images.size(); ++i) samples.push_back({AsBytes(images[i]), params[i]});
    const size_t slot = options.output.sample_bytes();
    void* device = nullptr;
    EXPECT_EQ(cudaMalloc(&device, slot * images.size()), cudaSuccess);
    EXPECT_EQ(cudaMemset(device, 0, slot * images.size()), cudaSuccess);
    Result<std::vector<Status>> statuses = gpu->Run(samples, device);
    outputs.assign(images.size(), std::vector<std::byte>(slot));
    for (size_t i = 0; i < images.size(); ++i) {
      EXPECT_EQ(cudaMemcpy(outputs[i].data(), static_cast<std::byte*>(device) + i * slot, slot,
                           cudaMemcpyDeviceToHost),
                cudaSuccess);
    }
    EXPECT_EQ(cudaFree(device), cudaSuccess);
    return statuses;
  }
};

// Regions that end inside a 16x16 block at the image's right or bottom edge, decoded into a
// slot laid out by LayoutFor and followed by canary bytes: nothing may be written past the slot.
// For the record, the same into a tight slot (pitch width * 3, height rows): how many bytes the
// decoder wrote past it (none, on an H200 with nvJPEG 13.3, either backend).
TEST_F(GpuTransformTest, DecodesStayInsideTheirSlots) {
  constexpr size_t kCanary = 64 << 10;
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  for (const bool hardware : {true, false}) {
    auto decoder = NvjpegDecoder::Create(stream, {.hardware = hardware});
    ASSERT_TRUE(decoder.has_value()) << decoder.error().ToString();
    for (const Variant& v :
         {Variants()[1], Variants()[2], Variants()[3], Variant{"470x391", 470, 391, {}}}) {
      const std::string jpeg = Encode(v);
      ASSERT_TRUE((*decoder)->ReadHeader(AsBytes(jpeg), {}).has_value());
      const uint32_t x0 = v.width / 2 / 16 * 16, y0 = v.height / 2 / 16 * 16;
      for (const auto& [x, y] : {std::pair{0u, 0u}, std::pair{x0, y0}}) {
        const uint32_t w = v.width - x, h = v.height - y;
        for (const bool tight : {true, false}) {
          const RegionLayout l = tight ? RegionLayout{w * 3, size_t{w} * 3 * h} : LayoutFor(w, h);
          void* device = nullptr;
          ASSERT_EQ(cudaMalloc(&device, l.bytes + kCanary), cudaSuccess);
          ASSERT_EQ(cudaMemset(device, 0xA5, l.bytes + kCanary), cudaSuccess);
          const RoiDecode r{AsBytes(jpeg), x, y, w, h, static_cast<uint8_t*>(device), l.pitch};
          Status status;
          (*decoder)->Decode({&r, 1}, {&status, 1});
          ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
          std::vector<uint8_t> canary(kCanary);
          ASSERT_EQ(cudaMemcpy(canary.data(), static_cast<uint8_t*>(device) + l.bytes, kCanary,
                               cudaMemcpyDeviceToHost),
                    cudaSuccess);
          ASSERT_EQ(cudaFree(device), cudaSuccess);
          ASSERT_TRUE(status.ok()) << status.ToString();
          const size_t past = kCanary - size_t(std::count(canary.begin(), canary.end(), 0xA5));
          if (tight) {
            std::printf(
                "%s hardware=%d region %ux%u at (%u,%u): %zu bytes written past a tight "
                "slot\n",
                v.name, (*decoder)->hardware(), w, h, x, y, past);
          } else {
            EXPECT_EQ(past, 0u) << v.name << " hardware=" << (*decoder)->hardware() << " region "
                                << w << "x" << h << " at " << x << "," << y;
          }
        }
      }
    }
  }
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

TEST_F(GpuTransformTest, MatchesTheCpuPath) {
  for (const bool hardware : {true, false}) {
    for (const bool train : {true, false}) {
      for (const DType dtype : {DType::kUint8, DType::kFloat32}) {
        const Layout layout = dtype == DType::kUint8 ? Layout::kNHWC : Layout::kNCHW;
        const TransformOptions o = CpuOptions(train, dtype, layout);
        GpuTransformOptions g = GpuOptions(o);
        g.hardware_decoder = hardware;
        // One batch: every variant with several seeds.
        std::vector<std::string> images;
        std::vector<SampleParams> params;
        std::vector<std::vector<std::byte>> expected;
        Transformer cpu(o);
        for (const Variant& v : Variants()) {
          for (uint64_t seed = 0; seed < 4; ++seed) {
            images.push_back(Encode(v, seed));
            params.push_back(ChooseParams(o, v.width, v.height, seed));
            expected.emplace_back(o.output.sample_bytes());
            ASSERT_TRUE(cpu.Run(AsBytes(images.back()), seed, expected.back().data()).ok());
          }
        }
        std::vector<std::vector<std::byte>> got;
        Result<std::vector<Status>> statuses = RunGpu(g, images, params, got);
        ASSERT_TRUE(statuses.has_value()) << statuses.error().ToString();
        for (size_t i = 0; i < images.size(); ++i) {
          SCOPED_TRACE(testing::Message() << Variants()[i / 4].name << " seed=" << i % 4
                                          << " hardware=" << hardware << " train=" << train);
          ASSERT_TRUE((*statuses)[i].ok()) << (*statuses)[i].ToString();
          const Diff d = Compare(got[i], expected[i], o.output);
          EXPECT_LE(d.max, 2.0 + 1e-3);
          EXPECT_LT(d.mean, 0.5);
        }
      }
    }
  }
}

TEST_F(GpuTransformTest, BadSamplesFailAloneAndPngIsLeftToTheCpu) {
  const TransformOptions o = CpuOptions(true, DType::kUint8, Layout::kNHWC);
  const Variant v = Variants()[1];
  const std::string good = Encode(v);
  std::string flipped = good;
  for (size_t i = flipped.size() / 2; i < flipped.size() - 2; i += 97) flipped[i] ^= 0x5A;
  const std::vector<std::string> images = {
      good,
      good.substr(0, good.size() / 2),  // truncated
      flipped,                          // damaged entropy-coded data (may decode to garbage)
      test::EncodePng(test::PhotoLikePixels(40, 30, 3), 40, 30),
      std::string("GIF89a not an image"),
      good,  // rotation: CPU only
      good};
  std::vector<SampleParams> params(images.size(), ChooseParams(o, v.width, v.height, 1));
  params[5].angle = 10;
  std::vector<std::vector<std::byte>> got;
  Result<std::vector<Status>> statuses = RunGpu(GpuOptions(o), images, params, got);
  ASSERT_TRUE(statuses.has_value()) << statuses.error().ToString();
  const std::vector<Status>& s = *statuses;
  EXPECT_TRUE(s[0].ok()) << s[0].ToString();
  EXPECT_EQ(s[1].code(), StatusCode::kInvalidArgument) << s[1].ToString();
  // nvJPEG, like any decoder, may not notice every damaged bit; what matters is no crash.
  EXPECT_TRUE(s[2].ok() || s[2].IsInvalidArgument() || s[2].IsUnsupported()) << s[2].ToString();
  EXPECT_EQ(s[3].code(), StatusCode::kUnsupported) << s[3].ToString();
  EXPECT_EQ(s[4].code(), StatusCode::kUnsupported) << s[4].ToString();
  EXPECT_EQ(s[5].code(), StatusCode::kUnsupported) << s[5].ToString();
  EXPECT_TRUE(s[6].ok()) << s[6].ToString();
  EXPECT_EQ(got[0], got[6]);  // the good samples around the bad ones are intact
}

TEST_F(GpuTransformTest, NoOutputBufferIsAnError) {
  const TransformOptions o = CpuOptions(true, DType::kUint8, Layout::kNHWC);
  auto gpu = GpuBatchTransformer::Create(GpuOptions(o));
  ASSERT_TRUE(gpu.has_value()) << gpu.error().ToString();
  const Variant v = Variants()[0];
  const std::string jpeg = Encode(v);
  const GpuSample sample{AsBytes(jpeg), ChooseParams(o, v.width, v.height, 0)};
  const Result<std::vector<Status>> statuses = (*gpu)->Run({&sample, 1}, nullptr);
  ASSERT_FALSE(statuses.has_value());
  EXPECT_EQ(statuses.error().code(), StatusCode::kInvalidArgument);
}

TEST_F(GpuTransformTest, LimitsAreCheckedOnTheHeader) {
  TransformOptions o = CpuOptions(true, DType::kUint8, Layout::kNHWC);
  GpuTransformOptions g = GpuOptions(o);
  g.limits.max_pixels = 1000;
  const Variant v = Variants()[0];
  std::vector<std::vector<std::byte>> got;
  Result<std::vector<Status>> statuses =
      RunGpu(g, {Encode(v)}, {ChooseParams(o, v.width, v.height, 0)}, got);
  ASSERT_TRUE(statuses.has_value()) << statuses.error().ToString();
  EXPECT_EQ((*statuses)[0].code(), StatusCode::kResourceExhausted);
}

TEST(GpuTransformOptionsTest, NearestIsLeftToTheCpu) {
  GpuTransformOptions g;
  g.interpolation = Interpolation::kNearest;
  EXPECT_EQ(g.Validate().code(), StatusCode::kUnsupported);
  g.interpolation = Interpolation::kBilinear;
  EXPECT_TRUE(g.Validate().ok());
}

TEST(GpuTransformOptionsTest, CreateWithoutADeviceSaysUnsupported) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a CUDA device is present";
  const Result<std::unique_ptr<GpuBatchTransformer>> gpu =
      GpuBatchTransformer::Create(GpuTransformOptions{});
  ASSERT_FALSE(gpu.has_value());
  EXPECT_EQ(gpu.error().code(), StatusCode::kUnsupported);
}

}  // namespace
}  // namespace stoker::decode::cuda
