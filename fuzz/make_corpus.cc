// Writes the fuzz targets' seed corpus: real snapshots, manifests, chunks and tar shards made by
// stoker's own writers, so every fuzzer starts from inputs that pass its parser's checks and
// mutates inward from there. Deterministic: re-running it rewrites the same bytes.
//
//   build-fuzz/fuzz/make_corpus fuzz/corpus
//
// Regression seeds (inputs that once crashed a target) live beside these under other names and
// are not touched.
#include <archive.h>
#include <archive_entry.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/random.h"
#include "format/chunk.h"
#include "format/manifest.h"
#include "format/segment_builder.h"
#include "format/segment_layout.h"
#include "format/segment_merge.h"
#include "format/snapshot_builder.h"
#include "format/version_record.h"
#include "storage/memory_storage.h"

namespace {

using namespace stoker;
namespace fs = std::filesystem;

fs::path g_root;

void Write(const std::string& target, const std::string& name, const std::string& bytes) {
  const fs::path dir = g_root / target;
  fs::create_directories(dir);
  std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "make_corpus: cannot write %s\n", (dir / name).c_str());
    std::exit(1);
  }
}

template <typename T>
T Check(Result<T> r, const char* what) {
  if (!r) {
    std::fprintf(stderr, "make_corpus: %s: %s\n", what, r.error().ToString().c_str());
    std::exit(1);
  }
  return std::move(*r);
}

std::string Payload(Pcg32& rng, size_t n) {
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>('a' + rng.Below(26));
  return s;
}

struct File {
  std::string path;
  std::string bytes;
  int32_t label = format::kNoLabel;
  std::vector<std::pair<std::string, std::string>> attributes;
};

// Packs `files` into real chunks (no more than `per_chunk` files each) and builds the snapshot
// over them; the chunks are returned too, as chunk seeds.
std::string MakeSnapshot(const std::vector<File>& files, size_t per_chunk, format::LabelMode labels,
                         bool grouped, std::vector<std::string>* chunks_out) {
  storage::MemoryStorage storage;
  if (!storage.CreateDirs("chunks").ok()) std::exit(1);
  format::SnapshotSpec spec;
  spec.dataset_version = 7;
  spec.created_unix_seconds = 1700000000;
  spec.labels = labels;
  spec.group_by_key = grouped;
  std::unique_ptr<format::ChunkWriter> writer;
  auto finish = [&] {
    spec.chunks.push_back(Check(writer->Finish(), "finish chunk"));
    if (chunks_out) {
      chunks_out->push_back(Check(storage.GetContents(format::ChunkPath(writer->id())), "read"));
    }
    writer.reset();
  };
  for (size_t i = 0; i < files.size(); ++i) {
    if (writer && writer->entry_count() == per_chunk) finish();
    if (!writer)
      writer = Check(format::ChunkWriter::Create(storage, 100 + spec.chunks.size()), "chunk");
    const auto& f = files[i];
    const auto ref = Check(
        writer->Add({reinterpret_cast<const std::byte*>(f.bytes.data()), f.bytes.size()}), "add");
    format::SnapshotEntry e;
    e.path = f.path;
    e.chunk = static_cast<uint32_t>(spec.chunks.size());
    e.offset = ref.offset;
    e.length = ref.length;
    e.crc32c = ref.crc32c;
    e.label = f.label;
    e.attributes = f.attributes;
    spec.entries.push_back(std::move(e));
  }
  if (writer) finish();
  return Check(format::BuildSnapshot(std::move(spec)), "build snapshot");
}

