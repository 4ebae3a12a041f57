// A trainer's image pipeline with feeders (decision 0013): what it yields is byte for byte a
// local run's, whatever the feeders do — answer, refuse, stop mid-pass, or never answer.
#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "common/log.h"
#include "decode/maker_version.h"
#include "feed/feed_test_util.h"
#include "loader/image_pipeline.h"

namespace stoker::feed {
namespace {

using loader::ImageBatch;
using loader::ImagePipeline;
using loader::ImagePipelineOptions;

// Everything a consumer sees of one batch, comparable.
struct Seen {
  std::string images;
  std::vector<int64_t> labels;
  std::vector<uint32_t> samples;
  std::vector<uint16_t> sources;
  uint32_t consumed = 0;
  std::vector<std::string> errors, not_images;
  bool operator==(const Seen&) const = default;
};

Seen SeenOf(const ImageBatch& b, size_t sample_bytes) {
  Seen s;
  s.images.assign(reinterpret_cast<const char*>(b.images.get()), b.count * sample_bytes);
  s.labels = b.labels;
  s.samples = b.samples;
  s.sources = b.sources;
  s.consumed = b.consumed;
  for (const auto& e : b.errors) s.errors.push_back(e.status.ToString());
  for (const auto& e : b.not_images) s.not_images.push_back(e.status.ToString());
  return s;
}

// Every batch of a pass, or the error that ended it; `after_first` runs once the first batch is
// in (e.g. to stop a feeder mid-pass).
struct Pass {
  std::vector<Seen> batches;
  Status error;
  loader::ImagePipelineStats stats;
};

Pass RunPass(std::vector<loader::ImageSource> sources, std::vector<uint16_t> order,
             const ImagePipelineOptions& o, const std::function<void()>& after_first = {}) {
  Pass pass;
  auto pipe = ImagePipeline::Start(std::move(sources), std::move(order), o);
  if (!pipe) {
    pass.error = pipe.error();
    return pass;
  }
  for (;;) {
    auto batch = (*pipe)->Next();
    if (!batch) {
      pass.error = batch.error();
      break;
    }
    if (!*batch) break;
    pass.batches.push_back(SeenOf(**batch, o.transform.output.sample_bytes()));
    if (pass.batches.size() == 1 && after_first) after_first();
  }
  pass.stats = (*pipe)->stats();
  return pass;
}

std::vector<uint32_t> Shuffled(uint32_t n) {
  std::vector<uint32_t> plan(n);
  for (uint32_t i = 0; i < n; ++i) plan[i] = (i * 17 + 5) % n;
  return plan;
}

loader::ImageSource SourceOf(const Images& images) {
  return {images.dataset, Shuffled(images.dataset->sample_count()), 0, images.uri};
}

// Float32 NCHW output: feeders answer uint8 NHWC, normalized and laid out by the trainer.
ImagePipelineOptions TrainerOptions() {
  ImagePipelineOptions o = TrainingOptions();
  o.threads = 1;
  o.batch_size = 7;
  o.transform.output.dtype = decode::DType::kFloat32;
  o.transform.output.layout = decode::Layout::kNCHW;
  o.feeders.secret = kSecret;
  o.feeders.slice_size = 3;
  return o;
}

void UseFeeder(ImagePipelineOptions& o, uint16_t port) {
  o.feeders.addresses.push_back({"127.0.0.1", port});
}

// Collects the loader's warnings.
class Warnings {
 public:
  Warnings() {
    log::SetSink([this](log::Level level, std::string_view line) {
      const std::lock_guard lock(mu_);
      if (level == log::Level::kWarning) lines_.emplace_back(line);
    });
  }
  ~Warnings() { log::SetSink({}); }
  std::vector<std::string> lines() const {
    const std::lock_guard lock(mu_);
    return lines_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> lines_;
};

uint64_t FeederSamples(const loader::ImagePipelineStats& stats) {
  uint64_t n = 0;
  for (const auto& f : stats.feeders) n += f.samples;
  return n;
}

TEST(TrainerFeeders, YieldTheLocalBatchesByteForByte) {
  const auto images = MakeImages(60);
  const ImagePipelineOptions local_options = TrainerOptions();
  const Pass local = RunPass({SourceOf(*images)}, {}, ImagePipelineOptions(local_options));
  ASSERT_TRUE(local.error.ok()) << local.error.ToString();
  ASSERT_GT(local.batches.size(), 5u);

  const auto a = StartFeeder(), b = StartFeeder();
  ImagePipelineOptions o = local_options;
  UseFeeder(o, a->port());
  UseFeeder(o, b->port());
  const Pass fed = RunPass({SourceOf(*images)}, {}, o);
  ASSERT_TRUE(fed.error.ok()) << fed.error.ToString();
  ASSERT_EQ(fed.batches.size(), local.batches.size());
  for (size_t i = 0; i < local.batches.size(); ++i) {
    EXPECT_TRUE(fed.batches[i] == local.batches[i]) << "batch " << i << " differs";
  }
  // The feeders made part of it. The bad samples (the truncated JPEG, the text file) are made
  // here whoever was given their slice, so their errors (compared above) are this trainer's.
  EXPECT_GT(FeederSamples(fed.stats), 0u);
  ASSERT_EQ(fed.stats.feeders.size(), 2u);
  EXPECT_GT(a->counters().slices.load() + b->counters().slices.load(), 0u);

  // uint8 NHWC, what feeders answer, is placed as is.
  ImagePipelineOptions raw = o, raw_local = local_options;
  raw.transform.output.dtype = raw_local.transform.output.dtype = decode::DType::kUint8;
  raw.transform.output.layout = raw_local.transform.output.layout = decode::Layout::kNHWC;
  const Pass fed_raw = RunPass({SourceOf(*images)}, {}, raw);
  const Pass local_raw = RunPass({SourceOf(*images)}, {}, raw_local);
  ASSERT_TRUE(fed_raw.error.ok()) << fed_raw.error.ToString();
  EXPECT_TRUE(fed_raw.batches == local_raw.batches);
}

TEST(TrainerFeeders, AMixIsMadeByteForByteToo) {
  const auto x = MakeImages(20), y = MakeImages(30);
  // Each source's whole plan, interleaved: runs of one source, cut where the source changes.
  const uint64_t nx = x->dataset->sample_count(), ny = y->dataset->sample_count();
  std::vector<uint16_t> order;
  for (uint64_t i = 0, a = 0, b = 0; a + b < nx + ny; ++i) {
    const bool first = (i % 5 < 2 && a < nx) || b == ny;
    order.push_back(first ? 0 : 1);
    ++(first ? a : b);
  }
  ImagePipelineOptions o = TrainerOptions();
  const Pass local = RunPass({SourceOf(*x), SourceOf(*y)}, order, o);
  ASSERT_TRUE(local.error.ok()) << local.error.ToString();
  const auto feeder = StartFeeder();
  UseFeeder(o, feeder->port());
  const Pass fed = RunPass({SourceOf(*x), SourceOf(*y)}, order, o);
  ASSERT_TRUE(fed.error.ok()) << fed.error.ToString();
  EXPECT_TRUE(fed.batches == local.batches);
  EXPECT_GT(FeederSamples(fed.stats), 0u);
}

TEST(TrainerFeeders, AFeederStoppedMidPassCostsOnlyTime) {
  const auto images = MakeImages(80);
  ImagePipelineOptions o = TrainerOptions();
  const Pass local = RunPass({SourceOf(*images)}, {}, o);
  auto feeder = StartFeeder();
  UseFeeder(o, feeder->port());
  const Warnings warnings;
  const Pass fed = RunPass({SourceOf(*images)}, {}, o, [&] { feeder->Shutdown(); });
  ASSERT_TRUE(fed.error.ok()) << fed.error.ToString();
  EXPECT_TRUE(fed.batches == local.batches);
  // Warned once for the feeder, however many of its slices failed.
  const auto lines = warnings.lines();
  EXPECT_LE(lines.size(), 1u);
  for (const auto& line : lines) {
    EXPECT_NE(line.find("127.0.0.1:" + std::to_string(feeder->port())), std::string::npos) << line;
  }
}

TEST(TrainerFeeders, AFeederOfAnotherJobOrBuildOrNoneAtAllLeavesTheWorkHere) {
  const auto images = MakeImages(30);
  ImagePipelineOptions o = TrainerOptions();
  const Pass local = RunPass({SourceOf(*images)}, {}, o);
  const auto stranger = StartFeeder(uint64_t{1} << 30, "another job's secret, 32 bytes!");
  // A port nothing listens on: take one and let it go.
  uint16_t closed = 0;
  {
    const auto gone = StartFeeder();
    closed = gone->port();
  }
  // A feeder of another build: its pixels might differ, so it is refused when the trainer joins.
  FeederOptions other_build;
  other_build.secret = kSecret;
  other_build.maker_version = "stoker 9.9.9; libjpeg-turbo 9.0.0; libpng 9.9.9";
  auto newer = Feeder::Start(other_build);
  ASSERT_TRUE(newer.has_value()) << newer.error().ToString();
  UseFeeder(o, stranger->port());
  UseFeeder(o, closed);
  UseFeeder(o, (*newer)->port());
  const Warnings warnings;
  const Pass fed = RunPass({SourceOf(*images)}, {}, o);
  ASSERT_TRUE(fed.error.ok()) << fed.error.ToString();
  EXPECT_TRUE(fed.batches == local.batches);
  EXPECT_EQ(FeederSamples(fed.stats), 0u);
  EXPECT_EQ(stranger->counters().slices.load(), 0u);
  EXPECT_EQ((*newer)->counters().slices.load(), 0u);
  const auto lines = warnings.lines();
  ASSERT_EQ(lines.size(), 3u) << "one warning per feeder";
  const auto warned = [&](std::string_view text) {
    return std::ranges::any_of(
        lines, [&](const std::string& l) { return l.find(text) != std::string::npos; });
  };
  EXPECT_TRUE(warned("PermissionDenied")) << lines[0];
  EXPECT_TRUE(warned("Unsupported")) << lines[0];
  // Both builds named.
  EXPECT_TRUE(warned(other_build.maker_version)) << lines[0];
  EXPECT_TRUE(warned(decode::MakerVersion())) << lines[0];
}

TEST(TrainerFeeders, AFeederAtItsMemoryLimitShedsTheLoadToTheTrainer) {
  const auto images = MakeImages(30);
  ImagePipelineOptions o = TrainerOptions();
  const Pass local = RunPass({SourceOf(*images)}, {}, o);
  const auto full = StartFeeder(/*memory_limit=*/1000);  // less than one slice's images
  UseFeeder(o, full->port());
  const Warnings warnings;
  const Pass fed = RunPass({SourceOf(*images)}, {}, o);
  ASSERT_TRUE(fed.error.ok()) << fed.error.ToString();
  EXPECT_TRUE(fed.batches == local.batches);
  EXPECT_GT(full->counters().refused.load(), 0u);
  EXPECT_EQ(FeederSamples(fed.stats), 0u);
  const auto lines = warnings.lines();
  ASSERT_EQ(lines.size(), 1u) << (lines.empty() ? "" : lines[0]);
  EXPECT_NE(lines[0].find("ResourceExhausted"), std::string::npos) << lines[0];
}

TEST(TrainerFeeders, UnderRaiseTheErrorIsTheTrainersOwn) {
  const auto images = MakeImages(30);
  ImagePipelineOptions o = TrainerOptions();
  o.on_error = loader::ErrorPolicy::kRaise;
  const Pass local = RunPass({SourceOf(*images)}, {}, o);
  ASSERT_FALSE(local.error.ok());
  const auto feeder = StartFeeder();
  UseFeeder(o, feeder->port());
  const Pass fed = RunPass({SourceOf(*images)}, {}, o);
  EXPECT_EQ(fed.error.ToString(), local.error.ToString());
  EXPECT_TRUE(fed.batches == local.batches);
}

TEST(TrainerFeeders, RefuseOptionsTheyCannotServe) {
  const auto images = MakeImages(4);
  ImagePipelineOptions o = TrainerOptions();
  UseFeeder(o, 1);
  loader::ImageSource no_uri = SourceOf(*images);
  no_uri.uri.clear();
  EXPECT_TRUE(RunPass({no_uri}, {}, o).error.IsInvalidArgument());
  ImagePipelineOptions short_secret = o;
  short_secret.feeders.secret = "short";
  EXPECT_TRUE(RunPass({SourceOf(*images)}, {}, short_secret).error.IsInvalidArgument());
  ImagePipelineOptions gpu = o;
  gpu.cuda_device = 0;
  EXPECT_TRUE(RunPass({SourceOf(*images)}, {}, gpu).error.IsUnsupported());
}

}  // namespace
}  // namespace stoker::feed
