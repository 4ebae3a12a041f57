// Packing beyond the plain round trip: tar shards (WebDataset), appending versions, and hostile
// or mistaken input, which must fail with a clear error and leave the destination as it was.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "dataset/addition.h"
#include "dataset/format1.h"
#include "dataset/packer.h"
#include "dataset/source.h"
#include "dataset/verify.h"
#include "dataset/version_view.h"
#include "stoker/dataset.h"
#include "storage/memory_storage.h"
#include "storage/posix_storage.h"
#include "testing/test_util.h"

namespace stoker::dataset {
namespace {

namespace fs = std::filesystem;
using test::AsString;
using test::TarMember;

// Every chunk file's bytes, by name.
std::map<std::string, std::string> ChunkContents(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& name : test::ChunkFiles(dir)) {
    out[name] = test::ReadFileToString(dir + "/chunks/" + name);
  }
  return out;
}

PackOptions Opts(uint64_t chunk_bytes, bool append = false) {
  PackOptions options;
  options.chunk_bytes = chunk_bytes;
  options.append = append;
  return options;
}
PackOptions Appending() { return Opts(PackOptions().chunk_bytes, true); }

class PackTest : public ::testing::Test {
 protected:
  std::shared_ptr<Storage> Dst() { return storage::NewPosixStorage(dst_.path()); }
  // Every version record and segment, by path: all that readers can see of the metadata.
  std::map<std::string, std::string> Published() {
    std::map<std::string, std::string> out;
    for (const std::string dir : {"versions", "segments"}) {
      if (!fs::exists(dst_.Join(dir))) continue;
      for (const auto& e : fs::directory_iterator(dst_.Join(dir))) {
        out[dir + "/" + e.path().filename().string()] = test::ReadFileToString(e.path());
      }
    }
    return out;
  }

  // Expects `result` to be InvalidArgument mentioning every string in `names`.
  template <typename T>
  void ExpectInvalid(const Result<T>& result, std::initializer_list<std::string_view> names) {
    ASSERT_FALSE(result.has_value());
    EXPECT_EQ(result.error().code(), StatusCode::kInvalidArgument) << result.error().ToString();
    for (auto name : names) {
      EXPECT_NE(result.error().message().find(name), std::string::npos)
          << "'" << name << "' not in: " << result.error().message();
    }
  }

