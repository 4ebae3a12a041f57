// Round trips: random source trees packed with several chunk sizes, read back through the
// public Dataset API, compared byte for byte, path for path, label for label.
#include "stoker/dataset.h"
#include "dataset/version_view.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <thread>

#include "common/crc32c.h"
#include "dataset/packer.h"
#include "format/chunk.h"
#include "format/snapshot.h"
#include "storage/memory_storage.h"
#include "storage/posix_storage.h"
#include "testing/test_util.h"

namespace stoker {
namespace {

using test::AsString;

struct RoundTripCase {
  uint64_t seed;
  uint64_t chunk_bytes;
  bool posix;         // destination: a real directory, or the in-memory store
  bool image_folder;  // ImageFolder layout (labelled) or a free-form tree
};

std::string CaseName(const ::testing::TestParamInfo<RoundTripCase>& p) {
  return fmt::format("seed{}_chunk{}_{}_{}", p.param.seed, p.param.chunk_bytes,
                     p.param.posix ? "posix" : "memory",
                     p.param.image_folder ? "imagefolder" : "tree");
}

class RoundTripTest : public ::testing::TestWithParam<RoundTripCase> {};

// Everything a reader can observe equals the source tree.
void ExpectDatasetEqualsTree(const Dataset& ds, const test::Tree& tree) {
  ASSERT_EQ(ds.file_count(), tree.files.size());
  ASSERT_EQ(ds.sample_count(), tree.files.size());
  const auto classes = tree.Classes();
  ASSERT_EQ(ds.class_count(), classes.size());
  for (uint32_t k = 0; k < classes.size(); ++k) EXPECT_EQ(ds.ClassName(k), classes[k]);

  std::set<uint32_t> seen;
  for (const auto& [path, data] : tree.files) {
    auto index = ds.Find(path);
    ASSERT_TRUE(index.has_value()) << path;
    EXPECT_TRUE(seen.insert(*index).second);
    EXPECT_EQ(ds.FilePath(*index), path);
    auto info = ds.Stat(*index);
    ASSERT_TRUE(info.has_value());
    EXPECT_EQ(info->index, *index);
    EXPECT_EQ(info->path, path);
    EXPECT_EQ(info->size, data.size());
    EXPECT_EQ(info->crc32c, crc32c::Value(data));
    EXPECT_EQ(info->label, tree.ExpectedLabel(path)) << path;
    EXPECT_EQ(ds.SampleLabel(*index), info->label);
    EXPECT_EQ(ds.SampleFiles(*index).value(), std::make_pair(*index, uint64_t{1}));
    auto bytes = ds.ReadFile(*index);
    ASSERT_TRUE(bytes.has_value()) << bytes.error().ToString();
    EXPECT_TRUE(AsString(*bytes) == data) << path;  // not EXPECT_EQ: no 200 KB diffs
    std::vector<std::byte> into(data.size());
    ASSERT_TRUE(ds.ReadFileInto(*index, into).ok());
    EXPECT_TRUE(AsString(into) == data) << path;
  }
  for (const auto& dir : tree.Dirs()) {
    auto listing = ds.List(dir);
    ASSERT_TRUE(listing.has_value()) << dir << ": " << listing.error().ToString();
    std::vector<std::pair<std::string, bool>> got;
    for (const auto& e : *listing) {
      got.emplace_back(e.name, e.is_dir);
      const std::string full = dir.empty() ? e.name : dir + "/" + e.name;
      if (!e.is_dir) {
        EXPECT_EQ(e.size, tree.files.at(full).size());
        EXPECT_EQ(ds.FilePath(e.index), full);
      }
    }
    EXPECT_EQ(got, tree.Listing(dir)) << "listing of '" << dir << "'";
  }
}

TEST_P(RoundTripTest, EveryByteAndPathSurvives) {
  const RoundTripCase c = GetParam();
  test::RandomTreeOptions options;
  options.image_folder = c.image_folder;
  const test::Tree tree = test::RandomTree(c.seed, options);
  test::TempDir src, dst_dir;
  test::WriteTree(tree, src.path());

  std::shared_ptr<Storage> dst = c.posix ? storage::NewPosixStorage(dst_dir.path())
                                         : std::make_shared<storage::MemoryStorage>();
  dataset::PackOptions pack_options;
  pack_options.chunk_bytes = c.chunk_bytes;
  // A tree with files in its root keeps them all only without labels (see Tree::ExpectedLabel).
  if (tree.Classes().empty()) pack_options.labels = dataset::LabelPolicy::kNone;
  uint64_t progress_calls = 0, last_files = 0;
  pack_options.progress = [&](const dataset::PackProgress& p) {
    ++progress_calls;
    EXPECT_GE(p.files_done, last_files);
    last_files = p.files_done;
    EXPECT_EQ(p.files_total, tree.files.size());
  };
  auto summary = test::PackDirectory(src.path(), *dst, pack_options);
  ASSERT_TRUE(summary.has_value()) << summary.error().ToString();
  EXPECT_EQ(summary->version, 1u);
  EXPECT_EQ(summary->files_added, tree.files.size());
  EXPECT_EQ(summary->files_total, tree.files.size());
  EXPECT_EQ(summary->bytes_added, tree.TotalBytes());
  EXPECT_EQ(summary->chunks_added, summary->chunks_total);
  EXPECT_EQ(summary->samples, tree.files.size());
  EXPECT_EQ(summary->classes, tree.Classes().size());
  EXPECT_EQ(last_files, tree.files.size());
  EXPECT_EQ(progress_calls, tree.files.size() + 1);
  if (c.chunk_bytes == 4096) {
    EXPECT_GT(summary->chunks_total, 20u);  // many chunks
  }
  if (c.chunk_bytes >= (64ull << 20)) {
    EXPECT_EQ(summary->chunks_total, 1u);
  }

  auto ds = c.posix ? Dataset::Open(dst_dir.path()) : Dataset::Open(dst);
  ASSERT_TRUE(ds.has_value()) << ds.error().ToString();
  EXPECT_EQ((*ds)->version(), 1u);
  ExpectDatasetEqualsTree(**ds, tree);

  // Chunks respect the size limit unless a single file is bigger than it.
  const auto& snap = dataset::ViewOf(**ds);
  EXPECT_EQ(snap.chunk_count(), summary->chunks_total);
  for (uint32_t k = 0; k < snap.chunk_count(); ++k) {
    const auto rec = snap.chunk(k).value();
    if (rec.entry_count > 1) {
      EXPECT_LE(rec.file_size, c.chunk_bytes);
    }
    EXPECT_GE(rec.entry_count, 1u);
  }
  if (c.posix) {
    EXPECT_EQ(test::ChunkFiles(dst_dir.path()).size(), summary->chunks_total);
  }
}

INSTANTIATE_TEST_SUITE_P(Trees, RoundTripTest,
                         ::testing::Values(RoundTripCase{1, 4096, true, false},
                                           RoundTripCase{2, 4096, false, true},
                                           RoundTripCase{3, 16 << 10, false, false},
                                           RoundTripCase{4, 256 << 10, true, true},
                                           RoundTripCase{5, 1 << 20, false, false},
                                           RoundTripCase{6, 64ull << 20, true, false},
                                           RoundTripCase{7, 4096, false, false},
                                           RoundTripCase{8, 64ull << 20, false, true},
                                           RoundTripCase{9, 100000, false, true}),
                         CaseName);

TEST(Dataset, InMemoryTreesOfManyShapes) {
  // More seeds, straight from memory (no disk), to cover more name and size combinations.
  for (uint64_t seed = 100; seed < 112; ++seed) {
    SCOPED_TRACE(seed);
    test::RandomTreeOptions options;
    options.files = 40;
    options.dirs = static_cast<int>(seed % 7);
    options.image_folder = seed % 3 == 0;
    options.max_file_bytes = 30000;
    const test::Tree tree = test::RandomTree(seed, options);
    auto dst = std::make_shared<storage::MemoryStorage>();
    dataset::PackOptions pack_options;
    pack_options.chunk_bytes = 4096 << (seed % 4);
    auto source = test::TreeSource(tree);
    ASSERT_TRUE(dataset::Pack(*source, *dst, pack_options).has_value());
    auto ds = Dataset::Open(dst);
    ASSERT_TRUE(ds.has_value());
    ExpectDatasetEqualsTree(**ds, tree);
  }
}

class DatasetApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tree_.files = {{"cats/a.jpg", "meow"}, {"cats/b.jpg", ""}, {"dogs/x/c.jpg", "woof woof"}};
    auto source = test::TreeSource(tree_);
    ASSERT_TRUE(dataset::Pack(*source, *storage_, {}).has_value());
    ds_ = std::move(Dataset::Open(storage_).value());
  }
  test::Tree tree_;
  std::shared_ptr<storage::MemoryStorage> storage_ = std::make_shared<storage::MemoryStorage>();
  std::unique_ptr<Dataset> ds_;
};

