#include "loader/image_pipeline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "dataset/packer.h"
#include "dataset/version_view.h"
#include "decode/device_batches.h"
#include "decode/transform.h"
#include "loader/sampler.h"
#include "storage/fault_storage.h"
#include "storage/memory_storage.h"
#include "testing/test_images.h"
#include "testing/test_util.h"

namespace stoker::loader {
namespace {

struct ImageSet {
  test::Tree tree;
  std::shared_ptr<const Dataset> dataset;
  std::vector<uint32_t> plan;
};

// `count` photo-like JPEGs (and a few PNGs) of assorted sizes in 3 class directories, plus the
// named bad files; read through `faults` if given.
ImageSet MakeImageSet(int count, const std::map<std::string, std::string>& extra = {},
                      const storage::FaultOptions* faults = nullptr) {
  ImageSet set;
  for (int i = 0; i < count; ++i) {
    const uint32_t w = 40 + (i * 37) % 260, h = 30 + (i * 53) % 200;
    const auto pixels = test::PhotoLikePixels(w, h, i);
    const std::string name = "c" + std::to_string(i % 3) + "/img" + std::to_string(i);
    if (i % 5 == 4) {
      set.tree.files[name + ".png"] = test::EncodePng(pixels, w, h);
    } else {
      test::JpegOptions o;
      o.progressive = i % 4 == 1;
      set.tree.files[name + ".jpg"] = test::EncodeJpeg(pixels, w, h, o);
    }
  }
  for (const auto& [path, data] : extra) set.tree.files[path] = data;
  auto storage = std::make_shared<storage::MemoryStorage>();
  dataset::PackOptions po;
  po.chunk_bytes = 256 << 10;
  auto source = test::TreeSource(set.tree);
  EXPECT_TRUE(dataset::Pack(*source, *storage, po).has_value());
  auto ds = faults ? Dataset::Open(std::make_shared<storage::FaultStorage>(storage, *faults))
                   : Dataset::Open(storage);
  EXPECT_TRUE(ds.has_value());
  set.dataset = std::shared_ptr<const Dataset>(std::move(*ds));
  std::vector<uint32_t> chunks;
  chunks.reserve(set.dataset->sample_count());
  for (uint32_t s = 0; s < set.dataset->sample_count(); ++s) {
    chunks.push_back(
        dataset::ViewOf(*set.dataset).file(set.dataset->SampleFiles(s).value().first).chunk);
  }
  SamplerOptions so;
  so.mode = ShuffleMode::kFull;
  so.seed = 5;
  set.plan = Sampler::Create(chunks, set.dataset->version(), so)->GlobalOrder(0, 1).value();
  return set;
}

ImagePipelineOptions SmallOptions(bool train) {
  ImagePipelineOptions o;
  o.batch_size = 7;
  o.threads = 2;
  o.seed = 11;
  o.transform.train = train;
  o.transform.output.width = 32;
  o.transform.output.height = 24;
  o.transform.resize = 40;
  o.read.memory_budget_bytes = 8 << 20;
  return o;
}

struct Epoch {
  std::vector<std::vector<std::byte>> images;  // one per image, in delivery order
  std::vector<uint32_t> samples;
  std::vector<int64_t> labels;
  std::vector<SampleError> errors;
  Status status;
};

Epoch RunEpoch(const ImageSet& set, const ImagePipelineOptions& options) {
  Epoch e;
  auto pipe = ImagePipeline::Start(set.dataset, set.plan, options);
  EXPECT_TRUE(pipe.has_value()) << pipe.error().ToString();
  const size_t bytes = options.transform.output.sample_bytes();
  for (;;) {
    auto batch = (*pipe)->Next();
    if (!batch) {
      e.status = batch.error();
      break;
    }
    const std::optional<ImageBatch> got = *std::move(batch);
    if (!got.has_value()) break;
    EXPECT_LE(got->count, options.batch_size);
    EXPECT_EQ(got->count + got->errors.size(), got->consumed);
    const std::byte* images = got->images.get();
    std::vector<std::byte> downloaded;
    if (got->device >= 0) {  // a GPU batch
      EXPECT_EQ(got->device, options.cuda_device);
      downloaded.resize(got->count * bytes);
      EXPECT_TRUE(decode::CopyToHost(got->device, images, downloaded).ok());
      images = downloaded.data();
    }
    for (uint32_t i = 0; i < got->count; ++i) {
      const std::byte* p = images + i * bytes;
      e.images.emplace_back(p, p + bytes);
    }
    e.samples.insert(e.samples.end(), got->samples.begin(), got->samples.end());
    e.labels.insert(e.labels.end(), got->labels.begin(), got->labels.end());
    e.errors.insert(e.errors.end(), got->errors.begin(), got->errors.end());
  }
  return e;
}

// Batches come in plan order with the right labels, and the pixels depend only on (seed, epoch,
// sample): not on the number of threads or the batch size.
TEST(ImagePipelineTest, DeterministicAcrossThreadsAndBatchSizes) {
  const ImageSet set = MakeImageSet(40);
  ImagePipelineOptions one = SmallOptions(true);
  one.threads = 1;
  one.batch_size = 40;
  ImagePipelineOptions many = SmallOptions(true);
  many.threads = 3;
  many.batch_size = 6;
  const Epoch a = RunEpoch(set, one);
  const Epoch b = RunEpoch(set, many);
  ASSERT_TRUE(a.status.ok()) << a.status.ToString();
  ASSERT_TRUE(b.status.ok()) << b.status.ToString();
  ASSERT_EQ(a.samples, set.plan);
  EXPECT_EQ(b.samples, set.plan);
  EXPECT_EQ(a.images, b.images);
  for (size_t i = 0; i < a.samples.size(); ++i) {
    EXPECT_EQ(a.labels[i], set.dataset->SampleLabel(a.samples[i]));
  }
  // Another epoch draws other crops.
  ImagePipelineOptions next = one;
  next.epoch = 1;
  EXPECT_NE(RunEpoch(set, next).images, a.images);
}

// Each delivered image is exactly what one Transformer makes of the sample's bytes.
TEST(ImagePipelineTest, ImagesEqualTheSingleSampleTransform) {
  const ImageSet set = MakeImageSet(12);
  for (bool train : {true, false}) {
    ImagePipelineOptions o = SmallOptions(train);
    o.transform.output.dtype = decode::DType::kUint8;
    o.transform.output.layout = decode::Layout::kNHWC;
    const Epoch e = RunEpoch(set, o);
    ASSERT_TRUE(e.status.ok()) << e.status.ToString();
    decode::Transformer transformer(o.transform);
    for (size_t i = 0; i < e.samples.size(); ++i) {
      const auto bytes =
          set.dataset->ReadFile(set.dataset->SampleFiles(e.samples[i]).value().first);
      ASSERT_TRUE(bytes.has_value());
      std::vector<std::byte> expected(o.transform.output.sample_bytes());
      ASSERT_TRUE(
          transformer.Run(*bytes, decode::AugmentSeed(o.seed, 0, e.samples[i]), expected.data())
              .ok());
      EXPECT_EQ(e.images[i], expected) << "sample " << e.samples[i] << " train " << train;
    }
  }
}

// Bad files: skipped and named under kSkip, the first one raised (with earlier batches
// delivered) under kRaise. Never garbage in a batch.
TEST(ImagePipelineTest, BadImagesFollowThePolicy) {
  const auto pixels = test::PhotoLikePixels(120, 90, 99);
  std::string truncated = test::EncodeJpeg(pixels, 120, 90);
  truncated.resize(truncated.size() / 2);
  // A valid JPEG whose frame header claims 60000 x 60000 pixels (3.6 Gpixel).
  std::string huge = test::EncodeJpeg(pixels, 120, 90);
  const size_t sof = huge.find("\xFF\xC0");
  ASSERT_NE(sof, std::string::npos);
  huge[sof + 5] = huge[sof + 7] = static_cast<char>(0xEA);
  huge[sof + 6] = huge[sof + 8] = static_cast<char>(0x60);
  const ImageSet set = MakeImageSet(20, {{"c0/truncated.jpg", truncated},
                                         {"c1/notes.jpg", "this is not an image at all"},
                                         {"c2/huge.jpg", huge}});
  ImagePipelineOptions skip = SmallOptions(true);
  skip.on_error = ErrorPolicy::kSkip;
  const Epoch e = RunEpoch(set, skip);
  ASSERT_TRUE(e.status.ok()) << e.status.ToString();
  EXPECT_EQ(e.images.size(), 20u);
  ASSERT_EQ(e.errors.size(), 3u);
  std::string messages;
  for (const SampleError& err : e.errors) {
    EXPECT_FALSE(err.status.ok());
    EXPECT_EQ(set.plan[err.position], err.sample);
    messages += err.status.ToString() + "\n";
  }
  EXPECT_NE(messages.find("c0/truncated.jpg"), std::string::npos) << messages;
  EXPECT_NE(messages.find("c1/notes.jpg"), std::string::npos) << messages;
  EXPECT_NE(messages.find("c2/huge.jpg"), std::string::npos) << messages;

  ImagePipelineOptions raise = SmallOptions(true);
  const Epoch r = RunEpoch(set, raise);
  EXPECT_FALSE(r.status.ok());
  EXPECT_LT(r.images.size(), 20u);
  EXPECT_EQ(r.images.size() % raise.batch_size, 0u);  // whole batches before the bad one
}

// A batch the caller still holds is never reused for later batches.
TEST(ImagePipelineTest, HeldBatchesAreNotRecycled) {
  const ImageSet set = MakeImageSet(30);
  ImagePipelineOptions o = SmallOptions(true);
  o.batch_size = 3;
  o.prefetch_batches = 1;
  auto pipe = ImagePipeline::Start(set.dataset, set.plan, o);
  ASSERT_TRUE(pipe.has_value());
  auto next = (*pipe)->Next();
  ASSERT_TRUE(next.has_value());
  const std::optional<ImageBatch> maybe_first = *std::move(next);
  if (!maybe_first.has_value()) FAIL() << "no first batch";
  const ImageBatch& first = *maybe_first;
  const size_t bytes = o.transform.output.sample_bytes() * first.count;
  const std::vector<std::byte> copy(first.images.get(), first.images.get() + bytes);
  for (;;) {
    auto batch = (*pipe)->Next();
    ASSERT_TRUE(batch.has_value());
    const std::optional<ImageBatch> got = *std::move(batch);
    if (!got.has_value()) break;
    EXPECT_NE(got->images.get(), first.images.get());
  }
  EXPECT_EQ(std::memcmp(copy.data(), first.images.get(), bytes), 0);
}

// Destroying a pipeline mid-epoch stops its threads promptly (no hang, no leak under ASan).
TEST(ImagePipelineTest, StopsMidEpoch) {
  const ImageSet set = MakeImageSet(30);
  for (int taken = 0; taken < 3; ++taken) {
    auto pipe = ImagePipeline::Start(set.dataset, set.plan, SmallOptions(true));
    ASSERT_TRUE(pipe.has_value());
    for (int i = 0; i < taken; ++i) ASSERT_TRUE((*pipe)->Next().has_value());
  }
}

TEST(ImagePipelineTest, RejectsBadOptions) {
  const ImageSet set = MakeImageSet(3);
  ImagePipelineOptions o = SmallOptions(true);
  o.batch_size = 0;
  EXPECT_FALSE(ImagePipeline::Start(set.dataset, set.plan, o).has_value());
  o = SmallOptions(false);
  o.transform.resize = 10;  // smaller than the crop
  EXPECT_FALSE(ImagePipeline::Start(set.dataset, set.plan, o).has_value());
  o = SmallOptions(true);
  o.transform.crop.scale_min = 0;
  EXPECT_FALSE(ImagePipeline::Start(set.dataset, set.plan, o).has_value());
}

// Two sources in an interleaved order: every image comes from the source `order` names, in
// that source's plan order, decoded with the validation transform (deterministic) as the
// source alone decodes it.
TEST(ImagePipelineTest, MixesSourcesInTheOrderGiven) {
  const ImageSet a = MakeImageSet(12), b = MakeImageSet(7);
  const ImagePipelineOptions o = SmallOptions(false);
  const Epoch alone_a = RunEpoch(a, o), alone_b = RunEpoch(b, o);
  std::vector<uint16_t> order;
  order.reserve(a.plan.size() + b.plan.size());
  for (size_t i = 0; i < a.plan.size() + b.plan.size(); ++i) {
    order.push_back(i % 2 == 1 && std::ranges::count(order, 1) < 7 ? 1 : 0);
  }
  std::vector<ImageSource> sources = {{a.dataset, a.plan, 0, {}}, {b.dataset, b.plan, 4 << 20, {}}};
  auto pipe = ImagePipeline::Start(sources, order, o);
  ASSERT_TRUE(pipe.has_value()) << pipe.error().ToString();
  const size_t bytes = o.transform.output.sample_bytes();
  size_t position = 0, next[2] = {0, 0};
  for (;;) {
    auto batch = (*pipe)->Next();
    ASSERT_TRUE(batch.has_value()) << batch.error().ToString();
    const std::optional<ImageBatch> got = *std::move(batch);
    if (!got.has_value()) break;
    for (uint32_t i = 0; i < got->count; ++i, ++position) {
      const uint16_t s = got->sources[i];
      ASSERT_EQ(s, order[position]);
      const Epoch& alone = s == 0 ? alone_a : alone_b;
      const size_t k = next[s]++;
      EXPECT_EQ(got->samples[i], alone.samples[k]);
      EXPECT_EQ(std::memcmp(got->images.get() + i * bytes, alone.images[k].data(), bytes), 0);
    }
  }
  EXPECT_EQ(position, order.size());
  // An order that does not take each plan exactly is refused.
  order.pop_back();
  EXPECT_FALSE(ImagePipeline::Start(sources, order, o).has_value());
  order.push_back(2);
  EXPECT_FALSE(ImagePipeline::Start(sources, order, o).has_value());
}

// The consumer's wait for each batch is split between the reads of its samples and their
// decoding (issue 17): on a slow store the reads take the blame, on a fast store with one
// decode thread the decoding does.
TEST(ImagePipelineTest, AttributesTheConsumersWaitToReadsOrDecoding) {
  const auto run = [](const ImageSet& set, const ImagePipelineOptions& o) {
    auto pipe = ImagePipeline::Start(set.dataset, set.plan, o);
    EXPECT_TRUE(pipe.has_value());
    double waited = 0, read = 0;
    for (;;) {
      auto batch = (*pipe)->Next();
      EXPECT_TRUE(batch.has_value());
      if (!batch.has_value() || !*batch) break;
      EXPECT_LE((*batch)->read_waited_seconds, (*batch)->waited_seconds);
      waited += (*batch)->waited_seconds;
      read += (*batch)->read_waited_seconds;
    }
    return std::pair(waited, read);
  };
  storage::FaultOptions slow;
  slow.path_filter = "chunks/";
  slow.read_delay = std::chrono::milliseconds(40);
  ImagePipelineOptions o = SmallOptions(false);
  o.read.io_depth = 1;
  o.read.max_range_bytes = 16 << 10;  // a read per image or two
  const auto [slow_waited, slow_read] = run(MakeImageSet(20, {}, &slow), o);
  EXPECT_GT(slow_read, 0);  // 20 reads of 40 ms, one at a time: the consumer waited on them

  o = SmallOptions(false);
  o.threads = 1;
  o.transform.output.width = 256;  // decoding and resizing dominate
  o.transform.output.height = 256;
  o.transform.resize = 300;
  const auto [fast_waited, fast_read] = run(MakeImageSet(40), o);
  EXPECT_GT(fast_waited, 0);
  // Which share of the wait is the reads' is the point, not how long anything took: compared
  // between the two runs, not with a fixed bound that a loaded machine could cross.
  EXPECT_GT(slow_read / slow_waited, fast_read / fast_waited)
      << "slow reads: " << slow_read << " of " << slow_waited << " s; slow decoding: " << fast_read
      << " of " << fast_waited << " s";
}

namespace gpu {

// Without a GPU (or a CUDA build), asking for one fails at Start and says which is missing.
TEST(ImagePipelineGpuTest, WithoutAGpuStartSaysWhy) {
  if (decode::CudaDeviceCount() > 0) GTEST_SKIP() << "a CUDA device is present";
  const ImageSet set = MakeImageSet(4);
  ImagePipelineOptions o = SmallOptions(true);
  o.cuda_device = 0;
  auto pipe = ImagePipeline::Start(set.dataset, set.plan, o);
  ASSERT_FALSE(pipe.has_value());
  EXPECT_EQ(pipe.error().code(), StatusCode::kUnsupported);
  EXPECT_NE(
      pipe.error().message().find(decode::BuiltWithCuda() ? "no CUDA device" : "built without"),
      std::string::npos)
      << pipe.error().ToString();
}

float ValueAt(const std::vector<std::byte>& image, size_t i, decode::DType dtype) {
  if (dtype == decode::DType::kUint8) return static_cast<float>(image[i]);
  float v = 0;
  std::memcpy(&v, image.data() + i * sizeof(float), sizeof(float));
  return v;
}

// On a GPU: the batches of the CPU path (run with dct_scaling off, as the GPU decodes whole
// resolution) — the same samples, labels and skipped samples in the same order, PNGs (done on
// the CPU and uploaded) equal, JPEGs within nvJPEG's rounding of libjpeg-turbo's.
TEST(ImagePipelineGpuTest, MakesTheCpuPathsBatches) {
  if (decode::CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  std::string truncated = test::EncodeJpeg(test::PhotoLikePixels(64, 48, 3), 64, 48, {});
  truncated.resize(truncated.size() / 2);
  const ImageSet set = MakeImageSet(45, {{"c1/cut.jpg", truncated}, {"c2/text.jpg", "hello"}});
  for (const bool train : {true, false}) {
    for (const decode::DType dtype : {decode::DType::kUint8, decode::DType::kFloat32}) {
      SCOPED_TRACE(::testing::Message()
                   << "train " << train << " uint8 " << (dtype == decode::DType::kUint8));
      ImagePipelineOptions cpu = SmallOptions(train);
      cpu.transform.dct_scaling = false;
      cpu.transform.output.dtype = dtype;
      cpu.transform.output.layout =
          dtype == decode::DType::kUint8 ? decode::Layout::kNCHW : decode::Layout::kNHWC;
      cpu.on_error = ErrorPolicy::kSkip;
      ImagePipelineOptions on_gpu = cpu;
      on_gpu.cuda_device = 0;
      on_gpu.gpu_threads = train ? 1 : 3;  // batches stay in order with several in flight
      const Epoch a = RunEpoch(set, cpu), b = RunEpoch(set, on_gpu);
      ASSERT_TRUE(b.status.ok()) << b.status.ToString();
      ASSERT_EQ(a.samples, b.samples);
      EXPECT_EQ(a.labels, b.labels);
      ASSERT_EQ(a.errors.size(), 2u);
      ASSERT_EQ(b.errors.size(), 2u);
      for (size_t i = 0; i < 2; ++i) {
        EXPECT_EQ(a.errors[i].sample, b.errors[i].sample);
        EXPECT_EQ(a.errors[i].status.code(), b.errors[i].status.code())
            << b.errors[i].status.ToString();
      }
      // One uint8 step, in output units.
      const float step = dtype == decode::DType::kUint8 ? 1.0f : 1.0f / (255 * 0.224f);
      const size_t values = cpu.transform.output.sample_bytes() /
                            (dtype == decode::DType::kUint8 ? 1 : sizeof(float));
      for (size_t i = 0; i < a.images.size(); ++i) {
        const std::string path =
            set.dataset->FilePath(set.dataset->SampleFiles(a.samples[i]).value().first);
        double largest = 0, sum = 0;
        for (size_t v = 0; v < values; ++v) {
          const double d =
              std::abs(ValueAt(a.images[i], v, dtype) - ValueAt(b.images[i], v, dtype));
          largest = std::max(largest, d);
          sum += d;
        }
        if (path.ends_with(".png")) {
          EXPECT_EQ(largest, 0) << path;
        } else {
          EXPECT_LE(largest, 2.01 * step) << path;
          EXPECT_LE(sum / values, 0.5 * step) << path;
        }
      }
    }
  }
}

// On a GPU under on_error=raise: the damaged JPEG's error names it.
TEST(ImagePipelineGpuTest, ABadJpegIsReportedByName) {
  if (decode::CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  std::string truncated = test::EncodeJpeg(test::PhotoLikePixels(64, 48, 3), 64, 48, {});
  truncated.resize(truncated.size() / 2);
  const ImageSet set = MakeImageSet(10, {{"c1/cut.jpg", truncated}});
  ImagePipelineOptions o = SmallOptions(true);
  o.cuda_device = 0;
  const Epoch e = RunEpoch(set, o);
  ASSERT_FALSE(e.status.ok());
  EXPECT_EQ(e.status.code(), StatusCode::kInvalidArgument) << e.status.ToString();
  EXPECT_NE(e.status.ToString().find("c1/cut.jpg"), std::string::npos) << e.status.ToString();
}

}  // namespace gpu

}  // namespace
}  // namespace stoker::loader
