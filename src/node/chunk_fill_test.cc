#include "node/chunk_fill.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>

#include "storage/memory_storage.h"
#include "testing/test_util.h"

namespace stoker::node {
namespace {

// A chunk file of `entries` payloads of assorted sizes, and what the metadata says of it.
struct TestChunk {
  std::string bytes;
  format::ChunkInfo info;
  std::vector<format::ChunkEntryRef> entries;
};

TestChunk MakeChunk(int entries) {
  storage::MemoryStorage storage;
  EXPECT_TRUE(storage.CreateDirs("chunks").ok());
  auto writer = format::ChunkWriter::Create(storage, 77).value();
  TestChunk c;
  for (int i = 0; i < entries; ++i) {
    const std::string payload = test::RandomBytes(i, 1000 + 3000 * (i % 5));
    c.entries.push_back(writer->Add(test::AsBytes(payload)).value());
  }
  c.info = writer->Finish().value();
  c.bytes = storage.GetContents(format::ChunkPath(77)).value();
  return c;
}

// Serves the chunk's bytes, optionally corrupting one byte, counting what it was asked for.
struct Source {
  explicit Source(const std::string* b) : bytes(b) {}
  const std::string* bytes;
  int64_t corrupt_at = -1;
  uint64_t fail_after = ~uint64_t{0};     // bytes of data, then IOError
  std::atomic<uint64_t> served{0};        // (a fill has two reads in flight)
  std::function<void(uint64_t)> on_read;  // called with each read's end
  ChunkFill::ReadFn Fn() {
    return [this](uint64_t offset, std::span<std::byte> dst) {
      if (offset >= format::kChunkHeaderSize && served >= fail_after) {
        return Status::IOError("the source went away");
      }
      std::memcpy(dst.data(), bytes->data() + offset, dst.size());
      if (corrupt_at >= 0 && static_cast<uint64_t>(corrupt_at) >= offset &&
          static_cast<uint64_t>(corrupt_at) < offset + dst.size()) {
        dst[corrupt_at - offset] ^= std::byte{1};
      }
      served.fetch_add(dst.size());
      if (on_read) on_read(offset + dst.size());
      return Status::OK();
    };
  }
};

std::unique_ptr<CachedChunk> NewChunk(uint64_t size) {
  return CachedChunk::Create("test", size, nullptr).value();
}

// The mark moves over whole verified entries while the data arrives, never past what came.
TEST(ChunkFillTest, HandsOnVerifiedEntriesAsTheyArrive) {
  const TestChunk c = MakeChunk(20);
  auto out = NewChunk(c.info.file_size);
  ChunkFill fill(*out, c.info, "c");
  Source src(&c.bytes);
  std::atomic<uint64_t> reads{0};
  src.on_read = [&](uint64_t end) {
    ++reads;
    const uint64_t verified = out->verified();
    EXPECT_LE(verified, end > c.info.file_size - format::ChunkStreamCheck::TailBytes(c.info)
                            ? c.info.file_size
                            : std::max<uint64_t>(end, format::kChunkHeaderSize));
  };
  ASSERT_TRUE(fill.From(src.Fn(), "src", 4096).ok());
  EXPECT_TRUE(fill.done());
  EXPECT_EQ(out->verified(), c.info.file_size);
  EXPECT_GT(reads.load(), 10u);  // header, tail, then pieces
  EXPECT_EQ(std::memcmp(out->bytes().data(), c.bytes.data(), c.bytes.size()), 0);
}

// A source that sends a bad entry, or goes away, leaves what was verified; the next one goes
// on from there and the chunk ends whole and right.
TEST(ChunkFillTest, TheNextSourceGoesOnWhereABadOneStopped) {
  const TestChunk c = MakeChunk(20);
  auto out = NewChunk(c.info.file_size);
  ChunkFill fill(*out, c.info, "c");
  Source bad(&c.bytes);
  bad.corrupt_at = static_cast<int64_t>(c.entries[7].offset + 5);
  const Status st = fill.From(bad.Fn(), "bad peer", 4096);
  EXPECT_EQ(st.code(), StatusCode::kCorruption) << st.ToString();
  EXPECT_NE(st.message().find("entry 7"), std::string::npos) << st.ToString();
  EXPECT_EQ(out->verified(), c.entries[7].offset);  // entries 0-6, nothing of 7

  Source gone(&c.bytes);
  gone.fail_after = 20000;
  EXPECT_EQ(fill.From(gone.Fn(), "dead peer", 4096).code(), StatusCode::kIOError);
  const uint64_t after_gone = out->verified();
  EXPECT_GT(after_gone, c.entries[7].offset);

  Source good(&c.bytes);
  ASSERT_TRUE(fill.From(good.Fn(), "store", 4096).ok());
  EXPECT_EQ(std::memcmp(out->bytes().data(), c.bytes.data(), c.bytes.size()), 0);
  EXPECT_LE(good.served.load(), c.bytes.size() - after_gone + 4096);  // only what was missing
}

// A bad header or tail is the source's fault and leaves nothing verified.
TEST(ChunkFillTest, ABadTailIsRefusedBeforeAnythingIsHandedOn) {
  const TestChunk c = MakeChunk(5);
  auto out = NewChunk(c.info.file_size);
  ChunkFill fill(*out, c.info, "c");
  Source bad(&c.bytes);
  bad.corrupt_at = static_cast<int64_t>(c.info.file_size - 10);  // the footer
  EXPECT_EQ(fill.From(bad.Fn(), "bad", 4096).code(), StatusCode::kCorruption);
  EXPECT_EQ(out->verified(), 0u);
  Source good(&c.bytes);
  ASSERT_TRUE(fill.From(good.Fn(), "good", 4096).ok());
  EXPECT_EQ(out->verified(), c.info.file_size);
}

// What a trainer accepts from a daemon: a chunk with marks (filling or not), or a chunk a
// daemon from before cut-through sealed whole; nothing unsealed or of another size. A failed
// fill fails the waits at once.
TEST(CachedChunkTest, TrainersAcceptOnlyChunkDescriptorsTheyCanTrust) {
  auto filling = NewChunk(5000);
  EXPECT_EQ(CheckChunkFd(filling->fd(), 5000), ChunkFdLayout::kWithMarks);
  EXPECT_EQ(CheckChunkFd(filling->fd(), 6000), std::nullopt);

  const int whole = ::memfd_create("whole", MFD_ALLOW_SEALING);
  ASSERT_EQ(::ftruncate(whole, 5000), 0);
  EXPECT_EQ(CheckChunkFd(whole, 5000), std::nullopt);  // unsealed
  ASSERT_EQ(::fcntl(whole, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
            0);
  EXPECT_EQ(CheckChunkFd(whole, 5000), ChunkFdLayout::kSealedWhole);
  ::close(whole);

  filling->SetVerified(100);
  EXPECT_TRUE(filling->WaitFor(0, 100, std::chrono::milliseconds(10)).ok());
  filling->Fail();
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(filling->WaitFor(0, 200, std::chrono::seconds(30)).code(), StatusCode::kUnavailable);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

// A trainer waiting on a chunk whose filler (the daemon) dies stops waiting when the daemon's
// connection hangs up, not after the stall limit; a reply waiting on that connection is no
// hang-up.
TEST(CachedChunkTest, AWaitEndsWhenTheFillersConnectionHangsUp) {
  auto filling = NewChunk(5000);
  filling->SetVerified(100);
  int sockets[2];  // as the trainers' connections to their daemon
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sockets), 0);
  ASSERT_EQ(::write(sockets[1], "r", 1), 1);  // the daemon alive, a reply unread
  // Long enough for several looks at the connection (every 100 ms) before the stall limit.
  const Status stalled = filling->WaitFor(0, 200, std::chrono::milliseconds(450), sockets[0]);
  EXPECT_EQ(stalled.code(), StatusCode::kUnavailable);
  EXPECT_NE(stalled.message().find("no progress"), std::string::npos) << stalled.ToString();
  ::close(sockets[1]);  // the daemon killed
  // With an hour's stall limit, only the hang-up can end this wait.
  const Status gone = filling->WaitFor(0, 200, std::chrono::hours(1), sockets[0]);
  EXPECT_EQ(gone.code(), StatusCode::kUnavailable);
  EXPECT_NE(gone.message().find("the node daemon is gone"), std::string::npos) << gone.ToString();
  EXPECT_TRUE(filling->WaitFor(0, 100, std::chrono::hours(1), sockets[0]).ok());  // verified
  ::close(sockets[0]);
}

}  // namespace
}  // namespace stoker::node
