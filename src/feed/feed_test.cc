// stoker feed: slices made by a feeder are byte for byte the rows the trainer makes itself.
#include <gtest/gtest.h>

#include <map>

#include "common/option_table.h"
#include "dataset/packer.h"
#include "decode/maker_version.h"
#include "decode/transform_option_table.h"
#include "feed/feed_test_util.h"
#include "feed/feeder.h"
#include "feed_client/feeder_client.h"
#include "feed_client/slice.h"
#include "loader/image_pipeline.h"
#include "net/payload.h"
#include "storage/posix_storage.h"
#include "testing/test_images.h"
#include "testing/test_util.h"

namespace stoker::feed {
namespace {

using namespace std::chrono_literals;

SliceRequest RequestFor(const Images& images, const loader::ImagePipelineOptions& o,
                        std::vector<uint32_t> samples) {
  SliceRequest q;
  q.uri = images.uri;
  q.version = images.dataset->version();
  q.seed = o.seed;
  q.epoch = o.epoch;
  q.transform = OptionsText(decode::TransformOptionTable(), o.transform);
  q.samples = std::move(samples);
  return q;
}

std::unique_ptr<FeederConnection> ConnectTo(const Feeder& feeder,
                                            std::string_view secret = kSecret) {
  auto c =
      FeederConnection::Connect("127.0.0.1", feeder.port(), secret, decode::MakerVersion(), 5s);
  EXPECT_TRUE(c.has_value()) << c.error().ToString();
  return c.has_value() ? std::move(*c) : nullptr;
}

TEST(Feeder, MakesSlicesByteForByteAsTheTrainer) {
  const auto images = MakeImages(40);
  const uint32_t n = images->dataset->sample_count();
  std::vector<uint32_t> plan(n);
  for (uint32_t i = 0; i < n; ++i) plan[i] = (i * 17 + 5) % n;  // a shuffled order
  loader::ImagePipelineOptions o = TrainingOptions();
  o.batch_size = n;  // the whole plan in one batch, made here, as the trainer would
  auto local = loader::ImagePipeline::Start(images->dataset, plan, o);
  ASSERT_TRUE(local.has_value());
  auto whole = (*local)->Next();
  ASSERT_TRUE(whole.has_value() && whole->has_value());
  const loader::ImageBatch& batch = **whole;
  ASSERT_EQ(batch.errors.size(), 1u);      // the truncated JPEG
  ASSERT_EQ(batch.not_images.size(), 1u);  // the text file
  const size_t sample_bytes = o.transform.output.sample_bytes();
  const std::string_view rows(reinterpret_cast<const char*>(batch.images.get()),
                              size_t{batch.count} * sample_bytes);

  const auto feeder = StartFeeder();
  const auto connection = ConnectTo(*feeder);
  ASSERT_NE(connection, nullptr);
  std::string made;
  std::vector<int64_t> labels;
  std::map<SampleOutcome, int> outcomes;
  for (uint32_t begin = 0; begin < n;) {  // slices of 1, 6, 11, 16, ... samples
    const uint32_t end = std::min(n, begin + 1 + 5 * (begin % 4));
    auto answer = connection->Make(
        RequestFor(*images, o, std::vector<uint32_t>(plan.begin() + begin, plan.begin() + end)),
        10s);
    ASSERT_TRUE(answer.has_value()) << answer.error().ToString();
    EXPECT_EQ(answer->sample_bytes, sample_bytes);
    for (const MadeSample& s : answer->samples) {
      ++outcomes[s.outcome];
      if (s.outcome == SampleOutcome::kMade) labels.push_back(s.label);
    }
    made += answer->pixels();
    begin = end;
  }
  EXPECT_EQ(outcomes[SampleOutcome::kFailed], 1);
  EXPECT_EQ(outcomes[SampleOutcome::kNotImage], 1);
  EXPECT_EQ(labels, batch.labels);
  ASSERT_EQ(made.size(), rows.size());
  EXPECT_TRUE(made == rows) << "the feeder's pixels differ from the trainer's";
  EXPECT_EQ(feeder->counters().samples.load(), n);
}

TEST(Feeder, RefusesWhatItCannotMake) {
  const auto images = MakeImages(6);
  const auto feeder = StartFeeder();
  // Another job's secret fails the handshake.
  auto wrong = FeederConnection::Connect(
      "127.0.0.1", feeder->port(), "another job's secret, 32 bytes!", decode::MakerVersion(), 5s);
  ASSERT_FALSE(wrong.has_value());
  EXPECT_TRUE(wrong.error().IsPermissionDenied()) << wrong.error().ToString();

  const auto connection = ConnectTo(*feeder);
  ASSERT_NE(connection, nullptr);
  const loader::ImagePipelineOptions o = TrainingOptions();
  SliceRequest q = RequestFor(*images, o, {0, 1});
  q.version += 1;  // a version the dataset does not have: never another version's images
  auto answer = connection->Make(q, 10s);
  ASSERT_FALSE(answer.has_value());
  EXPECT_TRUE(answer.error().IsNotFound()) << answer.error().ToString();

  q = RequestFor(*images, o, {0, 1});
  q.transform = "size=abc\n";
  answer = connection->Make(q, 10s);
  ASSERT_FALSE(answer.has_value());
  EXPECT_TRUE(answer.error().IsInvalidArgument()) << answer.error().ToString();
  EXPECT_NE(answer.error().message().find("size"), std::string::npos);

  // A slice whose images could not fit one answer frame.
  q = RequestFor(*images, o, std::vector<uint32_t>(kMaxSliceSamples, 0));
  loader::ImagePipelineOptions big = o;
  big.transform.output.width = big.transform.output.height = 256;
  q.transform = OptionsText(decode::TransformOptionTable(), big.transform);
  answer = connection->Make(q, 10s);
  ASSERT_FALSE(answer.has_value());
  EXPECT_TRUE(answer.error().IsInvalidArgument()) << answer.error().ToString();

  // Errors leave the connection in step: the next slice is made.
  answer = connection->Make(RequestFor(*images, o, {2, 3}), 10s);
  ASSERT_TRUE(answer.has_value()) << answer.error().ToString();
  EXPECT_EQ(answer->samples.size(), 2u);
}

TEST(Feeder, ShedsLoadAtItsMemoryLimit) {
  const auto images = MakeImages(6);
  const auto feeder = StartFeeder(/*memory_limit=*/1000);  // less than one slice's images
  const auto connection = ConnectTo(*feeder);
  ASSERT_NE(connection, nullptr);
  auto answer = connection->Make(RequestFor(*images, TrainingOptions(), {0, 1, 2}), 10s);
  ASSERT_FALSE(answer.has_value());
  EXPECT_TRUE(answer.error().IsResourceExhausted()) << answer.error().ToString();
  EXPECT_EQ(feeder->counters().refused.load(), 1u);
}

// Rows a trainer keeps as the wire carries them are received straight into its batch: only
// when every sample was made and the rows are exactly the answer's pixels.
TEST(FeederConnection, ReceivesPixelsStraightIntoTheCallersRows) {
  const auto images = MakeImages(12);
  const auto feeder = StartFeeder();
  const auto connection = ConnectTo(*feeder);
  ASSERT_NE(connection, nullptr);
  const loader::ImagePipelineOptions o = TrainingOptions();
  const size_t sample_bytes = o.transform.output.sample_bytes();
  // Each sample on its own, as a whole answer: which are made, and their rows.
  std::vector<uint32_t> made;
  std::vector<std::string> rows(images->dataset->sample_count());
  std::vector<uint32_t> not_made;
  for (uint32_t i = 0; i < images->dataset->sample_count(); ++i) {
    auto one = connection->Make(RequestFor(*images, o, {i}), 10s);
    ASSERT_TRUE(one.has_value()) << one.error().ToString();
    if (one->samples[0].outcome == SampleOutcome::kMade) {
      made.push_back(i);
      rows[i] = one->pixels();
    } else {
      not_made.push_back(i);
    }
  }
  ASSERT_GE(made.size(), 3u);
  ASSERT_FALSE(not_made.empty());  // the truncated JPEG, the text file
  const auto receive = [&](std::vector<uint32_t> samples, std::string& into) {
    EXPECT_TRUE(connection->Send(RequestFor(*images, o, std::move(samples)), 10s).ok());
    return connection->Receive(10s, std::as_writable_bytes(std::span(into)));
  };

  const std::vector<uint32_t> three(made.begin(), made.begin() + 3);
  std::string batch(3 * sample_bytes, '\xab');
  auto placed = receive(three, batch);
  ASSERT_TRUE(placed.has_value()) << placed.error().ToString();
  EXPECT_TRUE(placed->pixels_placed);
  EXPECT_TRUE(placed->pixels().empty());
  EXPECT_TRUE(batch == rows[three[0]] + rows[three[1]] + rows[three[2]]);

  // A sample not made: no pixel of the answer goes there, and the rows are left as they were.
  std::string untouched(3 * sample_bytes, '\xab');
  auto partly = receive({three[0], not_made[0], three[1]}, untouched);
  ASSERT_TRUE(partly.has_value()) << partly.error().ToString();
  EXPECT_FALSE(partly->pixels_placed);
  EXPECT_TRUE(partly->pixels() == rows[three[0]] + rows[three[1]]);
  EXPECT_TRUE(untouched == std::string(3 * sample_bytes, '\xab'));

  // Rows of another size: the answer keeps its pixels.
  std::string small(3 * sample_bytes - 1, '\xab');
  auto other = receive(three, small);
  ASSERT_TRUE(other.has_value()) << other.error().ToString();
  EXPECT_FALSE(other->pixels_placed);
  EXPECT_TRUE(other->pixels() == batch);
  EXPECT_TRUE(connection->in_step());
}

TEST(SliceCodec, RoundTripsAndRefusesMalformedPayloads) {
  SliceRequest q;
  q.uri = "s3://bucket/ds";
  q.version = 7;
  q.seed = 1;
  q.epoch = 2;
  q.transform = "train=true\n";
  q.samples = {5, 1, 9};
  auto back = DecodeSliceRequest(EncodeSliceRequest(q));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->uri, q.uri);
  EXPECT_EQ(back->samples, q.samples);
  const std::string payload = EncodeSliceRequest(q);
  EXPECT_FALSE(DecodeSliceRequest(payload.substr(0, payload.size() - 1)).has_value());
  EXPECT_FALSE(DecodeSliceRequest(payload + "x").has_value());

