// Damage between pack and read: faults injected on chunk reads, and bytes flipped, zeroed,
// truncated or deleted in stored files. Every case ends in an error that names the file (or in
// a Verify report naming it) — never a crash, never wrong bytes handed back as data.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "common/coding.h"
#include "common/crc32c.h"
#include "common/random.h"
#include "dataset/format1.h"
#include "dataset/packer.h"
#include "dataset/verify.h"
#include "dataset/version_view.h"
#include "format/chunk.h"
#include "format/version_record.h"
#include "stoker/dataset.h"
#include "storage/fault_storage.h"
#include "storage/forwarding_storage.h"
#include "storage/memory_storage.h"
#include "testing/test_util.h"

namespace stoker {
namespace {

using test::AsString;

bool Contains(const std::string& haystack, std::string_view needle) {
  return haystack.find(needle) != std::string::npos;
}

class CorruptionTest : public ::testing::Test {
 protected:
  // A random ImageFolder tree packed into memory with small chunks (several files per chunk).
  void Pack(uint64_t seed, uint64_t chunk_bytes) {
    tree_ = test::RandomTree(
        seed,
        {.files = 80, .dirs = 8, .max_file_bytes = 30000, .image_folder = true, .classes = 4});
    dataset::PackOptions options;
    options.chunk_bytes = chunk_bytes;
    auto source = test::TreeSource(tree_);
    auto summary = dataset::Pack(*source, *store_, options);
    ASSERT_TRUE(summary.has_value()) << summary.error().ToString();
    auto ds = Dataset::Open(store_);
    ASSERT_TRUE(ds.has_value());
    for (uint32_t f = 0; f < (*ds)->file_count(); ++f) info_.push_back((*ds)->Stat(f).value());
    segment_path_ = format::SegmentPath(dataset::ViewOf(**ds).record().segments.at(0).id);
  }

  // Reads every file through a freshly opened dataset; each read must be exact or an error.
  // Returns the paths whose read failed.
  std::set<std::string> ReadAll(std::shared_ptr<Storage> storage, int rounds = 1) {
    std::set<std::string> failed;
    auto ds = Dataset::Open(std::move(storage));
    EXPECT_TRUE(ds.has_value()) << ds.error().ToString();
    if (!ds) return failed;
    for (int round = 0; round < rounds; ++round) {
      for (uint32_t f = 0; f < (*ds)->file_count(); ++f) {
        const std::string path = (*ds)->FilePath(f);
        auto bytes = (*ds)->ReadFile(f);
        if (bytes) {
          EXPECT_TRUE(AsString(*bytes) == tree_.files.at(path)) << "WRONG BYTES for " << path;
        } else {
          EXPECT_TRUE(Contains(bytes.error().message(), path)) << bytes.error().ToString();
          last_errors_.push_back(bytes.error());
          failed.insert(path);
        }
      }
    }
    return failed;
  }

  std::string Get(std::string_view path) { return store_->GetContents(path).value(); }
  void Set(std::string_view path, std::string bytes) {
    store_->SetContents(path, std::move(bytes));
  }
  dataset::VerifyReport VerifyNow() {
    auto report = dataset::Verify(*store_);
    EXPECT_TRUE(report.has_value()) << report.error().ToString();
    return std::move(*report);
  }
  // Files whose bytes overlap [begin, end) of chunk `chunk_id` (empty files never do).
  std::set<std::string> FilesIn(uint64_t chunk_id, uint64_t begin, uint64_t end) {
    std::set<std::string> out;
    for (const auto& i : info_) {
      if (i.chunk_id == chunk_id && i.size > 0 && i.offset < end && i.offset + i.size > begin) {
        out.insert(i.path);
      }
    }
    return out;
  }
  static std::set<std::string> PathsOf(const std::vector<dataset::Finding>& findings) {
    std::set<std::string> out;
    for (const auto& f : findings) out.insert(f.path);
    return out;
  }