  test::TempDir src_, dst_, tars_;
};

// ---- tar input ----

TEST_F(PackTest, WebDatasetShardsBecomeLabelledSamples) {
  const auto shard0 = test::RandomWdsSamples(1, 40, 7, "train/s0/");
  const auto shard1 = test::RandomWdsSamples(2, 35, 7, "train/s1/");
  test::WriteTar(tars_.Join("shard-000000.tar"), test::WdsMembers(shard0));
  test::WriteTar(tars_.Join("shard-000001.tar"), test::WdsMembers(shard1));
  auto summary = test::PackTars({tars_.Join("shard-000000.tar"), tars_.Join("shard-000001.tar")},
                                *Dst(), Opts(16 << 10));
  ASSERT_TRUE(summary.has_value()) << summary.error().ToString();
  EXPECT_EQ(summary->samples, 75u);

  auto ds = Dataset::Open(dst_.path());
  ASSERT_TRUE(ds.has_value()) << ds.error().ToString();
  EXPECT_EQ((*ds)->sample_count(), 75u);
  int max_label = 0;
  std::map<std::string, const test::WdsSample*> by_key;
  for (const auto* shard : {&shard0, &shard1}) {
    for (const auto& s : *shard) {
      by_key[s.key] = &s;
      max_label = std::max(max_label, s.label);
    }
  }
  EXPECT_EQ((*ds)->class_count(), static_cast<uint32_t>(max_label + 1));
  uint64_t files = 0;
  for (uint32_t sample = 0; sample < (*ds)->sample_count(); ++sample) {
    const auto [first, count] = (*ds)->SampleFiles(sample).value();
    const std::string first_path = (*ds)->FilePath(first);
    const std::string key = first_path.substr(0, first_path.find('.'));
    ASSERT_TRUE(by_key.contains(key)) << first_path;
    const test::WdsSample& s = *by_key[key];
    EXPECT_EQ(count, s.seg.empty() ? 3u : 4u) << key;
    EXPECT_EQ((*ds)->SampleLabel(sample), s.label) << key;
    const std::map<std::string, std::string> expected = {
        {key + ".cls", std::to_string(s.label) + "\n"},
        {key + ".jpg", s.jpg},
        {key + ".json", s.json},
        {key + ".seg.png", s.seg}};
    for (uint32_t f = first; f < first + count; ++f) {
      const std::string path = (*ds)->FilePath(f);
      ASSERT_TRUE(expected.contains(path)) << path;
      EXPECT_EQ((*ds)->Stat(f)->label, s.label);
      EXPECT_TRUE(AsString((*ds)->ReadFile(f).value()) == expected.at(path)) << path;
      ++files;
    }
    by_key.erase(key);
  }
  EXPECT_TRUE(by_key.empty());  // every sample seen exactly once
  EXPECT_EQ(files, (*ds)->file_count());
}

// What a dataset says of its samples, independent of file indices: by sample key, the label
// and every file's path and bytes; and the class names.
struct SamplesByKey {
  std::map<std::string, std::pair<int32_t, std::map<std::string, std::string>>> samples;
  std::vector<std::string> classes;
  bool operator==(const SamplesByKey&) const = default;
};
SamplesByKey ReadSamplesByKey(const std::string& dir) {
  auto ds = Dataset::Open(dir).value();
  SamplesByKey out;
  for (uint64_t sample = 0; sample < ds->sample_count(); ++sample) {
    const auto [first, count] = ds->SampleFiles(sample).value();
    auto& [label, files] = out.samples[std::string(format::SampleKeyOf(ds->FilePath(first)))];
    label = ds->SampleLabel(sample).value();
    for (uint64_t f = first; f < first + count; ++f) {
      files[ds->FilePath(f)] = std::string(AsString(ds->ReadFile(f).value()));
    }
  }
  for (uint32_t c = 0; c < ds->class_count(); ++c) out.classes.emplace_back(ds->ClassName(c));
  return out;
}

TEST_F(PackTest, AWebDatasetFolderPacksAsTheSameMembersInATar) {
  // k.jpg, k.cls, k.json (and some k.seg.png) as plain files, flat and in a subdirectory.
  auto samples = test::RandomWdsSamples(3, 60, 5, "");
  for (size_t i = 40; i < samples.size(); ++i) samples[i].key = "sub/" + samples[i].key;
  const auto members = test::WdsMembers(samples);
  for (const auto& m : members) {
    fs::create_directories(fs::path(src_.Join(m.name)).parent_path());
    test::WriteStringToFile(src_.Join(m.name), m.data);
  }
  test::WriteTar(tars_.Join("same.tar"), members);
  test::TempDir from_tar;
  ASSERT_TRUE(test::PackTars({tars_.Join("same.tar")}, *storage::NewPosixStorage(from_tar.path()),
                             Opts(16 << 10))
                  .has_value());

  for (const DirectoryLayout layout : {DirectoryLayout::kAuto, DirectoryLayout::kWebDataset}) {
    for (const StorageOrder order : {StorageOrder::kMixed, StorageOrder::kInput}) {
      test::TempDir dst;
      DirectorySourceOptions source_options;
      source_options.layout = layout;
      PackOptions options = Opts(16 << 10);
      SetStorageOrder(order, 9, &source_options, &options);
      auto source = OpenPackSource({src_.path()}, source_options, &options.group_samples);
      ASSERT_TRUE(source.has_value()) << source.error().ToString();
      EXPECT_TRUE(options.group_samples);
      auto summary = Pack(**source, *storage::NewPosixStorage(dst.path()), options);
      ASSERT_TRUE(summary.has_value()) << summary.error().ToString();
      EXPECT_EQ(summary->samples, samples.size());
      EXPECT_EQ(summary->open_chunks, 1u);  // the source permutes samples: no mixer needed
      const SamplesByKey got = ReadSamplesByKey(dst.path());
      EXPECT_TRUE(got == ReadSamplesByKey(from_tar.path()));
      EXPECT_EQ(got.samples.size(), samples.size());
      EXPECT_EQ(got.samples.at(samples[0].key).first, samples[0].label);
    }
  }

  // Told it is a tree, the same folder is not grouped (a sample per file).
  DirectorySourceOptions as_tree;
  as_tree.layout = DirectoryLayout::kTree;
  bool grouped = true;
  ASSERT_TRUE(OpenPackSource({src_.path()}, as_tree, &grouped).has_value());
  EXPECT_FALSE(grouped);
  // A tree without .cls members stays a tree; tar shards cannot be packed as one.
  test::TempDir plain;
  test::WriteStringToFile(plain.Join("a.jpg"), "a");
  DirectorySourceOptions automatic;
  ASSERT_TRUE(OpenPackSource({plain.path()}, automatic, &grouped).has_value());
  EXPECT_FALSE(grouped);
  ExpectInvalid(OpenPackSource({tars_.Join("same.tar")}, as_tree, &grouped), {"tree"});
}

TEST_F(PackTest, AClsLabelAboveTheLimitIsRefusedNotAllocated) {
  // Classes are "0" .. the largest label: one member saying 2^31 - 1 asked for 2^31 classes.
  for (const std::string huge : {"2147483647", "99999999999999999999", "4194304"}) {
    test::WriteTar(tars_.Join("huge.tar"),
                   {test::File("a/x.jpg", "jpeg"), test::File("a/x.cls", huge + "\n")});
    test::TempDir dst;
    ExpectInvalid(test::PackTars({tars_.Join("huge.tar")}, *storage::NewPosixStorage(dst.path())),
                  {"a/x.cls", huge});
  }
  static_assert(kMaxClsLabel == 4194303);
  test::WriteTar(tars_.Join("fine.tar"),
                 {test::File("a/x.jpg", "jpeg"), test::File("a/x.cls", "999")});
  ASSERT_TRUE(test::PackTars({tars_.Join("fine.tar")}, *Dst()).has_value());
  EXPECT_EQ(Dataset::Open(dst_.path()).value()->class_count(), 1000u);
}

// Class-ordered shards (sorted by label, as ImageNet's are class by class), packed in each
// storage order: returns the mean number of labels per chunk, after checking every sample.
double LabelsPerChunk(const test::TempDir& tars, const std::string& dst, StorageOrder order) {
  auto samples = test::RandomWdsSamples(11, 600, 30, "train/");
  std::stable_sort(samples.begin(), samples.end(),
                   [](const auto& a, const auto& b) { return a.label < b.label; });
  for (size_t i = 0; i < samples.size(); ++i) {  // keys in label order too
    samples[i].key = fmt::format("train/{:06d}", i);
    samples[i].json = std::to_string(i);
  }
  std::vector<std::string> shards;
  for (size_t begin = 0; begin < samples.size(); begin += 200) {
    shards.push_back(tars.Join(fmt::format("class-ordered-{}.tar", begin / 200)));
    test::WriteTar(shards.back(),
                   test::WdsMembers({samples.begin() + begin, samples.begin() + begin + 200}));
  }
  DirectorySourceOptions unused;
  PackOptions options = Opts(64 << 10);
  SetStorageOrder(order, 5, &unused, &options);
  auto storage = storage::NewPosixStorage(dst);
  auto summary = test::PackTars(shards, *storage, options);
  EXPECT_TRUE(summary.has_value()) << summary.error().ToString();
  auto ds = Dataset::Open(dst);
  EXPECT_TRUE(ds.has_value());
  const auto& snap = dataset::ViewOf(**ds);
  EXPECT_EQ(snap.sample_count(), samples.size());
  std::map<uint32_t, std::set<int32_t>> labels;
  uint32_t split_samples = 0;
  for (uint32_t s = 0; s < snap.sample_count(); ++s) {
    const auto [first, count] = snap.SampleFiles(s);
    for (uint32_t f = first; f < first + count; ++f) {
      if ((*ds)->FilePath(f).ends_with(".json")) {  // the sample's index in the input
        const auto index = std::stoul(std::string(AsString((*ds)->ReadFile(f).value())));
        EXPECT_EQ(snap.sample_label(s), samples.at(index).label);
      }
      if (f > first && snap.file(f).chunk != snap.file(f - 1).chunk) ++split_samples;
      EXPECT_TRUE((*ds)->ReadFile(f).has_value()) << (*ds)->FilePath(f);  // CRC-checked
    }
    labels[snap.file(first).chunk].insert(snap.sample_label(s));
  }
  // A sample's files stay together, in one chunk, unless it is the one that fills a chunk.
  EXPECT_LE(split_samples, snap.chunk_count());
  double sum = 0;
  for (const auto& [chunk, set] : labels) sum += static_cast<double>(set.size());
  return sum / static_cast<double>(labels.size());
}

TEST_F(PackTest, ClassOrderedTarsArePackedMixedByDefault) {
  const double mixed = LabelsPerChunk(tars_, dst_.Join("mixed"), StorageOrder::kMixed);
  const double in_order = LabelsPerChunk(tars_, dst_.Join("in-order"), StorageOrder::kInput);
  // ~4.6 MB in 64 KiB chunks: ~70 chunks of ~9 samples of 30 classes (~20 samples each).
  EXPECT_LE(in_order, 2.0);
  EXPECT_GE(mixed, 5.0);
}

TEST_F(PackTest, TarDotSlashPrefixesAndDirectoryMembers) {
  test::WriteTar(tars_.Join("a.tar"), {test::Special(TarMember::Type::kDir, "./"),
                                       test::Special(TarMember::Type::kDir, "./d/"),
                                       test::File("./d/x.txt", "x"), test::File("./././y", "y")});
  ASSERT_TRUE(test::PackTars({tars_.Join("a.tar")}, *Dst()).has_value());
  auto ds = Dataset::Open(dst_.path()).value();
  EXPECT_EQ(ds->file_count(), 2u);
  EXPECT_EQ(AsString(ds->ReadFile(ds->Find("d/x.txt").value()).value()), "x");
  EXPECT_EQ(AsString(ds->ReadFile(ds->Find("y").value()).value()), "y");
}

// ---- refusing to overwrite ----

TEST_F(PackTest, FreshPackIntoAnUnrelatedDirectoryIsRefused) {
  test::WriteTree(test::RandomTree(1, {.files = 5}), src_.path());
  test::WriteStringToFile(dst_.Join("thesis.tex"), "precious");
  auto result = test::PackDirectory(src_.path(), *Dst());
  ASSERT_FALSE(result.has_value());
  EXPECT_EQ(result.error().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(result.error().message().find("thesis.tex"), std::string::npos);
  EXPECT_EQ(test::ReadFileToString(dst_.Join("thesis.tex")), "precious");
  EXPECT_FALSE(fs::exists(dst_.Join("chunks")));
  EXPECT_TRUE(Published().empty());
}

TEST_F(PackTest, PackIntoAnExistingDatasetNeedsAppend) {
  test::WriteTree(test::RandomTree(2, {.files = 5}), src_.path());
  ASSERT_TRUE(test::PackDirectory(src_.path(), *Dst()).has_value());
  const auto published = Published();
  const auto chunks = ChunkContents(dst_.path());
  auto again = test::PackDirectory(src_.path(), *Dst());
  ASSERT_FALSE(again.has_value());
  EXPECT_EQ(again.error().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(again.error().message().find("append"), std::string::npos);
  EXPECT_EQ(Published(), published);
  EXPECT_EQ(ChunkContents(dst_.path()), chunks);
}

TEST_F(PackTest, AppendToNothingIsNotFound) {
  test::WriteTree(test::RandomTree(3, {.files = 5}), src_.path());
  auto result = test::PackDirectory(src_.path(), *Dst(), Appending());
  ASSERT_FALSE(result.has_value());
  EXPECT_EQ(result.error().code(), StatusCode::kNotFound);
}

// ---- append ----

// A pack whose metadata does not fit its sort budget spills sorted runs to temporary files
// and merges them (what keeps a pack's memory flat at any file count): the dataset it makes,
// appends included, is the one an in-memory sort makes.
TEST_F(PackTest, SortingMetadataOnDiskGivesTheSameDataset) {
  test::RandomTreeOptions options{
      .files = 600, .dirs = 6, .max_file_bytes = 3000, .image_folder = true, .classes = 5};
  const test::Tree tree = test::RandomTree(21, options);
  test::WriteTree(tree, src_.path());
  test::Tree more;
  more.files["zz-new/a.bin"] = "a";
  more.files["aa-new/b.bin"] = "";
  test::TempDir src2, small_dst;
  test::WriteTree(more, src2.path());
  PackOptions in_memory = Opts(16384), spilling = Opts(16384);
  spilling.sort.memory_bytes = 1024;  // a run every dozen files
  for (auto [dst, opts] : {std::pair{Dst(), in_memory},
                           std::pair{storage::NewPosixStorage(small_dst.path()), spilling}}) {
    ASSERT_TRUE(test::PackDirectory(src_.path(), *dst, opts).has_value());
    opts.append = true;
    auto appended = test::PackDirectory(src2.path(), *dst, opts);
    ASSERT_TRUE(appended.has_value()) << appended.error().ToString();
  }
  auto a = Dataset::Open(dst_.path()).value();
  auto b = Dataset::Open(small_dst.path()).value();
  ASSERT_EQ(a->file_count(), tree.files.size() + 2);
  ASSERT_EQ(b->file_count(), a->file_count());
  ASSERT_EQ(b->class_count(), a->class_count());
  for (uint32_t k = 0; k < a->class_count(); ++k) EXPECT_EQ(b->ClassName(k), a->ClassName(k));
  for (uint32_t i = 0; i < a->file_count(); ++i) {
    const FileInfo x = a->Stat(i).value(), y = b->Stat(i).value();
    EXPECT_EQ(y.path, x.path);
    EXPECT_EQ(y.label, x.label);
    EXPECT_EQ(y.crc32c, x.crc32c);
    EXPECT_EQ(AsString(b->ReadFile(i).value()), AsString(a->ReadFile(i).value()));
  }
}

TEST_F(PackTest, AppendAddsAVersionAndKeepsEveryIndexAndLabel) {
  test::RandomTreeOptions options{
      .files = 40, .dirs = 4, .max_file_bytes = 20000, .image_folder = true, .classes = 3};
  test::Tree v1 = test::RandomTree(10, options);
  test::WriteTree(v1, src_.path());
  ASSERT_TRUE(test::PackDirectory(src_.path(), *Dst(), Opts(8192)).has_value());
  const auto v1_published = Published();
  const auto v1_chunks = ChunkContents(dst_.path());
  const std::vector<std::string> v1_classes = v1.Classes();
  std::map<std::string, uint32_t> v1_index;
  {
    auto ds = Dataset::Open(dst_.path()).value();
    for (const auto& [path, data] : v1.files) v1_index[path] = ds->Find(path).value();
  }

  // v2: more files in an existing class and a new class that sorts before all others. ImageFolder
  // would shift every label by one; stoker gives the new class the next label and keeps the rest.
  test::Tree added;
  added.files["\x01new-class/one.jpg"] = test::RandomBytes(1, 5000);
  added.files["\x01new-class/two.jpg"] = "";
  added.files[v1_classes[1] + "/added.jpg"] = test::RandomBytes(2, 12000);
  test::TempDir src2;
  test::WriteTree(added, src2.path());
  auto summary = test::PackDirectory(src2.path(), *Dst(), Opts(8192, true));
  ASSERT_TRUE(summary.has_value()) << summary.error().ToString();
  EXPECT_EQ(summary->version, 2u);
  EXPECT_EQ(summary->files_added, 3u);
  EXPECT_EQ(summary->files_total, v1.files.size() + 3);
  EXPECT_EQ(summary->chunks_total, v1_chunks.size() + summary->chunks_added);
  EXPECT_EQ(summary->classes, 4u);
  EXPECT_EQ(summary->classes_added, 1u);
  EXPECT_EQ(summary->segments, 2u);

  // Old chunks and metadata untouched, new ones added.
  const auto v2_chunks = ChunkContents(dst_.path());
  EXPECT_EQ(v2_chunks.size(), v1_chunks.size() + summary->chunks_added);
  for (const auto& [name, bytes] : v1_chunks) {
    ASSERT_TRUE(v2_chunks.contains(name)) << name;
    EXPECT_TRUE(v2_chunks.at(name) == bytes) << name;
  }
  const auto v2_published = Published();
  for (const auto& [name, bytes] : v1_published) EXPECT_EQ(v2_published.at(name), bytes) << name;

  auto ds = Dataset::Open(dst_.path());
  ASSERT_TRUE(ds.has_value()) << ds.error().ToString();
  EXPECT_EQ((*ds)->version(), 2u);
  ASSERT_EQ((*ds)->file_count(), v1.files.size() + added.files.size());
  ASSERT_EQ((*ds)->class_count(), 4u);
  for (uint32_t k = 0; k < 3; ++k) EXPECT_EQ((*ds)->ClassName(k), v1_classes[k]);
  EXPECT_EQ((*ds)->ClassName(3), "\x01new-class");
  for (const auto& [path, data] : v1.files) {
    const uint32_t f = (*ds)->Find(path).value();
    EXPECT_EQ(f, v1_index.at(path)) << path;  // the index a model or sample list saved
    EXPECT_EQ((*ds)->Stat(f)->label, v1.ExpectedLabel(path)) << path;
    EXPECT_TRUE(AsString((*ds)->ReadFile(f).value()) == data) << path;
  }
  // New files come after all old ones, in path order.
  std::vector<uint32_t> new_indices;
  for (const auto& [path, data] : added.files) {
    const uint32_t f = (*ds)->Find(path).value();
    new_indices.push_back(f);
    EXPECT_GE(f, v1.files.size()) << path;
    EXPECT_EQ((*ds)->Stat(f)->label, path.starts_with("\x01") ? 3 : 1) << path;
    EXPECT_TRUE(AsString((*ds)->ReadFile(f).value()) == data) << path;
  }
  EXPECT_TRUE(std::is_sorted(new_indices.begin(), new_indices.end()));
  // Listings merge both versions' files by name (after the subdirectories).
  auto listing = (*ds)->List(v1_classes[1]).value();
  const auto files =
      std::find_if(listing.begin(), listing.end(), [](auto& e) { return !e.is_dir; });
  EXPECT_TRUE(std::is_sorted(files, listing.end(),
                             [](const auto& x, const auto& y) { return x.name < y.name; }));
  EXPECT_EQ(std::count_if(listing.begin(), listing.end(),
                          [](const auto& e) { return e.name == "added.jpg"; }),
            1);

  // Version 1 is still readable as it was.
  DatasetOpenOptions at_v1;
  at_v1.version = 1;
  auto old = Dataset::Open(dst_.path(), at_v1);
  ASSERT_TRUE(old.has_value()) << old.error().ToString();
  EXPECT_EQ((*old)->version(), 1u);
  EXPECT_EQ((*old)->file_count(), v1.files.size());
  EXPECT_EQ((*old)->class_count(), 3u);
  for (const auto& [path, data] : v1.files) {
    EXPECT_EQ((*old)->Find(path).value(), v1_index.at(path));
  }
  EXPECT_TRUE((*old)->Find("\x01new-class/one.jpg").error().IsNotFound());
}

TEST_F(PackTest, AppendRejectsPathsAlreadyInTheDatasetAndLeavesNoTrace) {
  test::Tree v1 = test::RandomTree(11, {.files = 20});
  test::WriteTree(v1, src_.path());
  ASSERT_TRUE(test::PackDirectory(src_.path(), *Dst(), Opts(4096)).has_value());
  const auto published = Published();
  const auto chunks = ChunkContents(dst_.path());

  test::Tree again;
  again.files["\x01 first/new.bin"] = test::RandomBytes(5, 9000);
  const std::string dup = std::prev(v1.files.end())->first;
  again.files[dup] = "different contents";
  test::TempDir src2;
  test::WriteTree(again, src2.path());
  auto result = test::PackDirectory(src2.path(), *Dst(), Opts(4096, true));
  ExpectInvalid(result, {"already in the dataset", dup});
  EXPECT_EQ(Published(), published);
  EXPECT_EQ(ChunkContents(dst_.path()), chunks);
  EXPECT_EQ(Dataset::Open(dst_.path()).value()->version(), 1u);
}

TEST_F(PackTest, AppendTarsKeepsExplicitLabels) {
  const auto a = test::RandomWdsSamples(3, 10, 4, "a/");
  const auto b = test::RandomWdsSamples(4, 10, 9, "b/");
  test::WriteTar(tars_.Join("a.tar"), test::WdsMembers(a));
  test::WriteTar(tars_.Join("b.tar"), test::WdsMembers(b));
  ASSERT_TRUE(test::PackTars({tars_.Join("a.tar")}, *Dst()).has_value());
  auto summary = test::PackTars({tars_.Join("b.tar")}, *Dst(), Appending());
  ASSERT_TRUE(summary.has_value()) << summary.error().ToString();
  EXPECT_EQ(summary->samples, 20u);
  auto ds = Dataset::Open(dst_.path()).value();
  for (const auto* set : {&a, &b}) {
    for (const auto& s : *set) {
      EXPECT_EQ(ds->Stat(ds->Find(s.key + ".jpg").value())->label, s.label) << s.key;
    }
  }
  // A directory tree cannot be appended to a tar dataset.
  test::WriteTree(test::RandomTree(5, {.files = 3}), src_.path());
  ExpectInvalid(test::PackDirectory(src_.path(), *Dst(), Appending()), {"tar"});
}

// ---- hostile directory trees ----

class HostileTreeTest : public PackTest {
 protected:
  void SetUp() override {
    // The destination already holds version 1; the hostile input comes as an append.
    test::TempDir first;
    test::WriteTree(test::RandomTree(20, {.files = 10}), first.path());
    ASSERT_TRUE(test::PackDirectory(first.path(), *Dst(), Opts(4096)).has_value());
    published_ = Published();
    chunks_ = ChunkContents(dst_.path());
    // A well-formed part of the hostile tree, sorting around the bad entry.
    test::WriteTree(test::RandomTree(21, {.files = 15, .max_file_bytes = 9000}), src_.path());
  }
  void ExpectRejected(std::initializer_list<std::string_view> names) {
    ExpectInvalid(test::PackDirectory(src_.path(), *Dst(), Opts(4096, true)), names);
    EXPECT_EQ(Published(), published_);
    EXPECT_EQ(ChunkContents(dst_.path()), chunks_);
  }
  std::map<std::string, std::string> published_;
  std::map<std::string, std::string> chunks_;
};

TEST_F(HostileTreeTest, SymlinkEscapingTheSource) {
  test::TempDir outside;
  test::WriteStringToFile(outside.Join("secret"), "secret");
  ASSERT_EQ(::symlink(outside.Join("secret").c_str(), src_.Join("link").c_str()), 0);
  ExpectRejected({"escapes", src_.Join("link")});
}

TEST_F(HostileTreeTest, RelativeSymlinkEscapingTheSource) {
  fs::create_directories(src_.Join("sub"));
  ASSERT_EQ(::symlink("../../../../../../../../etc/hostname", src_.Join("sub/h").c_str()), 0);
  ExpectRejected({src_.Join("sub/h")});
}

TEST_F(HostileTreeTest, SymlinkToDevNull) {
  ASSERT_EQ(::symlink("/dev/null", src_.Join("null").c_str()), 0);
  ExpectRejected({"escapes", src_.Join("null")});
}

TEST_F(HostileTreeTest, SymlinkToADirectory) {
  fs::create_directories(src_.Join("real/dir"));
  test::WriteStringToFile(src_.Join("real/dir/f"), "f");
  ASSERT_EQ(::symlink(src_.Join("real/dir").c_str(), src_.Join("dirlink").c_str()), 0);
  ExpectRejected({"directory", src_.Join("dirlink")});
}

TEST_F(HostileTreeTest, DanglingSymlink) {
  ASSERT_EQ(::symlink(src_.Join("nowhere").c_str(), src_.Join("dangling").c_str()), 0);
  ExpectRejected({src_.Join("dangling")});
}

TEST_F(HostileTreeTest, Fifo) {
  fs::create_directories(src_.Join("deep/er"));
  ASSERT_EQ(::mkfifo(src_.Join("deep/er/pipe").c_str(), 0644), 0);
  ExpectRejected({"FIFO", src_.Join("deep/er/pipe")});
}

TEST_F(PackTest, SymlinkToAFileInsideTheSourceIsPackedAsThatFile) {
  test::WriteStringToFile(src_.Join("real.txt"), "the contents");
  ASSERT_EQ(::symlink("real.txt", src_.Join("alias.txt").c_str()), 0);
  ASSERT_TRUE(test::PackDirectory(src_.path(), *Dst()).has_value());
  auto ds = Dataset::Open(dst_.path()).value();
  EXPECT_EQ(AsString(ds->ReadFile(ds->Find("alias.txt").value()).value()), "the contents");
  EXPECT_EQ(ds->file_count(), 2u);
}

// A file larger than a pack holds in memory is streamed into a chunk of its own.
TEST_F(PackTest, AFileOverTheStreamingThresholdGetsAChunkOfItsOwn) {
  const std::string big = test::RandomBytes(7, kStreamedItemBytes + 5);
  fs::create_directories(src_.Join("a"));
  test::WriteStringToFile(src_.Join("a/big.bin"), big);
  for (int i = 0; i < 5; ++i) {
    test::WriteStringToFile(src_.Join(fmt::format("a/s{}", i)), test::RandomBytes(i, 3000));
  }
  auto source = OpenDirectorySource(src_.path(), {});
  ASSERT_TRUE(source.has_value());
  ASSERT_TRUE(Pack(**source, *Dst(), Opts(1 << 20)).has_value());
  auto ds = Dataset::Open(Dst()).value();
  const FileInfo info = ds->Stat(ds->Find("a/big.bin").value()).value();
  EXPECT_EQ(info.size, big.size());
  EXPECT_EQ(dataset::ViewOf(*ds).chunk(info.chunk).value().entry_count, 1u);
  EXPECT_FALSE(
      dataset::ViewOf(*ds).chunk(info.chunk).value().wide_index);  // under 4 GiB: a narrow index
  EXPECT_TRUE(AsString(ds->ReadFile(info.index).value()) == big);
  EXPECT_TRUE(Verify(*Dst()).value().ok());
}

// ---- hostile tar shards ----

class HostileTarTest : public PackTest {
 protected:
  void SetUp() override {
    test::WriteTar(tars_.Join("base.tar"),
                   test::WdsMembers(test::RandomWdsSamples(30, 8, 3, "b/")));
    ASSERT_TRUE(test::PackTars({tars_.Join("base.tar")}, *Dst(), Opts(4096)).has_value());
    published_ = Published();
    chunks_ = ChunkContents(dst_.path());
  }
  // Good members first (so chunk files get written before the bad member is met), then `bad`.
  std::string Shard(const std::string& name, std::vector<TarMember> bad) {
    auto members = test::WdsMembers(test::RandomWdsSamples(31, 12, 3, "good/"));
    members.insert(members.end(), bad.begin(), bad.end());
    test::WriteTar(tars_.Join(name), members);
    return tars_.Join(name);
  }
  void ExpectRejected(std::vector<std::string> shards,
                      std::initializer_list<std::string_view> names) {
    ExpectInvalid(test::PackTars(std::move(shards), *Dst(), Opts(4096, true)), names);
    EXPECT_EQ(Published(), published_);
    EXPECT_EQ(ChunkContents(dst_.path()), chunks_);
  }
  std::map<std::string, std::string> published_;
  std::map<std::string, std::string> chunks_;
};

TEST_F(HostileTarTest, AbsoluteMember) {
  const auto tar = Shard("abs.tar", {test::File("/etc/evil", "x")});
  ExpectRejected({tar}, {tar, "/etc/evil"});
}

TEST_F(HostileTarTest, DotDotMember) {
  const auto tar = Shard("dotdot.tar", {test::File("good/../../evil", "x")});
  ExpectRejected({tar}, {tar, "good/../../evil"});
}

TEST_F(HostileTarTest, SymlinkMember) {
  const auto tar =
      Shard("symlink.tar", {test::Special(TarMember::Type::kSymlink, "l", "/etc/passwd")});
  ExpectRejected({tar}, {tar, "symlink"});
}

TEST_F(HostileTarTest, HardlinkMember) {
  const auto tar =
      Shard("hardlink.tar", {test::Special(TarMember::Type::kHardlink, "h", "good/000000.jpg")});
  ExpectRejected({tar}, {tar, "hard link"});
}

TEST_F(HostileTarTest, DeviceAndFifoMembers) {
  const auto dev = Shard("dev.tar", {test::Special(TarMember::Type::kCharDevice, "null")});
  ExpectRejected({dev}, {dev, "character device"});
  const auto fifo = Shard("fifo.tar", {test::Special(TarMember::Type::kFifo, "pipe")});
  ExpectRejected({fifo}, {fifo, "FIFO"});
}

TEST_F(HostileTarTest, DuplicateMemberAcrossShards) {
  const auto one = Shard("one.tar", {test::File("dup/x.txt", "1")});
  test::WriteTar(tars_.Join("two.tar"),
                 {test::File("dup/a.txt", "a"), test::File("dup/x.txt", "2")});
  ExpectRejected({one, tars_.Join("two.tar")}, {"duplicate path", "dup/x.txt"});
}

TEST_F(HostileTarTest, DuplicateOfAnExistingMember) {
  const auto tar = Shard("again.tar", {test::File("b/000001.jpg", "x")});
  ExpectRejected({tar}, {"already in the dataset", "b/000001.jpg"});
}

TEST_F(HostileTarTest, TruncatedTar) {
  const auto tar = Shard("trunc.tar", {test::File("big.bin", test::RandomBytes(1, 50000))});
  const std::string bytes = test::ReadFileToString(tar);
  // Cut inside the last member's data, and inside a header.
  for (size_t cut : {bytes.size() - 1024 - 20000, bytes.size() - 1024 - 50000 - 300}) {
    test::WriteStringToFile(tar, std::string_view(bytes).substr(0, cut));
    ExpectRejected({tar}, {tar});
  }
}

// A member whose header declares 3 GiB but whose archive ends after 10 bytes: refused when the
// bytes run out, without ever allocating what the header declares.
TEST_F(HostileTarTest, AMemberDeclaringMoreThanItHoldsIsRefusedNotAllocated) {
  const auto tar = Shard("liar.tar", {test::File("huge.bin", "0123456789")});
  std::string bytes = test::ReadFileToString(tar);
  size_t at = std::string::npos;
  for (size_t b = 0; b + 512 <= bytes.size(); b += 512) {
    if (std::string_view(bytes.data() + b, 9) == std::string_view("huge.bin\0", 9)) at = b;
  }
  ASSERT_NE(at, std::string::npos);
  std::snprintf(&bytes[at + 124], 12, "%011o", 3u << 30);  // ustar size field, octal
  std::memset(&bytes[at + 148], ' ', 8);                   // checksum over the new header
  unsigned sum = 0;
  for (size_t i = 0; i < 512; ++i) sum += static_cast<unsigned char>(bytes[at + i]);
  std::snprintf(&bytes[at + 148], 8, "%06o", sum);
  bytes[at + 155] = ' ';
  test::WriteStringToFile(tar, bytes);
  ExpectRejected({tar}, {tar, "huge.bin"});
}

TEST_F(HostileTarTest, NotATar) {
  test::WriteStringToFile(tars_.Join("garbage.tar"), test::RandomBytes(3, 5000));
  ExpectRejected({tars_.Join("garbage.tar")}, {tars_.Join("garbage.tar")});
}

TEST_F(HostileTarTest, FreshPackLeavesNoChunkFiles) {
  test::TempDir fresh;
  const auto tar = Shard("abs2.tar", {test::File("/abs", "x")});
  auto result = test::PackTars({tar}, *storage::NewPosixStorage(fresh.path()), Opts(4096));
  ExpectInvalid(result, {tar, "/abs"});
  EXPECT_TRUE(test::ChunkFiles(fresh.path()).empty());
  for (const char* dir : {"versions", "segments"}) {
    EXPECT_FALSE(fs::exists(fresh.Join(dir)) && !fs::is_empty(fresh.Join(dir))) << dir;
  }
}

// The tree changing between the walk and the read: a file swapped for a symbolic link to a
// file outside the tree (of the same size: a leak if followed), for a FIFO (a hang if opened
// blocking) or for another file is refused by name, and nothing is published.
TEST(DirectorySourceRace, AFileSwappedAfterTheWalkIsRefusedByName) {
  const std::map<std::string, std::string> swaps = {
      {"symlink", "became a symbolic link"},
      {"fifo", "is no longer a regular file"},
      {"other file", "was replaced or changed while being packed"}};
  for (const auto& [swap, said] : swaps) {
    test::TempDir src, outside;
    std::filesystem::create_directories(src.Join("a"));
    test::WriteStringToFile(src.Join("a/x.txt"), "twelve bytes");
    test::WriteStringToFile(src.Join("a/y.txt"), "another file");
    test::WriteStringToFile(outside.Join("secret"), "SECRET BYTES");  // the same size as x.txt
    DirectorySourceOptions options;
    bool swapped = false;
    options.before_open = [&](const std::string& absolute) {
      if (swapped || !absolute.ends_with("/x.txt")) return;
      swapped = true;
      ASSERT_EQ(::unlink(absolute.c_str()), 0);
      if (swap == "symlink") {
        ASSERT_EQ(::symlink(outside.Join("secret").c_str(), absolute.c_str()), 0);
      } else if (swap == "fifo") {
        ASSERT_EQ(::mkfifo(absolute.c_str(), 0600), 0);
      } else {
        test::WriteStringToFile(absolute, "SECRET BYTES");
      }
    };
    auto source = OpenDirectorySource(src.path(), options);
    ASSERT_TRUE(source.has_value()) << source.error().ToString();
    auto storage = std::make_shared<storage::MemoryStorage>();
    auto packed = Pack(**source, *storage, {});
    EXPECT_TRUE(swapped) << swap;
    ASSERT_FALSE(packed.has_value()) << swap;
    EXPECT_EQ(packed.error().code(), StatusCode::kInvalidArgument) << packed.error().ToString();
    EXPECT_NE(packed.error().message().find("a/x.txt"), std::string::npos)
        << packed.error().ToString();
    EXPECT_NE(packed.error().message().find(said), std::string::npos) << packed.error().ToString();
    EXPECT_FALSE(Dataset::Open(storage).has_value()) << swap << ": a version was published";
  }
}

}  // namespace
}  // namespace stoker::dataset
