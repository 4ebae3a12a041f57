// `stoker upgrade`: a format-1 dataset (written here the way stoker 0.1's packer wrote it)
// becomes a format-2 one with the same files, bytes, labels and classes, and keeps its chunks.
#include <unistd.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "dataset/format1.h"
#include "dataset/packer.h"
#include "dataset/upgrade.h"
#include "dataset/verify.h"
#include "dataset/version_view.h"
#include "format/chunk.h"
#include "format/snapshot_builder.h"
#include "stoker/dataset.h"
#include "storage/memory_storage.h"
#include "storage/posix_storage.h"
#include "testing/test_util.h"

namespace stoker::dataset {
namespace {

using test::AsString;

TEST(Upgrade, AnImageFolderDatasetKeepsEveryIndexLabelAndByte) {
  auto store = std::make_shared<storage::MemoryStorage>();
  test::Tree tree;  // ImageFolder: class/file, as ImageNet
  for (int i = 0; i < 50; ++i) {
    tree.files[fmt::format("n0{}/img_{:03}.JPEG", i % 4, i)] = test::RandomBytes(i, 100 + 60 * i);
  }
  test::WriteFormat1(*store, tree, format::LabelMode::kFirstDirectory);
  std::vector<std::string> old_paths;
  {
    auto manifest = ReadFormat1Manifest(*store).value();
    auto snap = OpenSnapshot(*store, *manifest, true).value();
    for (uint32_t f = 0; f < snap->file_count(); ++f) old_paths.push_back(snap->FilePath(f));
  }
  const auto chunks_before = store->List("chunks").value();

  auto opened = Dataset::Open(store);
  ASSERT_FALSE(opened.has_value());
  EXPECT_EQ(opened.error().code(), StatusCode::kUnsupported);
  EXPECT_NE(opened.error().message().find("stoker upgrade"), std::string::npos);

  auto summary = Upgrade(*store);
  ASSERT_TRUE(summary.has_value()) << summary.error().ToString();
  EXPECT_EQ(summary->version, 3u);
  EXPECT_EQ(summary->files, tree.files.size());
  EXPECT_TRUE(summary->indices_preserved);
  EXPECT_EQ(store->List("chunks").value(), chunks_before);

  auto ds = Dataset::Open(store).value();
  EXPECT_EQ(ds->version(), 3u);
  ASSERT_EQ(ds->file_count(), tree.files.size());
  EXPECT_EQ(ds->class_count(), 4u);
  for (uint32_t f = 0; f < ds->file_count(); ++f) {
    const FileInfo info = ds->Stat(f).value();
    EXPECT_EQ(info.path, old_paths[f]);
    EXPECT_EQ(info.label, tree.ExpectedLabel(info.path)) << info.path;
    EXPECT_EQ(AsString(ds->ReadFile(f).value()), tree.files.at(info.path));
  }
  EXPECT_TRUE(Verify(*store).value().ok());
  EXPECT_EQ(Upgrade(*store).error().code(), StatusCode::kAlreadyExists);

  // Appends now work as on any format-2 dataset: old labels stay.
  test::Tree more;
  more.files["new-class/1"] = "one";
  PackOptions append;
  append.append = true;
  auto added = Pack(*test::TreeSource(more), *store, append);
  ASSERT_TRUE(added.has_value()) << added.error().ToString();
  EXPECT_EQ(added->version, 4u);
  auto v4 = Dataset::Open(store).value();
  EXPECT_EQ(v4->Stat(v4->Find("new-class/1").value())->label, 4);
  for (uint32_t f = 0; f < ds->file_count(); ++f) EXPECT_EQ(v4->FilePath(f), old_paths[f]);
}

TEST(Upgrade, ANestedTreeSaysWhetherIndicesMoved) {
  auto store = std::make_shared<storage::MemoryStorage>();
  test::Tree tree;
  // Format 1 numbered directories breadth-first: top.x, a/mid, c/z, a/b/deep. Format 2 numbers
  // by path: top.x, a/mid, a/b/deep, c/z.
  tree.files["top.x"] = "top";
  tree.files["a/b/deep"] = "deep";
  tree.files["a/mid"] = "mid";
  tree.files["c/z"] = "z";
  test::WriteFormat1(*store, tree, format::LabelMode::kFirstDirectory);
  auto summary = Upgrade(*store);
  ASSERT_TRUE(summary.has_value()) << summary.error().ToString();
  EXPECT_FALSE(summary->indices_preserved);
  auto ds = Dataset::Open(store).value();
  for (const auto& [path, bytes] : tree.files) {
    const uint32_t f = ds->Find(path).value();
    EXPECT_EQ(AsString(ds->ReadFile(f).value()), bytes);
    EXPECT_EQ(ds->Stat(f)->label, -1);  // files in the root: no directory labels
  }
  EXPECT_EQ(ds->FileAttributes(ds->Find("top.x").value()).value(),
            (std::vector<std::pair<std::string, std::string>>{{"kind", "x"}}));
}

TEST(Upgrade, ASnapshotOfTheWrongSizeIsRefusedBeforeItIsRead) {
  // On a local disk: the snapshot grown (sparse) to 64 GiB. Mapping it before the size check
  // faulted in 64 GiB; now the size is compared with the MANIFEST's first.
  test::TempDir dir;
  auto store = storage::NewPosixStorage(dir.path());
  test::Tree tree;
  tree.files["c/a.jpg"] = "a";
  test::WriteFormat1(*store, tree, format::LabelMode::kFirstDirectory);
  const format::Manifest manifest = ReadFormat1Manifest(*store).value().value();
  ASSERT_EQ(::truncate(dir.Join(manifest.snapshot_path).c_str(), off_t{64} << 30), 0);
  auto opened = OpenSnapshot(*store, manifest, true);
  ASSERT_FALSE(opened.has_value());
  EXPECT_TRUE(opened.error().IsCorruption()) << opened.error().ToString();
  EXPECT_NE(opened.error().message().find("68719476736 bytes, MANIFEST says"), std::string::npos)
      << opened.error().ToString();
}

TEST(Upgrade, NothingToUpgradeIsNotFound) {
  storage::MemoryStorage empty;
  EXPECT_TRUE(Upgrade(empty).error().IsNotFound());
}

}  // namespace
}  // namespace stoker::dataset
