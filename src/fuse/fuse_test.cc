// The parts of `stoker mount` that need no kernel: the inode table (numbers, lookups, attributes,
// listings) and open files (ranges, CRC checks, both read paths). tests/python/test_mount.py
// covers the mounted file system end to end.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "common/random.h"
#include "dataset/packer.h"
#include "format/chunk.h"
#include "format/snapshot.h"
#include "fuse/inode_table.h"
#include "fuse/open_file.h"
#include "stoker/dataset.h"
#include "storage/memory_storage.h"
#include "testing/test_util.h"

namespace stoker::fuse {
namespace {

class FuseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Nested directories, unicode/space/dot names, ~10 % empty files, several chunks.
    tree_ = test::RandomTree(17, {.files = 120, .dirs = 15, .max_file_bytes = 300 << 10});
    dataset::PackOptions options;
    options.chunk_bytes = 256 << 10;
    auto source = test::TreeSource(tree_);
    ASSERT_TRUE(dataset::Pack(*source, *store_, options).has_value());
    auto ds = Dataset::Open(store_);
    ASSERT_TRUE(ds.has_value()) << ds.error().ToString();
    ds_ = std::move(*ds);
  }

  // Walks `path` from the root one component at a time, as the kernel does.
  std::optional<uint64_t> Resolve(const InodeTable& t, std::string_view path) {
    uint64_t ino = InodeTable::kRootInode;
    while (!path.empty()) {
      const size_t slash = path.find('/');
      auto next = t.Lookup(ino, path.substr(0, slash));
      if (!next) return std::nullopt;
      ino = *next;
      path = slash == std::string_view::npos ? "" : path.substr(slash + 1);
    }
    return ino;
  }

  std::string ReadAll(OpenFile& f, size_t piece) {
    std::string out;
    std::vector<std::byte> scratch;
    bool first_report = false;
    for (uint64_t off = 0;; off += piece) {
      auto bytes = f.Read(off, piece, scratch, &first_report);
      EXPECT_TRUE(bytes.has_value()) << bytes.error().ToString();
      if (!bytes || bytes->empty()) return out;
      out.append(reinterpret_cast<const char*>(bytes->data()), bytes->size());
    }
  }

  std::shared_ptr<storage::MemoryStorage> store_ = std::make_shared<storage::MemoryStorage>();
  test::Tree tree_;
  std::unique_ptr<Dataset> ds_;
};

TEST_F(FuseTest, InodeNumbersFollowTheSnapshot) {
  const InodeTable t(*ds_, 1000, 2000);
  const auto& snap = ds_->snapshot();
  EXPECT_EQ(t.inode_count(), uint64_t{snap.dir_count()} + snap.file_count());
  EXPECT_TRUE(t.IsDir(1));
  EXPECT_EQ(t.DirInode(0), 1u);
  EXPECT_TRUE(t.IsDir(snap.dir_count()));
  EXPECT_FALSE(t.IsFile(snap.dir_count()));
  EXPECT_TRUE(t.IsFile(snap.dir_count() + 1));
  EXPECT_EQ(t.FileInode(0), snap.dir_count() + 1u);
  EXPECT_TRUE(t.IsFile(t.inode_count()));
  for (uint64_t bad : {uint64_t{0}, t.inode_count() + 1, ~uint64_t{0}}) {
    struct stat st;
    EXPECT_FALSE(t.IsDir(bad) || t.IsFile(bad));
    EXPECT_FALSE(t.Attr(bad, &st));
    EXPECT_FALSE(t.Lookup(bad, "x"));
  }
  for (uint32_t f = 0; f < snap.file_count(); ++f) {
    EXPECT_EQ(t.FileIndex(t.FileInode(f)), f);
    EXPECT_EQ(t.Path(t.FileInode(f)), ds_->FilePath(f));
  }
  for (uint32_t d = 0; d < snap.dir_count(); ++d) EXPECT_EQ(t.DirIndex(t.DirInode(d)), d);
}

TEST_F(FuseTest, LookupAndAttrMatchTheTree) {
  const InodeTable t(*ds_, 1000, 2000);
  for (const auto& [path, contents] : tree_.files) {
    const auto ino = Resolve(t, path);
    ASSERT_TRUE(ino.has_value()) << path;
    EXPECT_EQ(*ino, t.FileInode(ds_->Find(path).value())) << path;
    struct stat st;
    ASSERT_TRUE(t.Attr(*ino, &st));
    EXPECT_EQ(st.st_mode, S_IFREG | 0444);
    EXPECT_EQ(static_cast<uint64_t>(st.st_size), contents.size()) << path;
    EXPECT_EQ(st.st_ino, *ino);
    EXPECT_EQ(st.st_uid, 1000u);
    EXPECT_EQ(st.st_gid, 2000u);
    EXPECT_EQ(st.st_mtim.tv_sec, static_cast<time_t>(ds_->snapshot().created_unix_seconds()));
    // Nothing lives below a file; near-misses are not found.
    EXPECT_FALSE(t.Lookup(*ino, "x"));
    EXPECT_FALSE(Resolve(t, path + "~"));
  }
  for (const std::string& dir : tree_.Dirs()) {
    const auto ino = Resolve(t, dir);
    ASSERT_TRUE(ino.has_value()) << dir;
    struct stat st;
    ASSERT_TRUE(t.Attr(*ino, &st));
    EXPECT_EQ(st.st_mode, S_IFDIR | 0555);
    EXPECT_EQ(t.Lookup(*ino, "."), *ino);
    const size_t slash = dir.rfind('/');
    const std::string parent = slash == std::string::npos ? "" : dir.substr(0, slash);
    EXPECT_EQ(t.Lookup(*ino, ".."), Resolve(t, parent)) << dir;
  }
  EXPECT_FALSE(t.Lookup(InodeTable::kRootInode, ""));
  EXPECT_FALSE(t.Lookup(InodeTable::kRootInode, "a/b"));
}

