// What the feeder tests share: photo-like images packed on disk, a trainer's options, a feeder.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "dataset/packer.h"
#include "feed/feeder.h"
#include "loader/image_pipeline.h"
#include "storage/posix_storage.h"
#include "testing/test_images.h"
#include "testing/test_util.h"

namespace stoker::feed {

inline constexpr std::string_view kSecret = "feeder test secret, 32 bytes...";

// A packed directory of photo-like JPEGs and PNGs, a truncated JPEG and a text file, on disk (a
// feeder opens datasets by URI).
struct Images {
  test::TempDir dir;
  std::string uri;
  std::shared_ptr<const Dataset> dataset;
};

inline std::unique_ptr<Images> MakeImages(int count) {
  auto images = std::make_unique<Images>();
  test::Tree tree;
  for (int i = 0; i < count; ++i) {
    const uint32_t w = 40 + (i * 37) % 260, h = 30 + (i * 53) % 200;
    const auto pixels = test::PhotoLikePixels(w, h, i);
    const std::string name = "c" + std::to_string(i % 3) + "/img" + std::to_string(i);
    tree.files[name + (i % 5 == 4 ? ".png" : ".jpg")] =
        i % 5 == 4 ? test::EncodePng(pixels, w, h) : test::EncodeJpeg(pixels, w, h, {});
  }
  tree.files["c1/cut.jpg"] = tree.files["c1/img1.jpg"].substr(0, 300);
  tree.files["c2/notes.txt"] = "not an image";
  test::WriteTree(tree, images->dir.path() + "/src");
  images->uri = images->dir.path() + "/ds";
  dataset::PackOptions po;
  po.chunk_bytes = 256 << 10;
  EXPECT_TRUE(
      test::PackDirectory(images->dir.path() + "/src", *storage::NewPosixStorage(images->uri), po)
          .has_value());
  auto ds = Dataset::Open(images->uri);
  EXPECT_TRUE(ds.has_value());
  images->dataset = std::move(*ds);
  return images;
}

inline loader::ImagePipelineOptions TrainingOptions() {
  loader::ImagePipelineOptions o;
  o.threads = 2;
  o.seed = 11;
  o.epoch = 3;
  o.on_error = loader::ErrorPolicy::kSkip;
  o.transform.train = true;
  o.transform.output.width = 32;
  o.transform.output.height = 24;
  o.transform.output.dtype = decode::DType::kUint8;
  o.transform.output.layout = decode::Layout::kNHWC;
  return o;
}

inline std::unique_ptr<Feeder> StartFeeder(uint64_t memory_limit = uint64_t{1} << 30,
                                           std::string_view secret = kSecret) {
  FeederOptions o;
  o.secret = secret;
  o.threads = 2;
  o.memory_limit = memory_limit;
  auto feeder = Feeder::Start(o);
  EXPECT_TRUE(feeder.has_value()) << feeder.error().ToString();
  return std::move(*feeder);
}

}  // namespace stoker::feed