void Snapshots() {
  Pcg32 rng(42);
  std::vector<std::string> chunks;
  int chunk_seeds = 0;
  auto keep_chunks = [&] {
    for (const auto& c : chunks) Write("chunk", fmt::format("chunk_{:02}.chunk", chunk_seeds++), c);
    chunks.clear();
  };

  Write("snapshot", "empty.snap", MakeSnapshot({}, 1, format::LabelMode::kNone, false, nullptr));
  Write("snapshot", "one_file.snap",
        MakeSnapshot({{"hello.txt", "hello\n"}}, 1, format::LabelMode::kNone, false, &chunks));
  keep_chunks();

  // ImageFolder: labels from the first directory level, nested directories below it.
  std::vector<File> tree;
  for (const char* cls : {"cat", "dog", "fish"}) {
    for (int i = 0; i < 4; ++i) {
      tree.push_back({fmt::format("{}/img_{}.jpg", cls, i), Payload(rng, 1 + rng.Below(40))});
    }
    tree.push_back({fmt::format("{}/extra/deeper/x.jpg", cls), Payload(rng, 7)});
  }
  Write("snapshot", "tree_labelled.snap",
        MakeSnapshot(tree, 5, format::LabelMode::kFirstDirectory, false, &chunks));
  keep_chunks();

  // Unlabelled files at the root beside directories, with user attributes and empty files.
  std::vector<File> mixed = {
      {"README", "read me", format::kNoLabel, {{"owner", "alice"}, {"license", "cc-by"}}},
      {"a/b/c/d/e.bin", "", format::kNoLabel, {{"owner", "bob"}}},
      {"a/b/f.bin", Payload(rng, 33)},
      {"a/g.bin", "", format::kNoLabel, {{"empty", ""}, {"owner", "alice"}}},
      {"z.bin", Payload(rng, 3)},
  };
  Write("snapshot", "attributes.snap",
        MakeSnapshot(mixed, 2, format::LabelMode::kFirstDirectory, false, &chunks));
  keep_chunks();

  // WebDataset: samples grouped by key, labels from .cls members.
  std::vector<File> shards;
  for (int s = 0; s < 2; ++s) {
    for (int k = 0; k < 3; ++k) {
      const std::string key = fmt::format("shard{}/{:06}", s, k);
      shards.push_back({key + ".jpg", Payload(rng, 20), format::kNoLabel});
      shards.push_back({key + ".cls", std::to_string(k + s), static_cast<int32_t>(k + s)});
      if (k != 1) shards.push_back({key + ".json", "{}", format::kNoLabel, {{"split", "train"}}});
    }
  }
  Write("snapshot", "webdataset.snap",
        MakeSnapshot(shards, 4, format::LabelMode::kExplicit, true, &chunks));
  keep_chunks();

  // Enough entries that the hash tables have collisions and longer probe chains.
  std::vector<File> many;
  for (int i = 0; i < 60; ++i) {
    many.push_back({fmt::format("d{}/e{}/f{:03}", i % 5, i % 3, i), Payload(rng, rng.Below(4))});
  }
  Write("snapshot", "many.snap", MakeSnapshot(many, 64, format::LabelMode::kNone, false, &chunks));
  keep_chunks();

  // A chunk with no entries at all.
  storage::MemoryStorage storage;
  if (!storage.CreateDirs("chunks").ok()) std::exit(1);
  auto writer = Check(format::ChunkWriter::Create(storage, 0), "chunk");
  Check(writer->Finish(), "finish");
  Write("chunk", "empty.chunk", Check(storage.GetContents(format::ChunkPath(0)), "read"));
}

void Manifests() {
  const format::Manifest manifests[] = {
      {1, "snapshots/0000000000000001.snap", 4096, 0xdeadbeef},
      {0, "snapshots/a", 0, 0},
      {18446744073709551615ull, "snapshots/ffffffffffffffff-0123abcd.snap", 18446744073709551615ull,
       0xffffffff},
      {42, "snapshots/" + std::string(190, 'x'), 272, 0x00000001},
  };
  int n = 0;
  for (const auto& m : manifests) {
    Write("manifest", fmt::format("manifest_{}", n++), format::EncodeManifest(m));
  }
}

// Segments (format 3): files spread over two chunks, with labels, samples and attributes.
std::string MakeSegment(const std::vector<std::string>& paths, uint32_t flags,
                        uint64_t first_file = 7, uint32_t first_label = 1) {
  format::SegmentSpec spec;
  spec.flags = flags;
  spec.first_file = spec.first_sample = first_file;
  spec.first_label = first_label;
  spec.classes = {"a", "b"};
  spec.chunks.resize(2);
  uint64_t offset[2] = {format::kChunkHeaderSize, format::kChunkHeaderSize};
  for (size_t i = 0; i < paths.size(); ++i) {
    format::SegmentFile f;
    f.path = paths[i];
    f.chunk = static_cast<uint32_t>(i % 2);
    f.length = i % 5;
    f.offset = offset[f.chunk];
    f.label = static_cast<int32_t>(i % 4) - 1;
    if (i % 4 == 0) f.attributes = {{"k", "v"}};
    offset[f.chunk] += f.length;
    ++spec.chunks[f.chunk].entry_count;
    spec.files.push_back(std::move(f));
  }
  for (uint32_t c = 0; c < 2; ++c) {
    spec.chunks[c].id = 0x100 + c + first_file;
    spec.chunks[c].file_size = offset[c] + format::kChunkFooterSize +
                               format::kChunkIndexEntrySize * spec.chunks[c].entry_count;
  }
  return Check(format::BuildSegment(std::move(spec)), "segment");
}