TEST_F(DatasetApiTest, ErrorsAreSpecific) {
  EXPECT_EQ(ds_->Find("cats/zzz.jpg").error().code(), StatusCode::kNotFound);
  EXPECT_EQ(ds_->Find("cats").error().code(), StatusCode::kNotFound);  // a directory
  EXPECT_EQ(ds_->Stat(3).error().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ds_->ReadFile(3).error().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ds_->ReadFile(~0u).error().code(), StatusCode::kInvalidArgument);
  std::vector<std::byte> wrong_size(3);
  const uint32_t a = ds_->Find("cats/a.jpg").value();
  const Status s = ds_->ReadFileInto(a, wrong_size);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("cats/a.jpg"), std::string::npos);
  EXPECT_EQ(ds_->List("cats/a.jpg").error().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ds_->List("birds").error().code(), StatusCode::kNotFound);
}

TEST_F(DatasetApiTest, ListingAndLabels) {
  auto root = ds_->List("").value();
  ASSERT_EQ(root.size(), 2u);
  EXPECT_EQ(root[0].name, "cats");
  EXPECT_TRUE(root[0].is_dir);
  EXPECT_EQ(root[1].name, "dogs");
  EXPECT_EQ(ds_->List("/dogs/").value().size(), 1u);
  EXPECT_EQ(ds_->class_count(), 2u);
  EXPECT_EQ(ds_->Stat(ds_->Find("dogs/x/c.jpg").value())->label, 1);
  EXPECT_EQ(ds_->ReadFile(ds_->Find("cats/b.jpg").value())->size(), 0u);
  EXPECT_EQ(dataset::ViewOf(*ds_).segment_count(), 1u);
  EXPECT_TRUE(ds_->FileAttributes(0).value().empty());
}

