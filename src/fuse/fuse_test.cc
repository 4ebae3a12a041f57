// The parts of `stoker mount` that need no kernel: the inode table (numbers, lookups, attributes,
// listings) and open files (ranges, CRC checks, both read paths). tests/python/test_mount.py
// covers the mounted file system end to end.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <map>

#include <atomic>
#include <thread>

#include "common/random.h"
#include "dataset/packer.h"
#include "dataset/version_view.h"
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
      EXPECT_TRUE(next.has_value()) << next.error().ToString();
      if (!next || !*next) return std::nullopt;
      ino = **next;
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

// Lookup's answer without its Result wrapper (the metadata is intact in these tests).
std::optional<uint64_t> Look(const InodeTable& t, uint64_t parent, std::string_view name) {
  return t.Lookup(parent, name).value();
}

TEST_F(FuseTest, FileInodesAreFileIndicesAndDirectoryInodesStayPut) {
  const InodeTable t(*ds_, 1000, 2000);
  EXPECT_TRUE(t.IsDir(InodeTable::kRootInode));
  EXPECT_EQ(t.inode_count(), 1u + ds_->file_count());  // only the root met so far
  for (uint32_t f = 0; f < ds_->file_count(); ++f) {
    EXPECT_TRUE(t.IsFile(t.FileInode(f)));
    EXPECT_FALSE(t.IsDir(t.FileInode(f)));
    EXPECT_EQ(t.FileIndex(t.FileInode(f)), f);
    EXPECT_EQ(t.Path(t.FileInode(f)), ds_->FilePath(f));
  }
  for (uint64_t bad : {uint64_t{0}, uint64_t{2}, t.FileInode(ds_->file_count()), ~uint64_t{0}}) {
    struct stat st;
    EXPECT_FALSE(t.IsDir(bad) || t.IsFile(bad)) << bad;
    EXPECT_TRUE(t.Attr(bad, &st).IsNotFound());
    EXPECT_FALSE(Look(t, bad, "x"));
  }
  // A directory gets its number when first met, and keeps it however it is met again.
  std::map<std::string, uint64_t> first;
  for (const std::string& dir : tree_.Dirs()) first[dir] = Resolve(t, dir).value();  // "" too
  EXPECT_EQ(first.at(""), InodeTable::kRootInode);
  EXPECT_EQ(t.inode_count(), first.size() + ds_->file_count());
  for (const auto& [dir, ino] : first) {
    EXPECT_TRUE(t.IsDir(ino));
    EXPECT_LT(ino, InodeTable::kFileInodeBase);
    EXPECT_EQ(Resolve(t, dir), ino);
    EXPECT_EQ(t.Path(ino), dir);
  }
}

TEST_F(FuseTest, LookupAndAttrMatchTheTree) {
  const InodeTable t(*ds_, 1000, 2000);
  for (const auto& [path, contents] : tree_.files) {
    const auto ino = Resolve(t, path);
    ASSERT_TRUE(ino.has_value()) << path;
    EXPECT_EQ(*ino, t.FileInode(ds_->Find(path).value())) << path;
    struct stat st;
    ASSERT_TRUE(t.Attr(*ino, &st).ok());
    EXPECT_EQ(st.st_mode, S_IFREG | 0444);
    EXPECT_EQ(static_cast<uint64_t>(st.st_size), contents.size()) << path;
    EXPECT_EQ(st.st_ino, *ino);
    EXPECT_EQ(st.st_uid, 1000u);
    EXPECT_EQ(st.st_gid, 2000u);
    EXPECT_EQ(st.st_mtim.tv_sec,
              static_cast<time_t>(dataset::ViewOf(*ds_).record().created_unix_seconds));
    // Nothing lives below a file; near-misses are not found.
    EXPECT_FALSE(Look(t, *ino, "x"));
    EXPECT_FALSE(Resolve(t, path + "~"));
  }
  for (const std::string& dir : tree_.Dirs()) {
    const auto ino = Resolve(t, dir);
    ASSERT_TRUE(ino.has_value()) << dir;
    struct stat st;
    ASSERT_TRUE(t.Attr(*ino, &st).ok());
    EXPECT_EQ(st.st_mode, S_IFDIR | 0555);
    size_t subdirs = 0;
    for (const auto& [name, is_dir] : tree_.Listing(dir)) subdirs += is_dir;
    EXPECT_EQ(st.st_nlink, 2 + subdirs) << dir;
    EXPECT_EQ(Look(t, *ino, "."), *ino);
    const size_t slash = dir.rfind('/');
    const std::string parent = slash == std::string::npos ? "" : dir.substr(0, slash);
    EXPECT_EQ(Look(t, *ino, ".."), Resolve(t, parent)) << dir;
  }
  EXPECT_FALSE(Look(t, InodeTable::kRootInode, ""));
  EXPECT_FALSE(Look(t, InodeTable::kRootInode, "a/b"));
}