  std::shared_ptr<storage::MemoryStorage> store_ = std::make_shared<storage::MemoryStorage>();
  test::Tree tree_;
  std::vector<FileInfo> info_;
  std::string segment_path_;
  const std::string record_path_ = format::VersionRecordPath(1);
  std::vector<Status> last_errors_;
};

// A chunk the store will not let us read is a permission problem, not corruption: verify fails
// with PermissionDenied naming it (the CLI's exit 1), and reports nothing corrupt.
TEST_F(CorruptionTest, AnUnreadableChunkIsPermissionDeniedNotCorruption) {
  Pack(30, 16 << 10);
  class Denying final : public storage::ForwardingStorage {
   public:
    using ForwardingStorage::ForwardingStorage;
    Result<std::unique_ptr<RandomAccessFile>> OpenRead(std::string_view path) override {
      if (path.starts_with("chunks/")) {
        return Err(Status::FromErrno(EACCES, std::string(path)));
      }
      return ForwardingStorage::OpenRead(path);
    }
  };
  Denying denying(store_);
  auto report = dataset::Verify(denying);
  ASSERT_FALSE(report.has_value());
  EXPECT_EQ(report.error().code(), StatusCode::kPermissionDenied) << report.error().ToString();
  EXPECT_TRUE(Contains(report.error().message(), "chunks/")) << report.error().ToString();
}

TEST_F(CorruptionTest, CleanDatasetVerifies) {
  Pack(1, 16 << 10);
  const auto report = VerifyNow();
  EXPECT_TRUE(report.ok());
  EXPECT_EQ(report.version, 1u);
  EXPECT_EQ(report.files_checked, tree_.files.size());
  EXPECT_GT(report.chunks_checked, 3u);
  EXPECT_TRUE(ReadAll(store_).empty());
}

// ---- injected faults on the read path ----

TEST_F(CorruptionTest, BitFlipsOnChunkReadsBecomeCorruptionNamingTheFile) {
  Pack(2, 16 << 10);
  storage::FaultOptions options;
  options.path_filter = "chunks/";
  options.bit_flip_probability = 0.3;
  options.seed = 42;
  auto faulty = std::make_shared<storage::FaultStorage>(store_, options);
  const auto failed = ReadAll(faulty, 5);
  EXPECT_GT(faulty->counters().bit_flips, 50u);
  EXPECT_FALSE(failed.empty());
  for (const auto& s : last_errors_) EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
  EXPECT_EQ(last_errors_.size(), faulty->counters().bit_flips);  // every flip caught
}

TEST_F(CorruptionTest, ReadErrorsAndShortReadsAreErrorsNeverWrongBytes) {
  Pack(3, 16 << 10);
  storage::FaultOptions options;
  options.path_filter = "chunks/";
  options.read_error_probability = 0.2;
  options.short_read_probability = 0.2;
  options.bit_flip_probability = 0.2;
  options.seed = 7;
  auto faulty = std::make_shared<storage::FaultStorage>(store_, options);
  ReadAll(faulty, 5);
  const auto c = faulty->counters();
  EXPECT_GT(c.read_errors, 20u);
  EXPECT_GT(c.short_reads, 20u);
  EXPECT_GT(c.bit_flips, 20u);
  EXPECT_EQ(last_errors_.size(), c.read_errors + c.short_reads + c.bit_flips);
  for (const auto& s : last_errors_) {
    EXPECT_TRUE(s.IsCorruption() || s.IsIOError()) << s.ToString();
  }
}

TEST_F(CorruptionTest, FaultsOnMetadataReadsFailOpenCleanly) {
  Pack(4, 16 << 10);
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    storage::FaultOptions options;
    options.path_filter = "segments/";
    options.bit_flip_probability = 0.5;
    options.read_error_probability = 0.3;
    options.seed = seed;
    auto faulty = std::make_shared<storage::FaultStorage>(store_, options);
    auto ds = Dataset::Open(faulty);
    const auto c = faulty->counters();
    if (c.bit_flips + c.read_errors == 0) {
      ASSERT_TRUE(ds.has_value());
    } else {
      ASSERT_FALSE(ds.has_value()) << seed;
      EXPECT_TRUE(ds.error().code() ==
                  (c.read_errors ? StatusCode::kIOError : StatusCode::kCorruption))
          << ds.error().ToString();
    }
  }
}

// ---- damaged chunk files ----

TEST_F(CorruptionTest, FlippedByteIsReportedForExactlyTheAffectedFile) {
  Pack(5, 16 << 10);
  // A non-empty file in the middle of the dataset.
  const FileInfo victim = info_[info_.size() / 2].size > 0 ? info_[info_.size() / 2] : info_[1];
  ASSERT_GT(victim.size, 0u);
  const std::string chunk = format::ChunkPath(victim.chunk_id);
  std::string bytes = Get(chunk);
  bytes[victim.offset + victim.size / 2] ^= 0x04;
  Set(chunk, bytes);

  const auto report = VerifyNow();
  EXPECT_FALSE(report.ok());
  EXPECT_TRUE(report.problems.empty());
  ASSERT_EQ(report.corrupt_files.size(), 1u);
  EXPECT_EQ(report.corrupt_files[0].path, victim.path) << report.corrupt_files[0].ToString();
  ASSERT_EQ(report.corrupt_chunks.size(), 1u);
  EXPECT_TRUE(Contains(report.corrupt_chunks[0].path, chunk))
      << report.corrupt_chunks[0].ToString();

  EXPECT_EQ(ReadAll(store_), std::set<std::string>{victim.path});
  ASSERT_EQ(last_errors_.size(), 1u);
  EXPECT_TRUE(last_errors_[0].IsCorruption());
  EXPECT_TRUE(Contains(last_errors_[0].message(), chunk));
}

TEST_F(CorruptionTest, EveryDamagedByteIsCaughtByVerifyAndNeverReadAsData) {
  Pack(6, 8192);
  std::vector<std::string> chunks;
  const auto names = store_->List("chunks").value();
  chunks.reserve(names.size());
  for (const auto& name : names) chunks.push_back("chunks/" + name);
  Pcg32 rng(99);
  for (int trial = 0; trial < 400; ++trial) {
    const std::string& chunk = chunks[rng.Below(chunks.size())];
    const std::string good = Get(chunk);
    std::string bad = good;
    const uint64_t at = rng.Below(bad.size());
    bad[at] = static_cast<char>(bad[at] ^ (1 + rng.Below(255)));
    Set(chunk, bad);
    EXPECT_FALSE(VerifyNow().ok()) << chunk << " byte " << at;  // header, data, index or footer
    ReadAll(store_);                                            // exact or error, file by file
    Set(chunk, good);
  }
  EXPECT_TRUE(VerifyNow().ok());
}

TEST_F(CorruptionTest, ZeroedPageInAChunk) {
  Pack(7, 64 << 10);
  // The largest chunk, with a 4 KiB page of zeros in the middle of its data.
  uint64_t chunk_id = 0, biggest = 0;
  for (const auto& i : info_) {
    const uint64_t end = i.offset + i.size;
    if (end > biggest) biggest = end, chunk_id = i.chunk_id;
  }
  ASSERT_GT(biggest, 3 * 4096u);
  const std::string chunk = format::ChunkPath(chunk_id);
  std::string bytes = Get(chunk);
  std::fill(bytes.begin() + 4096, bytes.begin() + 8192, '\0');
  Set(chunk, bytes);
  const auto affected = FilesIn(chunk_id, 4096, 8192);
  ASSERT_FALSE(affected.empty());

  const auto report = VerifyNow();
  EXPECT_EQ(PathsOf(report.corrupt_files), affected);
  ASSERT_EQ(report.corrupt_chunks.size(), 1u);
  EXPECT_TRUE(Contains(report.corrupt_chunks[0].path, chunk));
  EXPECT_EQ(ReadAll(store_), affected);
  for (const auto& s : last_errors_) EXPECT_TRUE(s.IsCorruption()) << s.ToString();
}

TEST_F(CorruptionTest, TruncatedChunk) {
  Pack(8, 16 << 10);
  const uint64_t chunk_id = info_.back().chunk_id;
  const std::string chunk = format::ChunkPath(chunk_id);
  const std::string bytes = Get(chunk);
  Set(chunk, bytes.substr(0, bytes.size() / 2));
  std::set<std::string> in_chunk;  // empty files too: the whole chunk is suspect
  for (const auto& i : info_) {
    if (i.chunk_id == chunk_id) in_chunk.insert(i.path);
  }

  const auto report = VerifyNow();
  EXPECT_FALSE(report.ok());
  ASSERT_EQ(report.corrupt_chunks.size(), 1u);
  EXPECT_TRUE(Contains(report.corrupt_chunks[0].path, chunk));
  // verify names every file that readers refuse (all of the chunk's, intact bytes or not).
  std::set<std::string> named;
  for (const auto& finding : report.corrupt_files) named.insert(finding.path);
  EXPECT_EQ(named, in_chunk);
  // Every file in the damaged chunk fails; files in other chunks still read.
  EXPECT_EQ(ReadAll(store_), in_chunk);
  for (const auto& s : last_errors_) {
    EXPECT_TRUE(s.IsCorruption()) << s.ToString();
    EXPECT_TRUE(Contains(s.message(), chunk)) << s.ToString();
  }
}

TEST_F(CorruptionTest, DeletedChunk) {
  Pack(9, 16 << 10);
  const uint64_t chunk_id = info_.front().chunk_id;
  const std::string chunk = format::ChunkPath(chunk_id);
  ASSERT_TRUE(store_->Remove(chunk).ok());
  const auto report = VerifyNow();
  ASSERT_EQ(report.corrupt_chunks.size(), 1u);
  EXPECT_TRUE(Contains(report.corrupt_chunks[0].path, chunk));
  std::set<std::string> in_chunk;
  for (const auto& i : info_) {
    if (i.chunk_id == chunk_id) in_chunk.insert(i.path);
  }
  EXPECT_EQ(PathsOf(report.corrupt_files), in_chunk);
  EXPECT_EQ(ReadAll(store_), in_chunk);
  for (const auto& s : last_errors_) EXPECT_TRUE(s.IsNotFound()) << s.ToString();
}

// ---- damaged metadata ----

// Opening either fails with Corruption naming the segment, or gives a dataset whose every
// lookup is right or fails with Corruption (a block not read at open); never wrong answers.
void ExpectNoWrongAnswers(const std::shared_ptr<Storage>& store, const test::Tree& tree,
                          const std::string& segment) {
  auto ds = Dataset::Open(store);
  if (!ds) {
    EXPECT_TRUE(ds.error().IsCorruption()) << ds.error().ToString();
    EXPECT_TRUE(Contains(ds.error().message(), segment)) << ds.error().ToString();
    return;
  }
  for (const auto& [path, bytes] : tree.files) {
    auto index = (*ds)->Find(path);
    if (!index) {
      EXPECT_TRUE(index.error().IsCorruption()) << index.error().ToString();
      continue;
    }
    auto info = (*ds)->Stat(*index);
    if (!info) {
      EXPECT_TRUE(info.error().IsCorruption()) << info.error().ToString();
      continue;
    }
    EXPECT_EQ(info->path, path);
    auto read = (*ds)->ReadFile(*index);
    ASSERT_TRUE(read.has_value()) << read.error().ToString();
    EXPECT_TRUE(AsString(*read) == bytes) << "WRONG BYTES for " << path;
  }
}

TEST_F(CorruptionTest, ZeroedBlocksInTheSegment) {
  Pack(10, 16 << 10);
  const std::string bytes = Get(segment_path_);
  ASSERT_GT(bytes.size(), 1024u);
  // Every 256-byte window, and the last one (where the trailer is).
  std::vector<size_t> windows;
  for (size_t at = 0; at + 256 <= bytes.size(); at += 256) windows.push_back(at);
  windows.push_back(bytes.size() - 256);
  for (size_t at : windows) {
    std::string bad = bytes;
    std::fill(bad.begin() + at, bad.begin() + at + 256, '\0');
    Set(segment_path_, bad);
    ExpectNoWrongAnswers(store_, tree_, segment_path_);
    const auto report = VerifyNow();
    ASSERT_EQ(report.problems.size(), 1u) << at;
    EXPECT_TRUE(Contains(report.problems[0], segment_path_)) << report.problems[0];
  }
}

TEST_F(CorruptionTest, TruncatedExtendedOrMissingSegment) {
  Pack(11, 16 << 10);
  const std::string bytes = Get(segment_path_);
  for (size_t keep : {size_t{0}, size_t{100}, bytes.size() / 2, bytes.size() - 1}) {
    Set(segment_path_, bytes.substr(0, keep));
    auto ds = Dataset::Open(store_);
    ASSERT_FALSE(ds.has_value());
    EXPECT_TRUE(ds.error().IsCorruption()) << ds.error().ToString();
    EXPECT_FALSE(VerifyNow().problems.empty());
  }
  Set(segment_path_, bytes + "x");
  EXPECT_TRUE(Dataset::Open(store_).error().IsCorruption());
  ASSERT_TRUE(store_->Remove(segment_path_).ok());
  auto ds = Dataset::Open(store_);
  ASSERT_FALSE(ds.has_value());
  EXPECT_TRUE(ds.error().IsCorruption()) << ds.error().ToString();
  EXPECT_TRUE(Contains(ds.error().message(), "missing")) << ds.error().ToString();
}

TEST_F(CorruptionTest, SegmentSwappedForAnotherValidOne) {
  Pack(12, 16 << 10);
  // The same tree packed again: a valid segment of the same size (chunk ids differ).
  auto other = std::make_shared<storage::MemoryStorage>();
  auto source = test::TreeSource(tree_);
  dataset::PackOptions options;
  options.chunk_bytes = 16 << 10;
  ASSERT_TRUE(dataset::Pack(*source, *other, options).has_value());
  const auto other_segment =
      format::SegmentPath(dataset::ViewOf(**Dataset::Open(other)).record().segments.at(0).id);
  const std::string swapped = other->GetContents(other_segment).value();
  ASSERT_EQ(swapped.size(), Get(segment_path_).size());
  Set(segment_path_, swapped);
  auto ds = Dataset::Open(store_);
  ASSERT_FALSE(ds.has_value());
  EXPECT_TRUE(Contains(ds.error().message(), "not the one version 1 lists"))
      << ds.error().ToString();
}

TEST_F(CorruptionTest, CorruptedVersionRecord) {
  Pack(13, 16 << 10);
  const std::string good = Get(record_path_);
  std::vector<std::string> variants = {"",
                                       "garbage",
                                       good.substr(0, good.size() / 2),
                                       good.substr(0, good.size() - 1),
                                       good + "\n",
                                       std::string(5000, 'x')};
  for (size_t i = 0; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] ^= 0x01;
    variants.push_back(bad);
  }
  for (const auto& bad : variants) {
    Set(record_path_, bad);
    auto ds = Dataset::Open(store_);
    ASSERT_FALSE(ds.has_value()) << bad;
    EXPECT_TRUE(ds.error().IsCorruption() || ds.error().IsUnsupported()) << ds.error().ToString();
    const auto report = VerifyNow();
    EXPECT_FALSE(report.ok()) << bad;
  }
  Set(record_path_, good);
  EXPECT_TRUE(Dataset::Open(store_).has_value());
}

}  // namespace
}  // namespace stoker