TEST_F(DatasetApiTest, ConcurrentReadsAreExact) {
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  threads.reserve(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int round = 0; round < 200; ++round) {
        for (const auto& [path, data] : tree_.files) {
          auto bytes = ds_->ReadFile(ds_->Find(path).value());
          if (!bytes || AsString(*bytes) != data) ++bad;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST(Dataset, OpenOnSomethingElseIsNotFound) {
  test::TempDir dir;
  auto empty = Dataset::Open(dir.path());
  ASSERT_FALSE(empty.has_value());
  EXPECT_EQ(empty.error().code(), StatusCode::kNotFound);
  EXPECT_NE(empty.error().message().find(dir.path()), std::string::npos);
  EXPECT_EQ(Dataset::Open(dir.Join("missing")).error().code(), StatusCode::kNotFound);
  EXPECT_EQ(Dataset::Open("gs://bucket/x").error().code(), StatusCode::kUnsupported);
}

// An empty directory is most likely the wrong one: refused, naming it, with nothing written.
TEST(Dataset, AnEmptySourceDirectoryIsRefused) {
  test::TempDir src, dst;
  auto summary = test::PackDirectory(src.path(), *storage::NewPosixStorage(dst.path()));
  ASSERT_FALSE(summary.has_value());
  EXPECT_EQ(summary.error().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(summary.error().message().find(src.path() + " holds no files to pack"),
            std::string::npos);
  EXPECT_FALSE(Dataset::Open(dst.path()).has_value());
}

// A pack of tar shards may still make an empty dataset (a shard of directories only).
TEST(Dataset, EmptyTarInputGivesAnEmptyDataset) {
  test::TempDir src, dst;
  test::WriteTar(src.Join("empty.tar"), {});
  auto summary = test::PackTars({src.Join("empty.tar")}, *storage::NewPosixStorage(dst.path()));
  ASSERT_TRUE(summary.has_value()) << summary.error().ToString();
  auto ds = Dataset::Open(dst.path());
  ASSERT_TRUE(ds.has_value()) << ds.error().ToString();
  EXPECT_EQ((*ds)->file_count(), 0u);
  EXPECT_TRUE((*ds)->List("")->empty());
}

TEST(Dataset, LabelPolicyNone) {
  const test::Tree tree = test::RandomTree(31, {.files = 20, .image_folder = true});
  auto dst = std::make_shared<storage::MemoryStorage>();
  dataset::PackOptions options;
  options.labels = dataset::LabelPolicy::kNone;
  auto source = test::TreeSource(tree);
  ASSERT_TRUE(dataset::Pack(*source, *dst, options).has_value());
  auto ds = Dataset::Open(dst).value();
  EXPECT_EQ(ds->class_count(), 0u);
  for (uint32_t f = 0; f < ds->file_count(); ++f) EXPECT_EQ(ds->Stat(f)->label, -1);
}

TEST(Dataset, ChunkSizeBelowMinimumIsRejected) {
  auto dst = std::make_shared<storage::MemoryStorage>();
  dataset::PackOptions options;
  options.chunk_bytes = 4095;
  auto source = test::TreeSource(test::RandomTree(1, {.files = 3}));
  auto result = dataset::Pack(*source, *dst, options);
  ASSERT_FALSE(result.has_value());
  EXPECT_EQ(result.error().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(dst->Exists("MANIFEST").value());
}

}  // namespace
}  // namespace stoker