TEST_F(FuseTest, ListingsAreDotDotDotThenTheDirectory) {
  const InodeTable t(*ds_, 0, 0);
  size_t files_seen = 0;
  for (const std::string& dir : tree_.Dirs()) {  // the root ("") too
    const uint64_t ino = dir.empty() ? InodeTable::kRootInode : Resolve(t, dir).value();
    const auto want = tree_.Listing(dir);
    auto listing = t.Entries(ino);
    ASSERT_TRUE(listing.has_value()) << listing.error().ToString();
    const auto& got = **listing;
    ASSERT_EQ(got.size(), 2 + want.size()) << dir;
    EXPECT_EQ(got[0].name, ".");
    EXPECT_EQ(got[0].ino, ino);
    EXPECT_EQ(got[1].name, "..");
    for (size_t k = 0; k < want.size(); ++k) {
      const InodeTable::Entry& e = got[k + 2];
      EXPECT_EQ(e.name, want[k].first);
      EXPECT_EQ(e.is_dir, want[k].second);
      EXPECT_EQ(Look(t, ino, e.name), e.ino) << dir << " / " << e.name;
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
    threads.reserve(4);
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

TEST_F(FuseTest, BytesChangedAfterTheCheckAreRefusedOnTheStreamedPath) {
  // A file several check pieces long, streamed (buffer limit 0), in a chunk on a local disk.
  test::TempDir src, dst;
  const std::string contents = test::RandomBytes(5, 3 * OpenFile::kCheckPiece + 1234);
  test::Tree tree;
  tree.files["big.bin"] = contents;
  test::WriteTree(tree, src.path());
  ASSERT_TRUE(test::PackDirectory(src.path(), *OpenStorage(dst.path()).value(), {}).has_value());
  auto ds = Dataset::Open(dst.path());
  ASSERT_TRUE(ds.has_value()) << ds.error().ToString();
  const FileInfo info = (*ds)->Stat(0).value();
  OpenFile f(**ds, 0, /*buffer_limit=*/0);
  std::vector<std::byte> scratch;
  bool first = false;
  auto head = f.Read(0, 100, scratch, &first);  // the first read checks the whole file
  ASSERT_TRUE(head.has_value()) << head.error().ToString();

  // The chunk changes in place after the check: one byte in the third piece.
  const uint64_t victim = 2 * OpenFile::kCheckPiece + 77;
  const std::string chunk = dst.Join(format::ChunkPath(info.chunk_id));
  const int fd = ::open(chunk.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  const char flipped = static_cast<char>(contents[victim] ^ 0x01);
  ASSERT_EQ(::pwrite(fd, &flipped, 1, static_cast<off_t>(info.offset + victim)), 1);
  ::close(fd);

  // Bytes of untouched pieces are still served, checked again ...
  auto early = f.Read(OpenFile::kCheckPiece, 4096, scratch, &first);
  ASSERT_TRUE(early.has_value()) << early.error().ToString();
  EXPECT_EQ(test::AsString(std::vector<std::byte>(early->begin(), early->end())),
            contents.substr(OpenFile::kCheckPiece, 4096));
  // ... but no byte of the changed piece, even far from the change: the read fails, naming
  // the file, once, and stays failed.
  auto changed = f.Read(2 * OpenFile::kCheckPiece + 60000, 10, scratch, &first);
  ASSERT_FALSE(changed.has_value());
  EXPECT_TRUE(changed.error().IsCorruption()) << changed.error().ToString();
  EXPECT_NE(changed.error().message().find("big.bin"), std::string::npos);
  EXPECT_TRUE(first);
  auto again = f.Read(0, 10, scratch, &first);
  ASSERT_FALSE(again.has_value());
  EXPECT_FALSE(first);
}

}  // namespace
}  // namespace stoker::fuse