void SegmentsAndVersions() {
  Write("segment", "empty.seg", MakeSegment({}, 0));
  Write("segment", "tree.seg",
        MakeSegment({"README", "a/x.jpg", "a/y.jpg", "b/c/z.jpg", "a.b/q"},
                    format::kSegmentLabelled | format::kSegmentLabelsFromDirs));
  Write("segment", "webdataset.seg",
        MakeSegment({"s/000001.jpg", "s/000001.cls", "s/000002.jpg", "s/000002.json"},
                    format::kSegmentGrouped | format::kSegmentLabelled));
  std::vector<std::string> many;
  for (int i = 0; i < 300; ++i) many.push_back(fmt::format("d{}/f{:04}", i % 7, i));
  Write("segment", "two_blocks.seg", MakeSegment(many, format::kSegmentLabelled));
  {
    // A merged (positioned) segment, as `stoker compact` writes: two appends' keys interleave.
    std::vector<std::string> second;
    for (int i = 0; i < 40; ++i) second.push_back(fmt::format("d{}/g{:04}", i % 7, i));
    const uint32_t flags = format::kSegmentGrouped | format::kSegmentLabelled;
    const std::string a = MakeSegment(many, flags), b = MakeSegment(second, flags, 7 + 300, 3);
    storage::MemoryStorage store;
    auto open = [&store](std::string_view name, const std::string& bytes) {
      Check(store.CreateExclusive(name,
                                  {reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()})
                    .ok()
                ? Result<bool>(true)
                : Err(Status::IOError(std::string(name))),
            "store");
      auto file = Check(store.OpenRead(name), "open");
      return Check(format::Segment::Open(std::move(file), std::string(name)), "merge input");
    };
    auto x = open("a.seg", a);
    auto y = open("b.seg", b);
    format::InMemorySegmentSink sink;
    const Status merged =
        format::MergeSegments(std::vector<const format::Segment*>{x.get(), y.get()}, {}, sink);
    Check(merged.ok() ? Result<bool>(true) : Err(merged), "merged segment");
    Write("segment", "merged.seg", sink.bytes);
  }

  format::VersionRecord r;
  r.version = 3;
  r.parent = 2;
  r.created_unix_seconds = 1795000000;
  r.writer = 0x0123456789abcdef;
  r.flags = 3;
  r.segments = {{0xa, 4096, 0xdeadbeef, 10, 10, 2, 1}, {0xb, 100, 0x1, 5, 5, 0, 1}};
  r.files = r.samples = 15;
  r.classes = 2;
  r.chunks = 2;
  r.bytes = 99;
  Write("version_record", "two_segments", format::EncodeVersionRecord(r));
  r.segments.clear();
  r.files = r.samples = r.classes = r.chunks = r.bytes = 0;
  r.parent = 0;
  Write("version_record", "empty", format::EncodeVersionRecord(r));
}

// A tar archive made by libarchive itself. `filter` is an ARCHIVE_FILTER_* code.
struct Member {
  std::string name;
  std::string bytes;
  mode_t type = AE_IFREG;
  std::string link;  // symlink target or hard link
};

std::string MakeTar(const std::vector<Member>& members, int format, int filter) {
  std::vector<char> buffer(1 << 20);
  size_t used = 0;
  archive* a = archive_write_new();
  archive_write_set_format(a, format);
  archive_write_add_filter(a, filter);
  if (filter == ARCHIVE_FILTER_GZIP) {
    archive_write_set_filter_option(a, "gzip", "timestamp", nullptr);  // no mtime: reproducible
  }
  archive_write_set_bytes_in_last_block(a, 1);  // no padding to 10 KiB: keeps seeds small
  if (archive_write_open_memory(a, buffer.data(), buffer.size(), &used) != ARCHIVE_OK) {
    std::fprintf(stderr, "make_corpus: %s\n", archive_error_string(a));
    std::exit(1);
  }
  for (const auto& m : members) {
    archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, m.name.c_str());
    archive_entry_set_filetype(e, m.type);
    archive_entry_set_perm(e, m.type == AE_IFDIR ? 0755 : 0644);
    archive_entry_set_mtime(e, 1700000000, 0);
    if (m.type == AE_IFLNK) archive_entry_set_symlink(e, m.link.c_str());
    if (m.type == AE_IFREG && !m.link.empty()) archive_entry_set_hardlink(e, m.link.c_str());
    archive_entry_set_size(e, m.type == AE_IFREG && m.link.empty() ? m.bytes.size() : 0);
    archive_write_header(a, e);
    if (m.type == AE_IFREG && m.link.empty()) archive_write_data(a, m.bytes.data(), m.bytes.size());
    archive_entry_free(e);
  }
  archive_write_close(a);
  archive_write_free(a);
  return std::string(buffer.data(), used);
}

