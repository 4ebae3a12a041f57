#include "format/segment.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "common/coding.h"
#include "common/crc32c.h"
#include "common/random.h"
#include "common/varint.h"
#include "format/segment_builder.h"
#include "format/segment_layout.h"
#include "format/segment_merge.h"
#include "testing/test_util.h"

namespace stoker::format {
namespace {

// A segment's bytes held by the test (mutated in place by the corruption test).
class StringFile final : public RandomAccessFile {
 public:
  explicit StringFile(const std::string* bytes) : bytes_(bytes) {}
  uint64_t Size() const override { return bytes_->size(); }
  Status ReadAt(uint64_t offset, std::span<std::byte> dst) const override {
    if (offset > bytes_->size() || dst.size() > bytes_->size() - offset) {
      return Status::IOError("read past the end");
    }
    std::memcpy(dst.data(), bytes_->data() + offset, dst.size());
    ++reads;
    read_bytes += dst.size();
    return Status::OK();
  }
  mutable uint64_t reads = 0, read_bytes = 0;

 private:
  const std::string* bytes_;
};

// `paths` spread over `chunk_count` chunks in a scrambled storage order, with labels and a few
// attributes.
SegmentSpec SpecFor(const std::vector<std::string>& paths, uint64_t seed,
                    uint32_t chunk_count = 3) {
  SegmentSpec spec;
  spec.flags = kSegmentLabelled;
  spec.first_file = 1000;
  spec.first_sample = 1000;
  spec.first_label = 2;
  spec.classes = {"cat", "dog", "emu"};
  std::vector<size_t> order(paths.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  Pcg32 rng(seed);
  for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.Below(i)]);
  spec.chunks.resize(chunk_count);
  std::vector<uint64_t> offset(chunk_count, kChunkHeaderSize);
  spec.files.resize(paths.size());
  for (size_t k = 0; k < order.size(); ++k) {
    const size_t i = order[k];
    SegmentFile& f = spec.files[i];
    f.path = paths[i];
    f.chunk = static_cast<uint32_t>(k % chunk_count);
    f.length = (i * 7919) % 5000;
    f.offset = offset[f.chunk];
    f.crc32c = crc32c::Value(paths[i]);
    f.label = static_cast<int32_t>(i % 6) - 1;  // -1 .. 4
    if (i % 50 == 0) f.attributes = {{"split", "val"}, {"author", fmt::format("a{}", i)}};
    offset[f.chunk] += f.length;
    ++spec.chunks[f.chunk].entry_count;
  }
  for (uint32_t c = 0; c < chunk_count; ++c) {
    spec.chunks[c].id = 0xabc000 + c;
    spec.chunks[c].file_size =
        offset[c] + kChunkFooterSize + kChunkIndexEntrySize * spec.chunks[c].entry_count;
  }
  return spec;
}

std::vector<std::string> TreePaths(int files) {
  std::vector<std::string> paths;
  paths.reserve(files);
  for (int i = 0; i < files; ++i) {
    paths.push_back(fmt::format("train/n{:08d}/n{:08d}_{}.JPEG", i % 13, i % 13, i));
  }
  paths.push_back("README");
  paths.push_back("a.b/c");  // "a.b" sorts between "a" and "a/..." bytewise
  paths.push_back("a/c");
  paths.push_back("a/b/deep/er/file");
  return paths;
}

std::unique_ptr<Segment> OpenOrDie(const std::string* bytes) {
  auto seg = Segment::Open(std::make_shared<StringFile>(bytes), "test.seg");
  EXPECT_TRUE(seg.has_value()) << seg.error().ToString();
  return seg ? std::move(*seg) : nullptr;
}

TEST(SegmentKey, APathAndItsKeyRoundTripAndDamagedKeysAreRefused) {
  for (const std::string path : {"README", "a/b", "train/n01/x.JPEG", "a b/c\x01d"}) {
    EXPECT_EQ(PathOfFileKey(FileKeyOf(path)), path);
  }
  using namespace std::string_literals;
  // A name holding '/' reads as a path whose key is another entry's ("a/b\0c"), so a lookup by
  // it found another file (segment fuzzer); an empty name or a second NUL is no path either.
  for (const std::string& key : {"a\0b/c"s, "\0a/b"s, "a\0"s, "\0"s, "a\0b\0c"s, "ab"s}) {
    EXPECT_EQ(PathOfFileKey(key), std::nullopt) << key;
  }
}

TEST(Segment, RoundTripsEveryFileByPathPositionAndLocation) {
  const auto paths = TreePaths(1500);  // several blocks of each table
  const SegmentSpec spec = SpecFor(paths, 1);
  auto bytes = BuildSegment(spec);
  ASSERT_TRUE(bytes.has_value()) << bytes.error().ToString();
  auto seg = OpenOrDie(&*bytes);
  ASSERT_NE(seg, nullptr);
  const SegmentInfo& info = seg->info();
  EXPECT_EQ(info.first_file, 1000u);
  EXPECT_EQ(info.file_count, paths.size());
  EXPECT_EQ(info.sample_count, paths.size());
  EXPECT_EQ(info.first_label, 2u);
  EXPECT_EQ(info.class_count, 3u);
  EXPECT_EQ(seg->class_name(1), "dog");
  EXPECT_EQ(info.chunk_count, 3u);
  EXPECT_EQ(seg->chunk(2).value().id, 0xabc002u);

  // Positions follow (directory, name) order.
  std::vector<std::string> sorted = paths;
  std::sort(sorted.begin(), sorted.end(),
            [](const std::string& a, const std::string& b) { return FileKeyOf(a) < FileKeyOf(b); });
  EXPECT_EQ(sorted.front(), "README");
  for (uint64_t p = 0; p < sorted.size(); ++p) {
    EXPECT_EQ(seg->FilePath(p).value(), sorted[p]);
  }
  for (const SegmentFile& f : spec.files) {
    const auto position = seg->FindFile(f.path).value();
    ASSERT_TRUE(position.has_value()) << f.path;
    EXPECT_EQ(sorted[*position], f.path);
    const SegmentLocation l = seg->FileLocation(*position).value();
    EXPECT_EQ(l.position, *position);
    EXPECT_EQ(l.chunk, f.chunk);
    EXPECT_EQ(l.offset, f.offset) << f.path;
    EXPECT_EQ(l.length, f.length);
    EXPECT_EQ(l.crc32c, f.crc32c);
    EXPECT_EQ(l.label, f.label);
    auto attrs = seg->Attributes(*position).value();
    auto want = f.attributes;
    std::sort(want.begin(), want.end());
    EXPECT_EQ(attrs, want) << f.path;
  }
  EXPECT_FALSE(seg->FindFile("train/n00000000").value().has_value());  // a directory
  EXPECT_FALSE(seg->FindFile("zzz").value().has_value());
  EXPECT_FALSE(seg->FindFile("a/b").value().has_value());

  // The streaming views agree with the lookups.
  uint64_t visited = 0;
  ASSERT_TRUE(seg->ForEachFile([&](uint64_t p, std::string_view path, uint64_t ordinal) {
                   EXPECT_EQ(path, sorted[p]);
                   EXPECT_LT(ordinal, paths.size());
                   ++visited;
                   return Status::OK();
                 })
                  .ok());
  EXPECT_EQ(visited, paths.size());
  std::vector<bool> seen(paths.size());
  uint64_t last_chunk = 0;
  ASSERT_TRUE(seg->ForEachLocation([&](uint64_t, const SegmentLocation& l) {
                   EXPECT_GE(l.chunk, last_chunk);
                   last_chunk = l.chunk;
                   EXPECT_FALSE(seen[l.position]);
                   seen[l.position] = true;
                 })
                  .ok());
  EXPECT_EQ(std::count(seen.begin(), seen.end(), true), static_cast<long>(paths.size()));
  // One chunk's locations, read alone, are that chunk's part of the whole walk, in order.
  std::vector<std::vector<uint64_t>> by_chunk(seg->info().chunk_count);
  ASSERT_TRUE(seg->ForEachLocation([&](uint64_t, const SegmentLocation& l) {
                   by_chunk[l.chunk].push_back(l.position);
                 })
                  .ok());
  for (uint64_t c = 0; c < seg->info().chunk_count; ++c) {
    std::vector<uint64_t> alone;
    const auto locations = seg->ChunkLocations(c).value();
    for (const SegmentLocation& l : locations) {
      EXPECT_EQ(l.chunk, c);
      alone.push_back(l.position);
    }
    EXPECT_EQ(alone, by_chunk[c]) << "chunk " << c;
  }

  // Directories.
  EXPECT_EQ(seg->ChildDirs("").value(), (std::vector<std::string>{"a", "a.b", "train"}));
  EXPECT_EQ(seg->ChildDirs("a").value(), std::vector<std::string>{"b"});
  EXPECT_EQ(seg->ChildDirs("train").value().size(), 13u);
  const auto root = seg->FindDir("").value();
  ASSERT_TRUE(root.has_value());
  EXPECT_EQ(root->file_count, 1u);  // README
  const auto dir = seg->FindDir("train/n00000003").value();
  ASSERT_TRUE(dir.has_value());
  for (uint64_t k = 0; k < dir->file_count; ++k) {
    EXPECT_TRUE(seg->FilePath(dir->first_rank + k).value().starts_with("train/n00000003/"));
  }
  EXPECT_FALSE(seg->FindDir("a/b/deep/er/file").value().has_value());
  EXPECT_TRUE(seg->FindDir("a/b/deep").value().has_value());  // an ancestor without files
}

TEST(Segment, ALookupReadsAFewBlocksNotTheSegment) {
  const SegmentSpec spec = SpecFor(TreePaths(20000), 2);
  auto built = BuildSegment(spec);
  ASSERT_TRUE(built.has_value()) << built.error().ToString();
  const std::string& bytes = *built;
  auto file = std::make_shared<StringFile>(&bytes);
  auto seg = Segment::Open(file, "big.seg");
  ASSERT_TRUE(seg.has_value()) << seg.error().ToString();
  const uint64_t open_bytes = file->read_bytes;
  const auto position = (*seg)->FindFile("train/n00000007/n00000007_20.JPEG").value();
  ASSERT_TRUE(position.has_value());
  ASSERT_TRUE((*seg)->FileLocation(*position).has_value());
  const uint64_t lookup_bytes = file->read_bytes - open_bytes;
  EXPECT_LT(lookup_bytes, 3 * 8192u);
  EXPECT_LT(file->read_bytes, bytes.size() / 10) << "open " << open_bytes << " of " << bytes.size();
}

// Format 3 (docs/format.md §3.6): past 65,536 files the file table has several index blocks,
// the location index several groups, and past 256 chunks the chunk table several groups; open
// still reads the trailer, footer and top indexes only, and a lookup a few blocks.
TEST(Segment, OpenReadsTheSameFewBytesAtAnySize) {
  std::vector<uint64_t> open_bytes;
  for (const int files : {2000, 140000}) {
    const std::vector<std::string> paths = TreePaths(files);
    const SegmentSpec spec = SpecFor(paths, 5, static_cast<uint32_t>(files / 250));
    auto built = BuildSegment(spec);
    ASSERT_TRUE(built.has_value()) << built.error().ToString();
    const std::string& bytes = *built;
    auto file = std::make_shared<StringFile>(&bytes);
    auto opened = Segment::Open(file, "big.seg");
    ASSERT_TRUE(opened.has_value()) << opened.error().ToString();
    const Segment& seg = **opened;
    EXPECT_EQ(seg.format_version(), kFormatVersion3);
    open_bytes.push_back(file->read_bytes);

    // Lookups of paths spread over every index block, each reading a few blocks.
    for (size_t i = 0; i < paths.size(); i += 997) {
      const uint64_t before = file->read_bytes;
      const auto position = seg.FindFile(paths[i]).value();
      ASSERT_TRUE(position.has_value()) << paths[i];
      EXPECT_EQ(seg.FilePath(*position).value(), paths[i]);
      const SegmentLocation l = seg.FileLocation(*position).value();
      const SegmentFile& want = spec.files[i];
      EXPECT_EQ(l.length, want.length);
      EXPECT_EQ(l.crc32c, want.crc32c);
      EXPECT_EQ(l.chunk, want.chunk);
      EXPECT_EQ(seg.chunk(l.chunk).value().id, spec.chunks[want.chunk].id);
      EXPECT_LT(file->read_bytes - before, 6 * 8192u) << paths[i];
      // Keys just beside it are absent, wherever they fall among the blocks.
      EXPECT_FALSE(seg.FindFile(paths[i] + "~").value().has_value());
      EXPECT_FALSE(seg.FindFile(paths[i].substr(0, paths[i].size() - 1)).value().has_value());
    }
    EXPECT_FALSE(seg.FindFile("").value().has_value());
    EXPECT_FALSE(seg.FindFile("zzz/after/everything").value().has_value());
    // A chunk in the last group of the chunk table: exactly its files.
    const uint64_t last = spec.chunks.size() - 1;
    const auto files_of_last = seg.ChunkLocations(last).value();
    EXPECT_EQ(files_of_last.size(), spec.chunks[last].entry_count);
    for (const SegmentLocation& l : files_of_last) EXPECT_EQ(l.chunk, last);
    const Status checked = seg.CheckEveryBlock();
    EXPECT_TRUE(checked.ok()) << checked.ToString();
  }
  // 70x the files: a few top-index records more, no more.
  EXPECT_LT(open_bytes[1], open_bytes[0] + 512) << open_bytes[0] << " then " << open_bytes[1];
  EXPECT_LT(open_bytes[1], 4096u);
}

// A damaged index block, chunk group or location-index group of a large segment is found by
// the lookup or check that reads it, and named as corruption.
TEST(Segment, DamageInAnyFormat3GroupIsCaught) {
  const std::vector<std::string> paths = TreePaths(140000);
  const std::string original = BuildSegment(SpecFor(paths, 6, 600)).value();
  auto clean = OpenOrDie(&original);
  ASSERT_NE(clean, nullptr);
  ASSERT_TRUE(clean->CheckEveryBlock().ok());
  // The sections read a block or group at a time, by their footer records; flip a byte in the
  // middle of each, and in its second half (a later group or index block).
  std::string bytes = original;
  const uint64_t footer_offset =
      coding::DecodeFixed<uint64_t>(original.data() + original.size() - 32);
  const uint32_t sections = coding::DecodeFixed<uint32_t>(original.data() + footer_offset + 80);
  int flipped = 0;
  for (uint32_t k = 0; k < sections; ++k) {
    const char* record = original.data() + footer_offset + 88 + 32 * k;
    const auto kind = coding::DecodeFixed<uint32_t>(record);
    const auto offset = coding::DecodeFixed<uint64_t>(record + 8);
    const auto size = coding::DecodeFixed<uint64_t>(record + 16);
    if (kind != kSegChunks && kind != kSegLocationIndex && kind != kSegFileIndex) continue;
    for (const uint64_t at : {offset + size / 2, offset + size - 1}) {
      bytes[at] = static_cast<char>(bytes[at] ^ 0x04);
      auto seg = Segment::Open(std::make_shared<StringFile>(&bytes), "flipped.seg");
      const Status st = seg ? (*seg)->CheckEveryBlock() : seg.error();
      EXPECT_TRUE(st.IsCorruption())
          << "section " << kind << " byte " << at << ": " << st.ToString();
      bytes[at] = original[at];
      ++flipped;
    }
  }
  EXPECT_EQ(flipped, 6);
}

// A file read by position decodes its block only up to its entry (EntryAt); that entry is held
// to the order a whole block is, or a damaged segment lists one path at two positions (found by
// the segment fuzzer). Here block 0's last key is raised from "f255" to "f257", above block 1's
// first key "f256": its path would be found at position 257.
TEST(Segment, AKeyReadByPositionMustLieBelowTheNextBlock) {
  std::vector<std::string> paths(300);
  for (size_t i = 0; i < paths.size(); ++i) paths[i] = fmt::format("f{:03d}", i);
  std::string bytes = BuildSegment(SpecFor(paths, 1)).value();
  const uint64_t footer_offset = coding::DecodeFixed<uint64_t>(bytes.data() + bytes.size() - 32);
  const uint32_t sections = coding::DecodeFixed<uint32_t>(bytes.data() + footer_offset + 80);
  uint64_t files_at = 0;
  for (uint32_t k = 0; k < sections; ++k) {
    const char* record = bytes.data() + footer_offset + 88 + 32 * k;
    if (coding::DecodeFixed<uint32_t>(record) == kSegFiles) {
      files_at = coding::DecodeFixed<uint64_t>(record + 8);
    }
  }
  ASSERT_GT(files_at, 0u);
  // Entries: shared, unshared, suffix, value size, value. "f255" follows "f254": suffix "5".
  std::string_view in(bytes.data() + files_at, bytes.size() - files_at);
  size_t suffix_at = 0;
  for (uint64_t i = 0; i < kBlockEntries; ++i) {
    const uint64_t shared = varint::Get(&in).value(), unshared = varint::Get(&in).value();
    if (i + 1 == kBlockEntries) {
      ASSERT_EQ(shared, 4u);  // "\0f25"
      ASSERT_EQ(in.substr(0, unshared), "5");
      suffix_at = static_cast<size_t>(in.data() - bytes.data());
    }
    in.remove_prefix(unshared);
    in.remove_prefix(varint::Get(&in).value());
  }
  bytes[suffix_at] = '7';
  SegmentOpenOptions options;
  options.verify_checksums = false;  // as a hostile writer's segment would pass its own CRCs
  auto seg = Segment::Open(std::make_shared<StringFile>(&bytes), "raised.seg", options);
  ASSERT_TRUE(seg.has_value()) << seg.error().ToString();
  const auto path = (*seg)->FilePath(kBlockEntries - 1);
  ASSERT_FALSE(path.has_value()) << *path;
  EXPECT_TRUE(path.error().IsCorruption()) << path.error().ToString();
  EXPECT_NE(path.error().message().find("overlaps the next"), std::string::npos);
  EXPECT_EQ((*seg)->FilePath(kBlockEntries).value(), "f256");  // block 1 is sound
}

TEST(Segment, AFooterCountingMoreFilesThanItsSectionsHoldIsRefusedAtOpen) {
  const std::string original = BuildSegment(SpecFor(TreePaths(300), 3)).value();
  ASSERT_NE(OpenOrDie(&original), nullptr);
  // The same segment whose footer says 65,536 files (still one top-index record), its CRC
  // recomputed. (The location index's size, tied to the count, caught this one before too; the
  // check at open also holds when a crafted segment has a location index to match.)
  std::string bytes = original;
  const uint64_t footer_offset = coding::DecodeFixed<uint64_t>(bytes.data() + bytes.size() - 32);
  const uint64_t footer_size = coding::DecodeFixed<uint64_t>(bytes.data() + bytes.size() - 24);
  for (const size_t field : {16, 32}) {  // file count, sample count
    coding::EncodeFixed<uint64_t>(bytes.data() + footer_offset + field, 65536);
  }
  coding::EncodeFixed<uint32_t>(bytes.data() + bytes.size() - 16,
                                crc32c::Value(bytes.data() + footer_offset, footer_size));
  auto seg = Segment::Open(std::make_shared<StringFile>(&bytes), "inflated.seg");
  ASSERT_FALSE(seg.has_value());
  EXPECT_TRUE(seg.error().IsCorruption()) << seg.error().ToString();
  EXPECT_NE(seg.error().message().find("counts 65536 files"), std::string::npos)
      << seg.error().ToString();
}

// Each location names its sample and, on the sample's first file, its file count, as the
// samples section says; each chunk record counts the samples whose first file it holds.
void ExpectLocationsSayTheirSamples(const Segment& seg) {
  ASSERT_TRUE(seg.LoadSamples().ok());
  std::vector<uint32_t> started(seg.info().chunk_count, 0);
  uint64_t locations = 0;
  ASSERT_TRUE(seg.ForEachLocation([&](uint64_t, const SegmentLocation& l) {
                   EXPECT_EQ(std::pair(l.sample, l.sample_files), seg.SampleOf(l.position))
                       << "file " << l.position;
                   started[l.chunk] += l.sample_files > 0;
                   ++locations;
                 })
                  .ok());
  EXPECT_EQ(locations, seg.info().file_count);
  for (uint64_t c = 0; c < seg.info().chunk_count; ++c) {
    EXPECT_EQ(seg.chunk(c).value().sample_count, started[c]) << "chunk " << c;
  }
}

TEST(Segment, GroupsTarSamplesByKey) {
  SegmentSpec spec = SpecFor(
      {"s/000001.jpg", "s/000001.cls", "s/000002.jpg", "s/0000020.jpg", "s/000002.json", "t/x"}, 3);
  spec.flags |= kSegmentGrouped;
  spec.first_sample = 40;
  const std::string bytes = BuildSegment(spec).value();
  auto seg = OpenOrDie(&bytes);
  ASSERT_NE(seg, nullptr);
  EXPECT_EQ(seg->info().sample_count, 4u);
  EXPECT_EQ(seg->info().first_sample, 40u);
  ASSERT_TRUE(seg->LoadSamples().ok());
  EXPECT_EQ(seg->SampleFiles(0), (std::pair<uint64_t, uint64_t>(0, 2)));  // 000001.{cls,jpg}
  EXPECT_EQ(seg->SampleFiles(1), (std::pair<uint64_t, uint64_t>(2, 2)));  // 000002.{jpg,json}
  EXPECT_EQ(seg->SampleFiles(2), (std::pair<uint64_t, uint64_t>(4, 1)));  // 0000020.jpg
  EXPECT_EQ(seg->FilePath(5).value(), "t/x");
  EXPECT_EQ(seg->SampleOf(3), (std::pair<uint64_t, uint64_t>(1, 0)));  // 000002.json
  ExpectLocationsSayTheirSamples(*seg);
}

TEST(Segment, EmptySegmentHoldsOnlyTheRoot) {
  SegmentSpec spec;
  const std::string bytes = BuildSegment(spec).value();
  auto seg = OpenOrDie(&bytes);
  ASSERT_NE(seg, nullptr);
  EXPECT_EQ(seg->info().file_count, 0u);
  EXPECT_TRUE(seg->FindDir("").value().has_value());
  EXPECT_FALSE(seg->FindFile("x").value().has_value());
}

TEST(SegmentBuilder, RejectsWhatTheFormatCannotSay) {
  auto code = [](const SegmentSpec& spec) { return BuildSegment(spec).error().code(); };
  EXPECT_EQ(code(SpecFor({"a", "b", "a"}, 1)), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(SpecFor({"a", "a/b"}, 1)), StatusCode::kInvalidArgument);  // file and dir
  EXPECT_EQ(code(SpecFor({"a", "../b"}, 1)), StatusCode::kInvalidArgument);
  SegmentSpec gap = SpecFor({"a", "b", "c", "d"}, 1);
  gap.files[0].offset += 1;  // no longer tiles its chunk
  EXPECT_EQ(code(gap), StatusCode::kInvalidArgument);
  SegmentSpec size = SpecFor({"a", "b", "c", "d"}, 1);
  size.chunks[0].file_size += 1;
  EXPECT_EQ(code(size), StatusCode::kInvalidArgument);
  SegmentSpec label = SpecFor({"a", "b"}, 1);
  label.files[0].label = 5;  // classes go up to first_label + 3 = 5, exclusive
  EXPECT_EQ(code(label), StatusCode::kInvalidArgument);
}

// The streaming builder, fed in storage order with a memory budget so small that every few
// files spill a sorted run, writes exactly the segment the in-memory path builds; written
// again with other numbers (a writer that lost a publish race), it changes only what numbering
// says. Class-directory labels follow the numbering's dir_labels.
TEST(SegmentBuilder, StreamsThroughSortedRunsToTheSameBytes) {
  const SegmentSpec spec = SpecFor(TreePaths(3000), 11);
  const std::string expected = BuildSegment(spec).value();

  SegmentBuilder builder(SortOptions{DefaultSpoolDir(), 2048});
  std::vector<size_t> by_place(spec.files.size());
  for (size_t i = 0; i < by_place.size(); ++i) by_place[i] = i;
  std::sort(by_place.begin(), by_place.end(), [&](size_t a, size_t b) {
    return std::tie(spec.files[a].chunk, spec.files[a].offset, a) <
           std::tie(spec.files[b].chunk, spec.files[b].offset, b);
  });
  std::vector<uint64_t> next_entry(spec.chunks.size());
  for (size_t i : by_place) {
    const SegmentFile& f = spec.files[i];
    ASSERT_TRUE(builder
                    .Add({f.path, f.chunk, next_entry[f.chunk]++, f.length, f.crc32c, f.label,
                          f.attributes})
                    .ok());
  }
  ASSERT_TRUE(builder.Seal(spec.chunks, Grouping::kFiles).ok());
  EXPECT_EQ(builder.file_count(), spec.files.size());
  EXPECT_EQ(builder.first_level_dirs(), (std::vector<std::string>{"a", "a.b", "train"}));
  EXPECT_EQ(builder.a_file_outside_dirs(), "README");
  EXPECT_EQ(builder.max_label(), 4);
  SegmentNumbering numbering{spec.flags,
                             spec.first_file,
                             spec.first_sample,
                             spec.first_label,
                             spec.classes,
                             LabelSource::kInput,
                             {}};
  InMemorySegmentSink sink;
  ASSERT_TRUE(builder.Write(numbering, sink).ok());
  EXPECT_EQ(sink.bytes == expected, true) << "streamed and in-memory segments differ";

  // Rebased: other first numbers, labels by class directory.
  numbering.first_file = 5;
  numbering.first_label = 7;
  numbering.classes = {"a", "train"};
  numbering.labels = LabelSource::kDirs;
  numbering.dir_labels = {7, 3, 8};  // "a.b" is an existing class 3
  InMemorySegmentSink again;
  ASSERT_TRUE(builder.Write(numbering, again).ok());
  auto seg = OpenOrDie(&again.bytes);
  ASSERT_NE(seg, nullptr);
  EXPECT_EQ(seg->info().first_file, 5u);
  EXPECT_EQ(seg->info().first_label, 7u);
  for (const auto& [path, label] : std::vector<std::pair<std::string, int32_t>>{
           {"a/c", 7}, {"a.b/c", 3}, {"train/n00000001/n00000001_1.JPEG", 8}, {"README", -1}}) {
    const auto position = seg->FindFile(path).value();
    ASSERT_TRUE(position.has_value()) << path;
    EXPECT_EQ(seg->FileLocation(*position).value().label, label) << path;
  }
  numbering.dir_labels = {7, 3, 9};  // no class 9: first_label 7 + 2 classes
  InMemorySegmentSink bad;
  EXPECT_EQ(builder.Write(numbering, bad).code(), StatusCode::kInvalidArgument);
}

TEST(SegmentBuilder, KeysOverTheLimitAreRefused) {
  // An attribute key is 8 bytes + the name: a name of 64 KiB would make a key readers refuse.
  SegmentBuilder builder(SortOptions{DefaultSpoolDir(), 1 << 20});
  const std::vector<Attribute> attributes = {{std::string(kMaxKeyBytes, 'k'), "v"}};
  ASSERT_TRUE(builder.Add({"a", 0, 0, 1, 0, -1, attributes}).ok());
  std::vector<ChunkInfo> chunks(1);
  chunks[0].entry_count = 1;
  chunks[0].file_size = kChunkHeaderSize + 1 + kChunkFooterSize + kChunkIndexEntrySize;
  const Status sealed = builder.Seal(chunks, Grouping::kFiles);
  ASSERT_EQ(sealed.code(), StatusCode::kInvalidArgument) << sealed.ToString();
  EXPECT_NE(sealed.message().find("at most 65536"), std::string::npos) << sealed.ToString();
}

TEST(SegmentBuilder, NamesADuplicateFoundWhileMergingRuns) {
  SegmentBuilder builder(SortOptions{DefaultSpoolDir(), 512});
  std::vector<ChunkInfo> chunks(1);
  for (int i = 0; i < 400; ++i) {
    const std::string path = fmt::format("d/{:04d}", i == 399 ? 17 : i);
    ASSERT_TRUE(builder.Add({path, 0, static_cast<uint64_t>(i), 0, 0, -1, {}}).ok());
  }
  chunks[0].entry_count = 400;
  chunks[0].file_size = kChunkHeaderSize + kChunkFooterSize + 400 * kChunkIndexEntrySize;
  EXPECT_EQ(builder.Seal(chunks, Grouping::kFiles).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(builder.duplicate_path(), "d/0017");
}

// Reads everything a segment holds; any failure is returned.
Status ReadEverything(const Segment& seg) {
  STOKER_RETURN_IF_ERROR(seg.LoadSamples());
  for (uint64_t p = 0; p < seg.info().file_count; ++p) {
    STOKER_ASSIGN_OR_RETURN(std::string path, seg.FilePath(p));
    STOKER_ASSIGN_OR_RETURN(auto found, seg.FindFile(path));
    if (found != p) return Status::Corruption("lookup disagrees");
    if (auto l = seg.FileLocation(p); !l) return l.error();
    if (auto a = seg.Attributes(p); !a) return a.error();
  }
  if (auto d = seg.ChildDirs(""); !d) return d.error();
  STOKER_RETURN_IF_ERROR(seg.ForEachLocation([](uint64_t, const SegmentLocation&) {}));
  for (uint64_t c = 0; c < seg.info().chunk_count; ++c) {
    if (auto l = seg.ChunkLocations(c); !l) return l.error();
  }
  return Status::OK();
}

// A chunk with a wide index (a file of 4 GiB or more) says so in its chunk record.
TEST(Segment, ChunkRecordsCarryTheIndexWidth) {
  SegmentSpec spec = SpecFor({"a/1", "a/2", "b/3", "b/4"}, 4);
  spec.chunks[1].wide_index = true;
  spec.chunks[1].file_size += 4 * spec.chunks[1].entry_count;
  const std::string bytes = BuildSegment(spec).value();
  auto seg = OpenOrDie(&bytes);
  ASSERT_NE(seg, nullptr);
  EXPECT_FALSE(seg->chunk(0).value().wide_index);
  EXPECT_TRUE(seg->chunk(1).value().wide_index);
  EXPECT_EQ(seg->chunk(1).value().entry_count, spec.chunks[1].entry_count);
  EXPECT_TRUE(ReadEverything(*seg).ok());
  spec.chunks[1].wide_index = false;  // then its size does not add up
  EXPECT_EQ(BuildSegment(spec).error().code(), StatusCode::kInvalidArgument);
}

// Every byte of a segment is checked: flipping any one of them either fails Open or fails a
// read with Corruption (or, for a varint's redundant bit, changes nothing the reader returns).
void ExpectEveryFlipCaught(const std::string& original) {
  auto clean = OpenOrDie(&original);
  ASSERT_TRUE(ReadEverything(*clean).ok());
  std::string bytes = original;
  for (size_t i = 0; i < bytes.size(); ++i) {
    bytes[i] = static_cast<char>(bytes[i] ^ 0x10);
    auto seg = Segment::Open(std::make_shared<StringFile>(&bytes), "flipped.seg");
    if (seg) {
      const Status st = ReadEverything(**seg);
      EXPECT_FALSE(st.ok()) << "flipped byte " << i << " of " << bytes.size() << " went unnoticed";
      if (!st.ok()) {
        EXPECT_TRUE(st.IsCorruption()) << st.ToString();
      }
    } else {
      EXPECT_TRUE(seg.error().IsCorruption() || seg.error().IsUnsupported())
          << seg.error().ToString();
    }
    bytes[i] = original[i];
  }
}

TEST(Segment, EveryFlippedByteIsCaught) {
  SegmentSpec spec = SpecFor({"x/1", "x/2", "y/3", "4", "y/z/5"}, 9);
  spec.flags |= kSegmentGrouped;
  ExpectEveryFlipCaught(BuildSegment(spec).value());
}

// ---- Merging (stoker compact)

// `parts` consecutive segments as `parts` appends would write them: every part holds every
// parts-th path, so their keys interleave; each adds three classes and three chunks.
std::vector<std::string> AppendedSegments(const std::vector<std::string>& paths, size_t parts,
                                          bool grouped) {
  std::vector<std::string> out;
  uint64_t first = 1000;
  for (size_t j = 0; j < parts; ++j) {
    std::vector<std::string> mine;
    for (size_t i = j; i < paths.size(); i += parts) mine.push_back(paths[i]);
    SegmentSpec spec = SpecFor(mine, 20 + j);
    if (grouped) spec.flags |= kSegmentGrouped;
    spec.first_file = spec.first_sample = first;
    spec.first_label = static_cast<uint32_t>(2 + 3 * j);
    spec.classes = {fmt::format("cat{}", j), fmt::format("dog{}", j), fmt::format("emu{}", j)};
    for (auto& chunk : spec.chunks) chunk.id += 0x100 * j;
    out.push_back(BuildSegment(spec).value());
    first += mine.size();  // ungrouped, or one file per sample: samples count as files
  }
  return out;
}

std::string MergeOrDie(const std::vector<const Segment*>& inputs) {
  InMemorySegmentSink sink;
  SortOptions sort;
  sort.memory_bytes = 4096;  // spill the key ranks' sort into several runs
  const Status merged = MergeSegments(inputs, sort, sink);
  EXPECT_TRUE(merged.ok()) << merged.ToString();
  return sink.bytes;
}

TEST(SegmentMerge, KeepsEveryFileIndexLocationLabelSampleAndAttribute) {
  const auto paths = TreePaths(1500);
  const auto inputs_bytes = AppendedSegments(paths, 3, false);
  std::vector<std::unique_ptr<Segment>> inputs;
  std::vector<const Segment*> views;
  for (const auto& b : inputs_bytes) {
    inputs.push_back(OpenOrDie(&b));
    views.push_back(inputs.back().get());
  }
  const std::string bytes = MergeOrDie(views);
  auto merged = OpenOrDie(&bytes);
  ASSERT_NE(merged, nullptr);
  const SegmentInfo& info = merged->info();
  EXPECT_TRUE(merged->positioned());
  EXPECT_EQ(info.flags & kSegmentDatasetFlags, kSegmentLabelled);
  EXPECT_EQ(info.first_file, 1000u);
  EXPECT_EQ(info.file_count, paths.size());
  EXPECT_EQ(info.first_label, 2u);
  EXPECT_EQ(info.class_count, 9u);
  EXPECT_EQ(merged->class_name(4), "dog1");
  EXPECT_EQ(info.chunk_count, 9u);
  ASSERT_TRUE(merged->CheckEveryBlock().ok());

  uint64_t shift = 0, chunk_shift = 0;
  for (const auto& in : inputs) {
    for (uint64_t p = 0; p < in->info().file_count; ++p) {
      const std::string path = in->FilePath(p).value();
      EXPECT_EQ(merged->FilePath(shift + p).value(), path);
      EXPECT_EQ(merged->FindFile(path).value(), shift + p) << path;
      const SegmentLocation a = in->FileLocation(p).value();
      const SegmentLocation b = merged->FileLocation(shift + p).value();
      EXPECT_EQ(b.position, shift + p);
      EXPECT_EQ(b.chunk, a.chunk + chunk_shift);
      EXPECT_EQ(merged->chunk(b.chunk).value().id, in->chunk(a.chunk).value().id);
      EXPECT_EQ(std::tie(b.offset, b.length, b.crc32c, b.label),
                std::tie(a.offset, a.length, a.crc32c, a.label));
      EXPECT_EQ(merged->Attributes(shift + p).value(), in->Attributes(p).value());
    }
    shift += in->info().file_count;
    chunk_shift += in->info().chunk_count;
  }

  // A directory lists the files of every input, in name order, each with its own index.
  const auto dir = merged->FindDir("train/n00000003").value();
  ASSERT_TRUE(dir.has_value());
  const auto files = merged->Files(dir->first_rank, dir->file_count).value();
  EXPECT_EQ(files.size(), std::count_if(paths.begin(), paths.end(), [](const std::string& p) {
              return p.starts_with("train/n00000003/");
            }));
  for (size_t k = 0; k < files.size(); ++k) {
    EXPECT_EQ(merged->FilePath(files[k].location.position).value(), files[k].path);
    if (k > 0) {
      EXPECT_LT(files[k - 1].path, files[k].path);
    }
  }

  // A merged segment merges again, with a segment that follows it.
  const auto more = AppendedSegments(paths, 3, false);  // same paths: must be refused
  auto next = OpenOrDie(&more[0]);
  InMemorySegmentSink sink;
  EXPECT_EQ(MergeSegments(std::vector<const Segment*>{merged.get(), next.get()}, {}, sink).code(),
            StatusCode::kInvalidArgument);  // its numbers do not follow the merged segment's
}

TEST(SegmentMerge, KeepsSamplesAndMergesAgain) {
  std::vector<std::string> paths;
  paths.reserve(700);
  for (int i = 0; i < 700; ++i) {
    paths.push_back(fmt::format("shard{}/{:06d}.jpg", i % 4, i));
  }
  // Three appends, then a fourth whose paths follow: merge the first three, then the merged
  // one with the fourth (a merged, positioned segment as an input).
  std::vector<std::string> all = paths;
  for (int i = 0; i < 100; ++i) all.push_back(fmt::format("shard0/{:06d}.jpg", 5000 + i));
  const auto bytes = AppendedSegments(all, 4, true);
  std::vector<std::unique_ptr<Segment>> in;
  in.reserve(bytes.size());
  for (const auto& b : bytes) in.push_back(OpenOrDie(&b));
  const std::string first3 = MergeOrDie({in[0].get(), in[1].get(), in[2].get()});
  auto m3 = OpenOrDie(&first3);
  ASSERT_NE(m3, nullptr);
  const std::string all4 = MergeOrDie({m3.get(), in[3].get()});
  auto m4 = OpenOrDie(&all4);
  ASSERT_NE(m4, nullptr);
  EXPECT_TRUE(m4->grouped());
  ASSERT_TRUE(m4->LoadSamples().ok());
  for (const auto& s : in) ASSERT_TRUE(s->LoadSamples().ok());
  EXPECT_EQ(m4->info().sample_count, all.size());
  uint64_t shift = 0;
  for (const auto& s : in) {
    for (uint64_t p = 0; p < s->info().file_count; ++p) {
      EXPECT_EQ(m4->FilePath(shift + p).value(), s->FilePath(p).value());
      EXPECT_EQ(m4->SampleFiles(shift + p).first, shift + s->SampleFiles(p).first);
    }
    shift += s->info().file_count;
  }
  ASSERT_TRUE(m4->CheckEveryBlock().ok());
  ExpectLocationsSayTheirSamples(*m3);
  ExpectLocationsSayTheirSamples(*m4);
}

// Grouped format-2 segments say no samples in their locations and chunk records; a merge
// writes them from the samples section (tests/data: a merged and a WebDataset segment written
// by 6cf04d5, before format 3).
TEST(SegmentMerge, WritesTheSamplesAFormat2InputDoesNotSay) {
  for (const char* name : {"format2_merged.seg", "format2_webdataset.seg"}) {
    const std::string old =
        test::ReadFileToString(std::string(STOKER_SOURCE_DIR) + "/fuzz/corpus/segment/" + name);
    auto in = OpenOrDie(&old);
    ASSERT_NE(in, nullptr) << name;
    EXPECT_EQ(in->format_version(), kFormatVersion2);
    ASSERT_TRUE(in->grouped());
    EXPECT_FALSE(in->says_samples());
    EXPECT_FALSE(in->chunk(0).value().sample_count.has_value());
    const std::string merged = MergeOrDie({in.get()});
    auto out = OpenOrDie(&merged);
    ASSERT_NE(out, nullptr);
    EXPECT_EQ(out->format_version(), kFormatVersion3);
    ASSERT_TRUE(out->CheckEveryBlock().ok());
    ExpectLocationsSayTheirSamples(*out);
    ASSERT_TRUE(in->LoadSamples().ok());
    for (uint64_t p = 0; p < in->info().file_count; ++p) {
      EXPECT_EQ(out->FilePath(p).value(), in->FilePath(p).value());
    }
  }
}

TEST(SegmentMerge, RefusesAPathHeldTwiceAndSegmentsOutOfOrder) {
  const auto paths = TreePaths(300);
  const auto bytes = AppendedSegments(paths, 2, false);
  auto a = OpenOrDie(&bytes[0]);
  auto b = OpenOrDie(&bytes[1]);
  InMemorySegmentSink sink;
  EXPECT_EQ(MergeSegments(std::vector<const Segment*>{b.get(), a.get()}, {}, sink).code(),
            StatusCode::kInvalidArgument);
  // The same paths twice, numbered as if consecutive.
  SegmentSpec spec = SpecFor(paths, 5);
  const std::string first = BuildSegment(spec).value();
  spec.first_file = spec.first_sample = 1000 + paths.size();
  spec.first_label = 5;
  for (auto& chunk : spec.chunks) chunk.id += 0x1000;
  const std::string second = BuildSegment(spec).value();
  auto x = OpenOrDie(&first);
  auto y = OpenOrDie(&second);
  const Status twice = MergeSegments(std::vector<const Segment*>{x.get(), y.get()}, {}, sink);
  EXPECT_TRUE(twice.IsCorruption()) << twice.ToString();
  EXPECT_NE(twice.ToString().find("is in two of the merged segments"), std::string::npos);
}

TEST(SegmentMerge, EveryFlippedByteOfAMergedSegmentIsCaught) {
  const auto bytes = AppendedSegments({"x/1", "x/2", "y/3", "4", "y/z/5", "x/0"}, 2, true);
  auto a = OpenOrDie(&bytes[0]);
  auto b = OpenOrDie(&bytes[1]);
  ExpectEveryFlipCaught(MergeOrDie({a.get(), b.get()}));
}

}  // namespace
}  // namespace stoker::format