  SliceAnswer a;
  a.sample_bytes = 3;
  a.samples = {{SampleOutcome::kMade, 4, ""}, {SampleOutcome::kFailed, -1, "x.jpg: truncated"}};
  auto answer = DecodeSliceAnswer(EncodeSliceAnswer(a, "abc"), "peer");
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->samples[1].message, "x.jpg: truncated");
  EXPECT_EQ(answer->samples[0].label, 4);
  EXPECT_EQ(answer->pixels(), "abc");
  std::string encoded = EncodeSliceAnswer(a, "abc");
  auto short_pixels = DecodeSliceAnswer(encoded.substr(0, encoded.size() - 1), "peer");
  ASSERT_FALSE(short_pixels.has_value());
  EXPECT_TRUE(short_pixels.error().IsCorruption());
  encoded[8] = 9;  // the first sample's outcome
  EXPECT_FALSE(DecodeSliceAnswer(encoded, "peer").has_value());
}

TEST(OptionsText, TransformOptionsReadBackBitForBit) {
  decode::TransformOptions o;
  o.flip_probability = 1.0 / 3;
  o.output.mean[1] = 0.1f / 3;
  o.zoom_min = 1 / 1.3;
  o.zoom_max = 1.3;
  o.train = false;
  const std::string text = OptionsText(decode::TransformOptionTable(), o);
  decode::TransformOptions back;
  ASSERT_TRUE(ParseOptionsText(decode::TransformOptionTable(), text, back).ok()) << text;
  EXPECT_EQ(OptionsText(decode::TransformOptionTable(), back), text);
  EXPECT_EQ(back.flip_probability, o.flip_probability);
  EXPECT_EQ(back.output.mean[1], o.output.mean[1]);
  EXPECT_EQ(back.zoom_max, o.zoom_max);
  EXPECT_FALSE(back.train);
  EXPECT_FALSE(ParseOptionsText(decode::TransformOptionTable(), "nonsense=1\n", back).ok());
  EXPECT_FALSE(ParseOptionsText(decode::TransformOptionTable(), "flip\n", back).ok());
}

}  // namespace
}  // namespace stoker::feed