TEST_F(FuseTest, ListingsAreDotDotDotThenTheDirectory) {
  const InodeTable t(*ds_, 0, 0);
  size_t files_seen = 0;
  for (const std::string& dir : tree_.Dirs()) {
    const uint64_t ino = Resolve(t, dir).value();
    const auto want = tree_.Listing(dir);
    ASSERT_EQ(t.EntryCount(ino), 2 + want.size()) << dir;
    EXPECT_EQ(t.EntryAt(ino, 0).name, ".");
    EXPECT_EQ(t.EntryAt(ino, 0).ino, ino);
    EXPECT_EQ(t.EntryAt(ino, 1).name, "..");
    for (size_t k = 0; k < want.size(); ++k) {
      const InodeTable::Entry e = t.EntryAt(ino, k + 2);
      EXPECT_EQ(e.name, want[k].first);
      EXPECT_EQ(e.is_dir, want[k].second);
      EXPECT_EQ(t.Lookup(ino, e.name), e.ino) << dir << " / " << e.name;
      files_seen += !e.is_dir;
    }
  }
  EXPECT_EQ(files_seen, tree_.files.size());
}

// Every file through both read paths, in pieces that do and do not divide the sizes.
TEST_F(FuseTest, OpenFileReadsEveryByteOnBothPaths) {
  for (uint64_t buffer_limit : {uint64_t{64} << 20, uint64_t{0}, uint64_t{50000}}) {
    for (const auto& [path, contents] : tree_.files) {
      OpenFile f(*ds_, ds_->Find(path).value(), buffer_limit);
      EXPECT_EQ(f.size(), contents.size());
      EXPECT_EQ(ReadAll(f, 7777), contents) << path << " limit " << buffer_limit;
      EXPECT_EQ(ReadAll(f, 1 << 20), contents) << path;
    }
  }
}

TEST_F(FuseTest, RandomRangesAndConcurrentFirstReads) {
  Pcg32 rng(3);
  for (const auto& [path, contents] : tree_.files) {
    if (contents.size() < 1000) continue;
    OpenFile f(*ds_, ds_->Find(path).value(), contents.size() % 2 ? 0 : 1 << 30);
    // Several threads race to the first read: one loads, all get the right bytes.
    std::vector<std::thread> threads;
    std::atomic<int> wrong{0};
    for (int i = 0; i < 4; ++i) {
      threads.emplace_back([&, i] {
        std::vector<std::byte> scratch;
        bool first = false;
        const uint64_t off = (contents.size() / 5) * i;
        auto b = f.Read(off, 4096, scratch, &first);
        if (!b || test::AsString(std::vector<std::byte>(b->begin(), b->end())) !=
                      contents.substr(off, 4096)) {
          ++wrong;
        }
      });
    }
    for (auto& th : threads) th.join();
    EXPECT_EQ(wrong.load(), 0) << path;
    std::vector<std::byte> scratch;
    bool first = false;
    for (int i = 0; i < 20; ++i) {
      const uint64_t off = rng.Below(contents.size() + 100);
      const size_t n = 1 + rng.Below(200000);
      auto b = f.Read(off, n, scratch, &first);
      ASSERT_TRUE(b.has_value());
      const std::string want = off < contents.size() ? contents.substr(off, n) : "";
      EXPECT_EQ(std::string(reinterpret_cast<const char*>(b->data()), b->size()), want);
    }
  }
}

TEST_F(FuseTest, CorruptFileFailsAloneOnBothPaths) {
  // The largest file: damage one byte in the middle of its payload.
  uint32_t victim = 0;
  for (uint32_t f = 0; f < ds_->file_count(); ++f) {
    if (ds_->Stat(f)->size > ds_->Stat(victim)->size) victim = f;
  }
  const FileInfo info = ds_->Stat(victim).value();
  ASSERT_GT(info.size, 1000u);
  const std::string chunk = format::ChunkPath(info.chunk_id);
  std::string bytes = store_->GetContents(chunk).value();
  bytes[info.offset + info.size / 2] ^= 0x10;
  store_->SetContents(chunk, bytes);
  auto damaged = Dataset::Open(store_);  // a fresh open sees the new bytes
  ASSERT_TRUE(damaged.has_value());

  for (uint64_t buffer_limit : {uint64_t{64} << 20, uint64_t{0}}) {
    OpenFile f(**damaged, victim, buffer_limit);
    std::vector<std::byte> scratch;
    bool first = false;
    auto r = f.Read(0, 10, scratch, &first);  // a range far from the damage fails too
    ASSERT_FALSE(r.has_value());
    EXPECT_TRUE(r.error().IsCorruption()) << r.error().ToString();
    EXPECT_NE(r.error().message().find(info.path), std::string::npos) << r.error().ToString();
    EXPECT_TRUE(first);
    r = f.Read(info.size / 2, 10, scratch, &first);  // sticky, reported once
    ASSERT_FALSE(r.has_value());
    EXPECT_FALSE(first);
    // Every other file still reads.
    for (const auto& [path, contents] : tree_.files) {
      if (path == info.path) continue;
      OpenFile other(**damaged, (*damaged)->Find(path).value(), buffer_limit);
      EXPECT_EQ(ReadAll(other, 1 << 20), contents) << path;
    }
  }
}

}  // namespace
}  // namespace stoker::fuse