void Tars() {
  Pcg32 rng(7);
  std::vector<Member> wds;
  for (int k = 0; k < 4; ++k) {
    const std::string key = fmt::format("{:06}", k);
    wds.push_back({key + ".jpg", Payload(rng, 30 + rng.Below(200))});
    wds.push_back({key + ".cls", fmt::format("{}\n", k % 2)});
    if (k % 2 == 0) wds.push_back({key + ".json", R"({"w": 3})"});
  }
  Write("tar", "webdataset.tar", MakeTar(wds, ARCHIVE_FORMAT_TAR_USTAR, ARCHIVE_FILTER_NONE));
  Write("tar", "webdataset.tar.gz", MakeTar(wds, ARCHIVE_FORMAT_TAR_USTAR, ARCHIVE_FILTER_GZIP));
  Write("tar", "webdataset.tar.zst", MakeTar(wds, ARCHIVE_FORMAT_TAR_USTAR, ARCHIVE_FILTER_ZSTD));

  // Directories, "./" prefixes and names longer than ustar's 100 bytes (pax and GNU headers).
  const std::string long_dir = std::string(120, 'd');
  std::vector<Member> tree = {
      {"./", "", AE_IFDIR},
      {"./train/", "", AE_IFDIR},
      {"./train/a.cls", "3"},
      {"./train/a.png", Payload(rng, 64)},
      {"./" + long_dir + "/b.txt", "long"},
      {"./" + long_dir + "/b.cls", "0"},
  };
  Write("tar", "tree_pax.tar",
        MakeTar(tree, ARCHIVE_FORMAT_TAR_PAX_RESTRICTED, ARCHIVE_FILTER_NONE));
  Write("tar", "tree_gnu.tar", MakeTar(tree, ARCHIVE_FORMAT_TAR_GNUTAR, ARCHIVE_FILTER_NONE));

  // Members the packer must refuse: links, devices, escaping names, duplicates.
  Write("tar", "symlink.tar",
        MakeTar({{"x.jpg", "x"}, {"y.jpg", "", AE_IFLNK, "x.jpg"}}, ARCHIVE_FORMAT_TAR_USTAR,
                ARCHIVE_FILTER_NONE));
  Write("tar", "hardlink.tar",
        MakeTar({{"x.jpg", "x"}, {"y.jpg", "", AE_IFREG, "x.jpg"}}, ARCHIVE_FORMAT_TAR_USTAR,
                ARCHIVE_FILTER_NONE));
  Write("tar", "fifo.tar",
        MakeTar({{"p", "", AE_IFIFO}}, ARCHIVE_FORMAT_TAR_USTAR, ARCHIVE_FILTER_NONE));
  Write("tar", "dotdot.tar",
        MakeTar({{"a/../../etc/passwd", "root"}}, ARCHIVE_FORMAT_TAR_USTAR, ARCHIVE_FILTER_NONE));
  Write("tar", "absolute.tar",
        MakeTar({{"/etc/passwd", "root"}}, ARCHIVE_FORMAT_TAR_PAX_RESTRICTED, ARCHIVE_FILTER_NONE));
  Write("tar", "duplicate.tar",
        MakeTar({{"a.txt", "1"}, {"a.txt", "2"}}, ARCHIVE_FORMAT_TAR_USTAR, ARCHIVE_FILTER_NONE));
  Write("tar", "file_and_dir.tar",
        MakeTar({{"a", "1"}, {"a/b", "2"}}, ARCHIVE_FORMAT_TAR_USTAR, ARCHIVE_FILTER_NONE));
  Write("tar", "empty.tar", MakeTar({}, ARCHIVE_FORMAT_TAR_USTAR, ARCHIVE_FILTER_NONE));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_corpus CORPUS_DIR\n");
    return 2;
  }
  g_root = argv[1];
  Snapshots();
  Manifests();
  SegmentsAndVersions();
  Tars();
  return 0;
}
