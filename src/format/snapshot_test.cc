#include "format/snapshot.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>

#include "common/coding.h"
#include "common/crc32c.h"
#include "common/random.h"
#include "format/snapshot_builder.h"
#include "testing/test_util.h"

namespace stoker::format {
namespace {

// Bytes owned elsewhere (the corruption tests mutate one buffer in place between opens).
class ViewBytes final : public FileBytes {
 public:
  explicit ViewBytes(std::span<const std::byte> bytes) : bytes_(bytes) {}
  std::span<const std::byte> bytes() const override { return bytes_; }

 private:
  std::span<const std::byte> bytes_;
};

Result<std::unique_ptr<Snapshot>> OpenView(const std::string& bytes, bool verify = true) {
  SnapshotOpenOptions options;
  options.verify_checksum = verify;
  return Snapshot::Open(std::make_shared<ViewBytes>(test::AsBytes(bytes)), "test.snap", options);
}

// Entries for `paths` spread over two chunks, with made-up extents and CRCs.
SnapshotSpec SpecFor(const std::vector<std::string>& paths) {
  SnapshotSpec spec;
  spec.dataset_version = 7;
  spec.created_unix_seconds = 1700000000;
  spec.chunks = {{0x100000000ull, 1 << 30, 0x11111111, 0}, {0x100000001ull, 1 << 30, 0x2222, 0}};
  uint64_t offset[2] = {kChunkHeaderSize, kChunkHeaderSize};
  for (size_t i = 0; i < paths.size(); ++i) {
    SnapshotEntry e;
    e.path = paths[i];
    e.chunk = i % 3 == 0 ? 1 : 0;
    e.length = static_cast<uint32_t>((i * 37) % 1000);
    e.offset = offset[e.chunk];
    e.crc32c = crc32c::Value(paths[i]);
    offset[e.chunk] += e.length;
    ++spec.chunks[e.chunk].entry_count;
    spec.entries.push_back(std::move(e));
  }
  return spec;
}

std::vector<std::string> PathsOf(const test::Tree& tree) {
  std::vector<std::string> paths;
  paths.reserve(tree.files.size());
  for (const auto& [path, data] : tree.files) paths.push_back(path);
  return paths;
}

std::unique_ptr<Snapshot> BuildAndOpen(const SnapshotSpec& spec, std::string* bytes_out) {
  auto bytes = BuildSnapshot(spec);
  EXPECT_TRUE(bytes.has_value()) << bytes.error().ToString();
  *bytes_out = std::move(*bytes);
  auto snap = OpenView(*bytes_out);
  EXPECT_TRUE(snap.has_value()) << snap.error().ToString();
  return std::move(*snap);
}

TEST(Snapshot, BuildAndReadBackRandomTrees) {
  for (uint64_t seed : {1, 2, 3, 4, 5}) {
    SCOPED_TRACE(seed);
    const test::Tree tree = test::RandomTree(seed, {.files = 150, .dirs = 25});
    const SnapshotSpec spec = SpecFor(PathsOf(tree));
    std::string bytes;
    auto snap = BuildAndOpen(spec, &bytes);
    ASSERT_TRUE(snap);
    EXPECT_EQ(snap->dataset_version(), 7u);
    EXPECT_EQ(snap->created_unix_seconds(), 1700000000u);
    EXPECT_EQ(snap->size_bytes(), bytes.size());
    EXPECT_EQ(snap->file_count(), tree.files.size());
    EXPECT_EQ(snap->dir_count(), tree.Dirs().size());
    EXPECT_EQ(snap->chunk_count(), 2u);
    EXPECT_FALSE(snap->grouped());
    EXPECT_EQ(snap->sample_count(), snap->file_count());

    uint64_t total = 0;
    for (const auto& e : spec.entries) {
      const auto index = snap->FindFile(e.path);
      ASSERT_TRUE(index.has_value()) << e.path;
      EXPECT_EQ(snap->FilePath(*index), e.path);
      const FileRecord r = snap->file(*index);
      EXPECT_EQ(r.offset, e.offset);
      EXPECT_EQ(r.length, e.length);
      EXPECT_EQ(r.crc32c, e.crc32c);
      EXPECT_EQ(r.chunk, e.chunk);
      EXPECT_EQ(snap->SampleFiles(*index), std::make_pair(*index, 1u));
      EXPECT_EQ(snap->FindFile("/" + e.path + "/"), index);  // slashes at the ends are ignored
      EXPECT_FALSE(snap->FindDir(e.path).has_value());
      total += e.length;
    }
    EXPECT_EQ(snap->total_bytes(), total);
    for (uint32_t c = 0; c < 2; ++c) {
      EXPECT_EQ(snap->chunk(c).id, spec.chunks[c].id);
      EXPECT_EQ(snap->chunk(c).file_size, spec.chunks[c].file_size);
      EXPECT_EQ(snap->chunk(c).data_crc32c, spec.chunks[c].data_crc32c);
      EXPECT_EQ(snap->chunk(c).entry_count, spec.chunks[c].entry_count);
    }

    // Every directory: found by path, and its child and file ranges list exactly the tree.
    for (const auto& dir : tree.Dirs()) {
      const auto d = snap->FindDir(dir);
      ASSERT_TRUE(d.has_value()) << dir;
      EXPECT_EQ(snap->dir_path(*d), dir);
      if (!dir.empty()) {
        EXPECT_FALSE(snap->FindFile(dir).has_value());
      }
      const DirRecord r = snap->dir(*d);
      std::vector<std::pair<std::string, bool>> listing;
      for (uint32_t k = 0; k < r.child_count; ++k) {
        EXPECT_EQ(snap->dir(r.first_child + k).parent, *d);
        listing.emplace_back(snap->dir_name(r.first_child + k), true);
      }
      for (uint32_t k = 0; k < r.file_count; ++k) {
        EXPECT_EQ(snap->file(r.first_file + k).dir, *d);
        listing.emplace_back(snap->file_name(r.first_file + k), false);
      }
      EXPECT_EQ(listing, tree.Listing(dir)) << dir;
    }
    EXPECT_EQ(snap->FindDir(""), 0u);
    EXPECT_EQ(snap->FindDir("/"), 0u);
    EXPECT_FALSE(snap->FindFile("").has_value());
    EXPECT_FALSE(snap->FindFile("no such file").has_value());
    EXPECT_FALSE(snap->FindDir("no such dir").has_value());
    // Nothing labelled with LabelMode::kNone.
    EXPECT_FALSE(snap->labelled());
    EXPECT_EQ(snap->class_count(), 0u);
    for (uint32_t f = 0; f < snap->file_count(); ++f) EXPECT_EQ(snap->file(f).label, kNoLabel);
  }
}

TEST(Snapshot, BatchedLookupsAgreeWithSingleOnes) {
  const test::Tree tree = test::RandomTree(9, {.files = 300, .dirs = 30});
  const SnapshotSpec spec = SpecFor(PathsOf(tree));
  std::string bytes;
  auto snap = BuildAndOpen(spec, &bytes);
  ASSERT_TRUE(snap);
  std::vector<std::string> queries;
  for (const auto& [path, data] : tree.files) {
    queries.push_back(path);
    queries.push_back(path + "x");        // absent
    queries.push_back("/" + path + "/");  // slashes trimmed
  }
  queries.push_back("");
  std::vector<std::string_view> views(queries.begin(), queries.end());
  std::vector<std::optional<uint32_t>> out(views.size());
  snap->FindFiles(views, out);
  for (size_t i = 0; i < views.size(); ++i) {
    EXPECT_EQ(out[i], snap->FindFile(views[i])) << views[i];
  }
  EXPECT_TRUE(out[0].has_value());
  EXPECT_FALSE(out[1].has_value());
}

TEST(Snapshot, BuildIsDeterministicAndOrderIndependent) {
  const test::Tree tree = test::RandomTree(9);
  SnapshotSpec spec = SpecFor(PathsOf(tree));
  const std::string a = BuildSnapshot(spec).value();
  std::reverse(spec.entries.begin(), spec.entries.end());
  EXPECT_EQ(BuildSnapshot(spec).value(), a);
}

TEST(Snapshot, EmptySnapshot) {
  SnapshotSpec spec;
  std::string bytes;
  auto snap = BuildAndOpen(spec, &bytes);
  ASSERT_TRUE(snap);
  EXPECT_EQ(snap->file_count(), 0u);
  EXPECT_EQ(snap->dir_count(), 1u);
  EXPECT_EQ(snap->chunk_count(), 0u);
  EXPECT_EQ(snap->FindDir(""), 0u);
  EXPECT_FALSE(snap->FindFile("a").has_value());
}

TEST(Snapshot, LabelsFromFirstDirectoryFollowImageFolder) {
  // Classes are the sorted top-level directory names, whatever the order files come in.
  const std::vector<std::string> paths = {"zebra/1.jpg", "ant/x/2.jpg", "Bee/3.jpg",
                                          "ant/4.jpg",   "zebra/5.jpg", "éclair/6.jpg"};
  SnapshotSpec spec = SpecFor(paths);
  spec.labels = LabelMode::kFirstDirectory;
  std::string bytes;
  auto snap = BuildAndOpen(spec, &bytes);
  ASSERT_TRUE(snap);
  ASSERT_TRUE(snap->labelled());
  const std::vector<std::string> classes = {"Bee", "ant", "zebra", "éclair"};  // bytewise order
  ASSERT_EQ(snap->class_count(), classes.size());
  for (uint32_t k = 0; k < classes.size(); ++k) EXPECT_EQ(snap->class_name(k), classes[k]);
  EXPECT_EQ(snap->class_name(99), "");
  const std::map<std::string, int32_t> expected = {{"zebra/1.jpg", 2}, {"ant/x/2.jpg", 1},
                                                   {"Bee/3.jpg", 0},   {"ant/4.jpg", 1},
                                                   {"zebra/5.jpg", 2}, {"éclair/6.jpg", 3}};
  for (const auto& [path, label] : expected) {
    const auto f = snap->FindFile(path);
    ASSERT_TRUE(f.has_value());
    EXPECT_EQ(snap->file(*f).label, label) << path;
    EXPECT_EQ(snap->sample_label(*f), label);
  }
}

TEST(Snapshot, RandomImageFolderLabels) {
  const test::Tree tree =
      test::RandomTree(21, {.files = 120, .dirs = 10, .image_folder = true, .classes = 9});
  SnapshotSpec spec = SpecFor(PathsOf(tree));
  spec.labels = LabelMode::kFirstDirectory;
  std::string bytes;
  auto snap = BuildAndOpen(spec, &bytes);
  ASSERT_TRUE(snap);
  const auto classes = tree.Classes();
  ASSERT_EQ(classes.size(), 9u);
  ASSERT_EQ(snap->class_count(), 9u);
  for (uint32_t k = 0; k < 9; ++k) EXPECT_EQ(snap->class_name(k), classes[k]);
  for (const auto& [path, data] : tree.files) {
    EXPECT_EQ(snap->file(*snap->FindFile(path)).label, tree.ExpectedLabel(path)) << path;
  }
}

TEST(Snapshot, FileInTheRootMeansNoDirectoryLabels) {
  SnapshotSpec spec = SpecFor({"a/1.jpg", "b/2.jpg", "README"});
  spec.labels = LabelMode::kFirstDirectory;
  std::string bytes;
  auto snap = BuildAndOpen(spec, &bytes);
  ASSERT_TRUE(snap);
  EXPECT_FALSE(snap->labelled());
  EXPECT_EQ(snap->class_count(), 0u);
  for (uint32_t f = 0; f < snap->file_count(); ++f) EXPECT_EQ(snap->file(f).label, kNoLabel);
}

TEST(Snapshot, ExplicitLabels) {
  SnapshotSpec spec = SpecFor({"a", "b", "c", "d"});
  spec.labels = LabelMode::kExplicit;
  spec.entries[0].label = 3;
  spec.entries[1].label = 0;
  spec.entries[2].label = kNoLabel;
  spec.entries[3].label = 3;
  std::string bytes;
  auto snap = BuildAndOpen(spec, &bytes);
  ASSERT_TRUE(snap);
  EXPECT_TRUE(snap->labelled());
  ASSERT_EQ(snap->class_count(), 4u);  // 0..max label
  EXPECT_EQ(snap->class_name(0), "0");
  EXPECT_EQ(snap->class_name(3), "3");
  EXPECT_EQ(snap->file(*snap->FindFile("a")).label, 3);
  EXPECT_EQ(snap->file(*snap->FindFile("b")).label, 0);
  EXPECT_EQ(snap->file(*snap->FindFile("c")).label, kNoLabel);

  spec.entries[2].label = -2;
  auto bad = BuildSnapshot(spec);
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().code(), StatusCode::kInvalidArgument);
}

TEST(Snapshot, GroupedSamplesFollowWebDatasetKeys) {
  const std::vector<std::string> paths = {
      "s0/000001.jpg", "s0/000001.cls", "s0/000001.seg.mask.png",  // several dots: key 000001
      "s0/000002.jpg", "s0/000002.cls", "s0/0000021.cls",          // a key that extends another
      "s1/000001.jpg", "s1/000001.cls",                            // same key, other directory
      "top.txt",       "a.b.c",         "a.d"};
  SnapshotSpec spec = SpecFor(paths);
  spec.group_by_key = true;
  spec.labels = LabelMode::kExplicit;
  for (auto& e : spec.entries) {
    if (e.path == "s0/000001.cls") e.label = 4;
    if (e.path == "s0/000002.cls") e.label = 1;
    if (e.path == "s1/000001.cls") e.label = 2;
  }
  std::string bytes;
  auto snap = BuildAndOpen(spec, &bytes);
  ASSERT_TRUE(snap);
  EXPECT_TRUE(snap->grouped());
  // Groups: {a.b.c, a.d}, {top.txt}, s0:{000001 ×3}, {000002 ×2}, {0000021}, s1:{000001 ×2}.
  ASSERT_EQ(snap->sample_count(), 6u);
  std::map<std::string, std::pair<std::vector<std::string>, int32_t>> samples;
  for (uint32_t s = 0; s < snap->sample_count(); ++s) {
    const auto [first, count] = snap->SampleFiles(s);
    std::vector<std::string> names;
    for (uint32_t f = first; f < first + count; ++f) {
      names.push_back(snap->FilePath(f));
      EXPECT_EQ(snap->file(f).label, snap->sample_label(s));  // members share the label
    }
    samples[names.front()] = {names, snap->sample_label(s)};
  }
  using V = std::vector<std::string>;
  EXPECT_EQ(samples["a.b.c"].first, (V{"a.b.c", "a.d"}));
  EXPECT_EQ(samples["top.txt"].first, (V{"top.txt"}));
  EXPECT_EQ(samples["s0/000001.cls"].first,
            (V{"s0/000001.cls", "s0/000001.jpg", "s0/000001.seg.mask.png"}));
  EXPECT_EQ(samples["s0/000001.cls"].second, 4);
  EXPECT_EQ(samples["s0/000002.cls"].first, (V{"s0/000002.cls", "s0/000002.jpg"}));
  EXPECT_EQ(samples["s0/000002.cls"].second, 1);
  EXPECT_EQ(samples["s0/0000021.cls"].second, kNoLabel);
  EXPECT_EQ(samples["s1/000001.cls"].first, (V{"s1/000001.cls", "s1/000001.jpg"}));
  EXPECT_EQ(samples["s1/000001.cls"].second, 2);
  EXPECT_EQ(samples["a.b.c"].second, kNoLabel);
}

TEST(Snapshot, Attributes) {
  SnapshotSpec spec = SpecFor({"x/a", "x/b", "y", "z"});
  for (auto& e : spec.entries) {
    if (e.path == "x/b") e.attributes = {{"mime", "image/jpeg"}, {"width", "640"}};
    if (e.path == "z") e.attributes = {{"mime", "text/plain"}, {"empty", ""}};
  }
  std::string bytes;
  auto snap = BuildAndOpen(spec, &bytes);
  ASSERT_TRUE(snap);
  using A = std::vector<std::pair<std::string_view, std::string_view>>;
  EXPECT_EQ(snap->FileAttributes(*snap->FindFile("x/a")), A{});
  EXPECT_EQ(snap->FileAttributes(*snap->FindFile("x/b")),
            (A{{"mime", "image/jpeg"}, {"width", "640"}}));
  EXPECT_EQ(snap->FileAttributes(*snap->FindFile("y")), A{});
  EXPECT_EQ(snap->FileAttributes(*snap->FindFile("z")), (A{{"mime", "text/plain"}, {"empty", ""}}));
}

TEST(Snapshot, DuplicatesAndFileDirectoryConflictsAreRejected) {
  for (const auto& paths : std::vector<std::vector<std::string>>{
           {"a/b", "c", "a/b"}, {"a", "a/b"}, {"x/y/z", "x/y"}, {"x/y", "x/y/z/w"}}) {
    auto built = BuildSnapshot(SpecFor(paths));
    ASSERT_FALSE(built.has_value()) << paths[0];
    EXPECT_EQ(built.error().code(), StatusCode::kInvalidArgument);
  }
  EXPECT_NE(BuildSnapshot(SpecFor({"a/b", "a/b"})).error().message().find("duplicate path: a/b"),
            std::string::npos);
  EXPECT_NE(BuildSnapshot(SpecFor({"a", "a/b"})).error().message().find("both a file and a dir"),
            std::string::npos);
}

TEST(Snapshot, UnsafePathsAreRejected) {
  const std::string long_name(256, 'n');
  for (const std::string& bad :
       {std::string(""), std::string("."), std::string(".."), std::string("a/./b"),
        std::string("a/../b"), std::string("../x"), std::string("a/.."), std::string("a//b"),
        std::string("/a"), std::string("a/"), std::string("a\0b", 3), "d/" + long_name}) {
    EXPECT_EQ(ValidateRelativePath(bad).code(), StatusCode::kInvalidArgument) << bad;
    auto built = BuildSnapshot(SpecFor({"ok", bad}));
    ASSERT_FALSE(built.has_value()) << bad;
    EXPECT_EQ(built.error().code(), StatusCode::kInvalidArgument);
  }
  for (const char* good : {"a", "...", ".hidden", "a/b.c/d", "sp ace/é/🙂", "a..b"}) {
    EXPECT_TRUE(ValidateRelativePath(good).ok()) << good;
  }
  EXPECT_TRUE(ValidateRelativePath(std::string(255, 'n')).ok());
  // 4,096 bytes in all, as Linux's PATH_MAX: a longer path could not come from a directory, and
  // keys (§7) stay short enough that a keyed block cannot decode to gigabytes.
  std::string deep;
  while (deep.size() < 4096) deep += (deep.empty() ? "" : "/") + std::string(127, 'd');
  EXPECT_TRUE(ValidateRelativePath(deep.substr(0, 4096 - 2) + "/x").ok());
  EXPECT_EQ(ValidateRelativePath(deep + "/x").code(), StatusCode::kInvalidArgument);
}

TEST(Snapshot, UnderOneHundredBytesPerImageNetFile) {
  std::vector<std::string> paths;
  paths.reserve(100000);
  for (int c = 0; c < 1000; ++c) {
    const std::string wnid = fmt::format("n{:08d}", 1440764 + c * 7919);
    for (int i = 0; i < 100; ++i)
      paths.push_back(fmt::format("train/{0}/{0}_{1:05d}.JPEG", wnid, i * 13));
  }
  SnapshotSpec spec = SpecFor(paths);
  spec.labels = LabelMode::kFirstDirectory;
  std::string bytes;
  auto snap = BuildAndOpen(spec, &bytes);
  ASSERT_TRUE(snap);
  ASSERT_EQ(snap->file_count(), 100000u);
  EXPECT_EQ(snap->dir_count(), 1002u);
  const double per_file = static_cast<double>(bytes.size()) / 100000;
  EXPECT_LT(per_file, 100.0) << bytes.size() << " bytes";
  for (size_t i = 0; i < paths.size(); i += 997) {
    const auto f = snap->FindFile(paths[i]);
    ASSERT_TRUE(f.has_value()) << paths[i];
    EXPECT_EQ(snap->FilePath(*f), paths[i]);
  }
}

// Every accessor, on every index Open accepted: a snapshot that opens must be safe to use.
void ExerciseEverything(const Snapshot& snap) {
  for (uint32_t f = 0; f < snap.file_count(); ++f) {
    const std::string path = snap.FilePath(f);
    (void)snap.FindFile(path);
    (void)snap.file_name(f);
    (void)snap.FileAttributes(f);
    (void)snap.chunk(snap.file(f).chunk);
    (void)snap.class_name(static_cast<uint32_t>(snap.file(f).label));
  }
  for (uint32_t d = 0; d < snap.dir_count(); ++d) {
    (void)snap.FindDir(snap.dir_path(d));
    (void)snap.dir_name(d);
    const DirRecord r = snap.dir(d);
    for (uint32_t k = 0; k < r.child_count; ++k) (void)snap.dir_name(r.first_child + k);
    for (uint32_t k = 0; k < r.file_count; ++k) (void)snap.file_name(r.first_file + k);
  }
  for (uint32_t s = 0; s < snap.sample_count(); ++s) {
    const auto [first, count] = snap.SampleFiles(s);
    if (count > 0) (void)snap.file(first + count - 1);
    (void)snap.sample_label(s);
  }
  for (uint32_t k = 0; k < snap.class_count(); ++k) (void)snap.class_name(k);
  for (std::string_view probe : {"a", "s0/000001.jpg", "x/y", "", "zz/top"}) {
    (void)snap.FindFile(probe);
    (void)snap.FindDir(probe);
  }
}

// A snapshot using every section: dirs, grouped samples, labels, attributes, two chunks.
std::string RichSnapshot() {
  std::vector<std::string> paths = {"s0/000001.jpg", "s0/000001.cls",   "s0/000002.jpg",
                                    "s0/000002.cls", "s1/x/000003.jpg", "s1/x/000003.cls"};
  for (int i = 0; i < 12; ++i) paths.push_back(fmt::format("s1/y{}/{:06d}.json", i % 3, i));
  SnapshotSpec spec = SpecFor(paths);
  spec.group_by_key = true;
  spec.labels = LabelMode::kExplicit;
  for (size_t i = 0; i < spec.entries.size(); ++i) {
    auto& e = spec.entries[i];
    if (e.path.ends_with(".cls")) e.label = static_cast<int32_t>(i % 4);
    if (i % 5 == 0) e.attributes = {{"k", "v" + std::to_string(i)}};
  }
  return BuildSnapshot(spec).value();
}

TEST(SnapshotCorruption, EveryBitFlipIsDetectedByTheChecksum) {
  std::string bytes = RichSnapshot();
  ASSERT_TRUE(OpenView(bytes).has_value());
  SCOPED_TRACE(fmt::format("{} bytes", bytes.size()));
  for (size_t bit = 0; bit < bytes.size() * 8; ++bit) {
    bytes[bit / 8] ^= static_cast<char>(1 << (bit % 8));
    auto snap = OpenView(bytes);
    ASSERT_FALSE(snap.has_value()) << "bit " << bit;
    ASSERT_EQ(snap.error().code(), StatusCode::kCorruption)
        << "bit " << bit << ": " << snap.error().ToString();
    bytes[bit / 8] ^= static_cast<char>(1 << (bit % 8));
  }
  ASSERT_TRUE(OpenView(bytes).has_value());
}

TEST(SnapshotCorruption, TruncationIsDetected) {
  const std::string bytes = RichSnapshot();
  for (size_t n = 0; n < bytes.size(); ++n) {
    for (bool verify : {true, false}) {
      auto snap = OpenView(bytes.substr(0, n), verify);
      ASSERT_FALSE(snap.has_value()) << n;
      EXPECT_EQ(snap.error().code(), StatusCode::kCorruption) << n;
    }
  }
}

// Without the checksum (the fuzzer's setting) structural validation alone must keep readers
// safe: any mutation either fails Open cleanly or yields a snapshot whose accessors stay in
// bounds (ASan/UBSan builds turn any slip into a failure here).
TEST(SnapshotCorruption, MutationsWithoutChecksumNeverCrash) {
  const std::string good = RichSnapshot();
  Pcg32 rng(77);
  int opened = 0, rejected = 0;
  for (int iteration = 0; iteration < 100000; ++iteration) {
    std::string bytes = good;
    switch (rng.Below(4)) {
      case 0:  // a few bit flips
        for (uint64_t k = 1 + rng.Below(4); k > 0; --k) {
          const uint64_t bit = rng.Below(bytes.size() * 8);
          bytes[bit / 8] ^= static_cast<char>(1 << (bit % 8));
        }
        break;
      case 1:  // random byte overwrites
        for (uint64_t k = 1 + rng.Below(8); k > 0; --k) {
          bytes[rng.Below(bytes.size())] = static_cast<char>(rng.Next());
        }
        break;
      case 2: {  // an aligned u32 set to a boundary value (counts, indices, string refs)
        const uint64_t at = rng.Below((bytes.size() - kSnapshotTrailerSize) / 4) * 4;
        const uint32_t old = coding::DecodeFixed<uint32_t>(bytes.data() + at);
        const uint32_t values[] = {0,           1,        0xFFFFFFFFu,
                                   0x7FFFFFFFu, old + 1,  old - 1,
                                   old * 2,     0x10000u, static_cast<uint32_t>(rng.Next())};
        coding::EncodeFixed<uint32_t>(bytes.data() + at, values[rng.Below(std::size(values))]);
        break;
      }
      default: {  // 3: truncation, with the trailer moved so the size check passes
        const size_t keep = kSnapshotHeaderSize + rng.Below(good.size() - kSnapshotHeaderSize);
        bytes = good.substr(0, keep);
        bytes += good.substr(good.size() - kSnapshotTrailerSize);
        coding::EncodeFixed<uint64_t>(bytes.data() + bytes.size() - kSnapshotTrailerSize,
                                      bytes.size());
        break;
      }
    }
    auto snap = OpenView(bytes, /*verify=*/false);
    if (!snap) {
      ++rejected;
      EXPECT_TRUE(snap.error().IsCorruption() || snap.error().IsUnsupported())
          << snap.error().ToString();
      continue;
    }
    ++opened;
    ExerciseEverything(**snap);
  }
  // Both outcomes happen, so both paths were exercised.
  EXPECT_GT(opened, 100);
  EXPECT_GT(rejected, 100);
}

TEST(SnapshotCorruption, ValidSnapshotsExerciseCleanly) {
  std::string bytes = RichSnapshot();
  auto snap = OpenView(bytes);
  ASSERT_TRUE(snap.has_value());
  ExerciseEverything(**snap);
  EXPECT_EQ((*snap)->crc32c(), coding::DecodeFixed<uint32_t>(bytes.data() + bytes.size() - 8));
}

}  // namespace
}  // namespace stoker::format
