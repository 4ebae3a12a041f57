#include "format/chunk.h"

#include <gtest/gtest.h>

#include "common/coding.h"
#include "common/crc32c.h"
#include "storage/forwarding_storage.h"
#include "storage/memory_storage.h"
#include "testing/test_util.h"

namespace stoker::format {
namespace {

using test::AsBytes;

class ChunkTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(storage_.CreateDirs("chunks").ok()); }

  // Writes a chunk holding `payloads`; returns what the snapshot would record.
  ChunkInfo Write(uint64_t id, const std::vector<std::string>& payloads,
                  std::vector<ChunkEntryRef>* refs = nullptr) {
    auto writer = ChunkWriter::Create(storage_, id);
    EXPECT_TRUE(writer.has_value());
    for (const auto& p : payloads) {
      auto ref = (*writer)->Add(AsBytes(p));
      EXPECT_TRUE(ref.has_value());
      if (refs) refs->push_back(*ref);
    }
    auto info = (*writer)->Finish();
    EXPECT_TRUE(info.has_value()) << info.error().ToString();
    return *info;
  }
  std::string Contents(uint64_t id) { return storage_.GetContents(ChunkPath(id)).value(); }
  // Both checks, which must agree: of the whole buffer, and of the file streamed in pieces of
  // a few sizes (the pieces handed out must be the whole file, in order).
  static ChunkCheck Check(const std::string& bytes, const ChunkInfo& info) {
    ChunkCheck whole = CheckChunk(AsBytes(bytes), info, "test.chunk");
    storage::MemoryStorage store;
    store.SetContents("c", bytes);
    auto file = store.OpenRead("c").value();
    for (const uint64_t piece : {1, 5, 4096}) {
      std::string seen;
      auto streamed = CheckChunk(*file, info, "test.chunk", piece,
                                 [&](uint64_t offset, std::span<const std::byte> b) {
                                   EXPECT_EQ(offset, seen.size());
                                   seen.append(reinterpret_cast<const char*>(b.data()), b.size());
                                 });
      EXPECT_TRUE(streamed.has_value());
      EXPECT_EQ(streamed->status.ToString(), whole.status.ToString()) << "pieces of " << piece;
      EXPECT_EQ(streamed->entries.size(), whole.entries.size()) << "pieces of " << piece;
      if (bytes.size() == info.file_size && bytes.size() >= kChunkHeaderSize + kChunkFooterSize) {
        EXPECT_TRUE(seen == bytes) << "pieces of " << piece;
      }
      // The streamed check (the job cache's) agrees too, and never vouches for bytes that have
      // not come.
      EXPECT_EQ(Stream(bytes, info, piece), whole.status.ok()) << "pieces of " << piece;
    }
    return whole;
  }

  // ChunkStreamCheck over `bytes` arriving in pieces: whether it verified the whole file.
  static bool Stream(const std::string& bytes, const ChunkInfo& info, uint64_t piece) {
    const auto all = AsBytes(bytes);
    const uint64_t tail = ChunkStreamCheck::TailBytes(info);
    if (all.size() < kChunkHeaderSize || all.size() < tail) return false;
    auto check = ChunkStreamCheck::Begin(all.first(kChunkHeaderSize), all.last(tail), info, "t");
    if (!check.has_value()) return false;
    uint64_t verified = 0;
    for (uint64_t present = 0;;) {
      present = std::min<uint64_t>(present + piece, all.size());
      auto now = check->Advance(all, present);
      if (!now.has_value()) return false;
      EXPECT_LE(*now, present);
      EXPECT_GE(*now, verified);
      verified = *now;
      if (present == all.size()) return verified == all.size();
    }
  }

  storage::MemoryStorage storage_;
};

// Streamed, the bytes before a damaged entry are vouched for and it is named; nothing after,
// until its bytes come again intact.
TEST_F(ChunkTest, AStreamedCheckStopsAtTheFirstBadEntry) {
  std::vector<ChunkEntryRef> refs;
  const ChunkInfo info = Write(7, {"alpha", "bravo-bravo", "charlie", "delta"}, &refs);
  std::string bytes = Contents(7);
  bytes[refs[2].offset + 1] ^= 0x20;
  const auto all = AsBytes(bytes);
  auto check = ChunkStreamCheck::Begin(all.first(kChunkHeaderSize),
                                       all.last(ChunkStreamCheck::TailBytes(info)), info, "t");
  ASSERT_TRUE(check.has_value()) << check.error().ToString();
  EXPECT_EQ(check->Advance(all, refs[1].offset + 3).value(), refs[1].offset);
  EXPECT_EQ(check->Advance(all, refs[2].offset).value(), refs[2].offset);
  auto bad = check->Advance(all, all.size());
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().code(), StatusCode::kCorruption);
  EXPECT_NE(bad.error().message().find("entry 2"), std::string::npos) << bad.error().ToString();
  EXPECT_FALSE(check->Advance(all, all.size()).has_value());
  bytes[refs[2].offset + 1] ^= 0x20;  // the entry again, from a good source
  EXPECT_EQ(check->Advance(all, all.size()).value(), all.size());
}

TEST(ChunkPath, IsFixedWidthHex) {
  EXPECT_EQ(ChunkPath(0), "chunks/0000000000000000.chunk");
  EXPECT_EQ(ChunkPath(0x0000000100000002ull), "chunks/0000000100000002.chunk");
  EXPECT_EQ(ChunkPath(~0ull), "chunks/ffffffffffffffff.chunk");
}

TEST_F(ChunkTest, RoundTrip) {
  const std::vector<std::string> payloads = {"hello", "", test::RandomBytes(1, 70000), "x",
                                             test::RandomBytes(2, 3)};
  std::vector<ChunkEntryRef> refs;
  const ChunkInfo info = Write(0x200000007ull, payloads, &refs);
  const std::string bytes = Contents(0x200000007ull);
  EXPECT_EQ(info.id, 0x200000007ull);
  EXPECT_EQ(info.file_size, bytes.size());
  EXPECT_EQ(info.entry_count, payloads.size());
  uint64_t data_length = 0;
  for (const auto& p : payloads) data_length += p.size();
  EXPECT_EQ(bytes.size(), kChunkHeaderSize + data_length + 8 * payloads.size() + kChunkFooterSize);
  EXPECT_EQ(info.data_crc32c, crc32c::Value(bytes.data() + kChunkHeaderSize, data_length));

  // Every payload is where its ref says, with its CRC.
  uint64_t offset = kChunkHeaderSize;
  for (size_t i = 0; i < payloads.size(); ++i) {
    EXPECT_EQ(refs[i].offset, offset);
    EXPECT_EQ(refs[i].length, payloads[i].size());
    EXPECT_EQ(refs[i].crc32c, crc32c::Value(payloads[i]));
    EXPECT_EQ(bytes.substr(refs[i].offset, refs[i].length), payloads[i]);
    offset += payloads[i].size();
  }

  const ChunkCheck check = Check(bytes, info);
  ASSERT_TRUE(check.status.ok()) << check.status.ToString();
  ASSERT_EQ(check.entries.size(), payloads.size());
  for (size_t i = 0; i < refs.size(); ++i) {
    EXPECT_EQ(check.entries[i].offset, refs[i].offset);
    EXPECT_EQ(check.entries[i].length, refs[i].length);
    EXPECT_EQ(check.entries[i].crc32c, refs[i].crc32c);
  }
}

TEST_F(ChunkTest, HeaderAndFooterLayout) {
  const ChunkInfo info = Write(5, {"abc"});
  const std::string b = Contents(5);
  EXPECT_EQ(b.substr(0, 8), "STKCHUNK");
  EXPECT_EQ(coding::DecodeFixed<uint32_t>(b.data() + 8), kChunkVersion);
  EXPECT_EQ(coding::DecodeFixed<uint32_t>(b.data() + 12), 0u);
  EXPECT_EQ(coding::DecodeFixed<uint64_t>(b.data() + 16), 5u);
  EXPECT_EQ(coding::DecodeFixed<uint64_t>(b.data() + 24), 0u);
  const char* footer = b.data() + b.size() - kChunkFooterSize;
  EXPECT_EQ(std::string(footer, 8), "STKCEND1");
  EXPECT_EQ(coding::DecodeFixed<uint32_t>(footer + 8), 1u);
  EXPECT_EQ(coding::DecodeFixed<uint64_t>(footer + 16), 3u);
  EXPECT_EQ(coding::DecodeFixed<uint32_t>(footer + 24), info.data_crc32c);
}

TEST_F(ChunkTest, EmptyChunkIsValid) {
  const ChunkInfo info = Write(9, {});
  const std::string bytes = Contents(9);
  EXPECT_EQ(bytes.size(), kChunkHeaderSize + kChunkFooterSize);
  const ChunkCheck check = Check(bytes, info);
  EXPECT_TRUE(check.status.ok()) << check.status.ToString();
  EXPECT_TRUE(check.entries.empty());
}

TEST_F(ChunkTest, ProjectedSizeMatchesFinishedSize) {
  auto writer = ChunkWriter::Create(storage_, 3).value();
  EXPECT_EQ(writer->projected_size(), kChunkHeaderSize + kChunkFooterSize);
  ASSERT_TRUE(writer->Add(AsBytes(std::string(100, 'a'))).has_value());
  ASSERT_TRUE(writer->Add(AsBytes(std::string(7, 'b'))).has_value());
  EXPECT_EQ(writer->entry_count(), 2u);
  const uint64_t projected = writer->projected_size();
  EXPECT_EQ(writer->Finish().value().file_size, projected);
  EXPECT_EQ(Contents(3).size(), projected);
}

// Every single byte of a chunk is covered by a check: header and footer by the footer CRC,
// data by the data CRC, the index by the index CRC.
TEST_F(ChunkTest, EveryCorruptedByteIsDetected) {
  const ChunkInfo info = Write(11, {"first", "", "second payload", test::RandomBytes(3, 300)});
  const std::string good = Contents(11);
  ASSERT_TRUE(Check(good, info).status.ok());
  for (size_t i = 0; i < good.size(); ++i) {
    for (unsigned char mask : {0x01, 0x80, 0xFF}) {
      std::string bad = good;
      bad[i] = static_cast<char>(bad[i] ^ mask);
      const ChunkCheck check = Check(bad, info);
      EXPECT_TRUE(check.status.IsCorruption()) << "byte " << i << " mask " << int(mask);
      EXPECT_NE(check.status.message().find("test.chunk"), std::string::npos);
    }
  }
}

TEST_F(ChunkTest, CorruptionOfEachRegionIsNamed) {
  const ChunkInfo info = Write(12, {"aaaa", "bbbbbb"});
  const std::string good = Contents(12);
  const size_t data = kChunkHeaderSize, index = data + 10, footer = good.size() - kChunkFooterSize;
  auto why = [&](size_t byte) {
    std::string bad = good;
    bad[byte] ^= 0x10;
    return Check(bad, info).status.message();
  };
  EXPECT_NE(why(0).find("bad header magic"), std::string::npos);
  EXPECT_NE(why(8).find("footer CRC mismatch"), std::string::npos);   // version
  EXPECT_NE(why(16).find("footer CRC mismatch"), std::string::npos);  // chunk id
  EXPECT_NE(why(data + 1).find("data CRC mismatch"), std::string::npos);
  EXPECT_NE(why(index).find("index CRC mismatch"), std::string::npos);
  EXPECT_NE(why(footer).find("bad footer magic"), std::string::npos);
  EXPECT_NE(why(footer + 8).find("footer CRC mismatch"), std::string::npos);
  EXPECT_NE(why(footer + 28).find("footer CRC mismatch"), std::string::npos);
}

TEST_F(ChunkTest, DataCorruptionStillReportsTheIndex) {
  // verify names the affected files from the chunk's own index even when the data is bad.
  const ChunkInfo info = Write(13, {"aaaa", "bbbbbb"});
  std::string bad = Contents(13);
  bad[kChunkHeaderSize + 5] ^= 1;
  const ChunkCheck check = Check(bad, info);
  EXPECT_TRUE(check.status.IsCorruption());
  EXPECT_EQ(check.entries.size(), 2u);
}

TEST_F(ChunkTest, TruncationAndExtensionAreDetected) {
  const ChunkInfo info = Write(14, {"payload one", "payload two"});
  const std::string good = Contents(14);
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_TRUE(Check(good.substr(0, n), info).status.IsCorruption()) << n;
  }
  EXPECT_TRUE(Check(good + "x", info).status.IsCorruption());
}

TEST_F(ChunkTest, MismatchWithSnapshotRecordIsDetected) {
  const ChunkInfo info = Write(15, {"abc", "def"});
  const std::string good = Contents(15);
  ChunkInfo wrong = info;
  wrong.id = 16;
  EXPECT_NE(Check(good, wrong).status.message().find("chunk id mismatch"), std::string::npos);
  wrong = info;
  wrong.entry_count = 3;
  EXPECT_TRUE(Check(good, wrong).status.IsCorruption());
  wrong = info;
  wrong.data_crc32c ^= 1;
  EXPECT_NE(Check(good, wrong).status.message().find("data CRC mismatch"), std::string::npos);
  wrong = info;
  wrong.file_size += 1;
  EXPECT_TRUE(Check(good, wrong).status.IsCorruption());
}

TEST_F(ChunkTest, ConsistentlyForgedIndexIsRejected) {
  // An index whose lengths do not tile the data is caught even with every CRC recomputed.
  const ChunkInfo info = Write(17, {"abcd", "efgh"});
  std::string bad = Contents(17);
  const size_t index = kChunkHeaderSize + 8, footer = bad.size() - kChunkFooterSize;
  coding::EncodeFixed<uint32_t>(bad.data() + index, 3);  // first entry 3 bytes instead of 4
  coding::EncodeFixed<uint32_t>(bad.data() + footer + 12, crc32c::Value(bad.data() + index, 16));
  const uint32_t footer_crc =
      crc32c::Extend(crc32c::Value(bad.data(), kChunkHeaderSize), bad.data() + footer, 28);
  coding::EncodeFixed<uint32_t>(bad.data() + footer + 28, footer_crc);
  const ChunkCheck check = Check(bad, info);
  EXPECT_NE(check.status.message().find("index does not cover the data"), std::string::npos)
      << check.status.ToString();
}

TEST_F(ChunkTest, AWideIndexRoundTripsAndMustMatchTheMetadata) {
  auto writer = ChunkWriter::Create(storage_, 9, /*wide_index=*/true).value();
  const std::vector<std::string> payloads = {"abc", "", test::RandomBytes(4, 5000)};
  for (const auto& p : payloads) ASSERT_TRUE(writer->Add(AsBytes(p)).has_value());
  const ChunkInfo info = writer->Finish().value();
  EXPECT_TRUE(info.wide_index);
  const std::string bytes = Contents(9);
  EXPECT_EQ(bytes.size(), kChunkHeaderSize + 5003 + 12 * payloads.size() + kChunkFooterSize);
  EXPECT_EQ(info.fixed_bytes(), bytes.size() - 5003);
  const ChunkCheck check = Check(bytes, info);
  ASSERT_TRUE(check.status.ok()) << check.status.ToString();
  ASSERT_EQ(check.entries.size(), 3u);
  EXPECT_EQ(check.entries[2].length, 5000u);
  EXPECT_EQ(check.entries[2].crc32c, crc32c::Value(payloads[2]));
  ChunkInfo narrow = info;
  narrow.wide_index = false;
  EXPECT_NE(Check(bytes, narrow).status.message().find("index width"), std::string::npos);
}

TEST_F(ChunkTest, AStreamedCheckReadsAnIndexLargerThanItsFirstReadOfTheTail) {
  // 140,000 entries: an index of 1.1 MB, more than the 1 MiB tail read first.
  const std::vector<std::string> payloads(140000, "x");
  const ChunkInfo info = Write(21, payloads);
  const std::string good = Contents(21);
  EXPECT_TRUE(Check(good, info).status.ok());
  std::string bad = good;
  bad[kChunkHeaderSize + 140000 + 10] ^= 1;  // a byte of the index, outside the tail
  EXPECT_NE(Check(bad, info).status.message().find("index CRC mismatch"), std::string::npos);
}

TEST_F(ChunkTest, AStreamedEntryIsOnePayload) {
  const std::string payload = test::RandomBytes(5, 100000);
  auto streamed = ChunkWriter::Create(storage_, 10).value();
  for (size_t at = 0; at < payload.size(); at += 7777) {
    ASSERT_TRUE(streamed->AppendToEntry(AsBytes(payload.substr(at, 7777))).ok());
  }
  const ChunkEntryRef ref = streamed->EndEntry().value();
  EXPECT_EQ(ref.length, payload.size());
  EXPECT_EQ(ref.crc32c, crc32c::Value(payload));
  ASSERT_TRUE(streamed->Finish().has_value());
  Write(11, {payload});
  EXPECT_EQ(Contents(10).substr(kChunkHeaderSize, payload.size()), payload);
  // The same bytes as one Add(), but for the id in the header and the footer CRC over it.
  const std::string a = Contents(10), b = Contents(11);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_TRUE(a.substr(24, a.size() - 28) == b.substr(24, b.size() - 28));
}

// A narrow index cannot say 4 GiB: the writer refuses the payload rather than wrap its length.
TEST(ChunkWriter, ANarrowIndexRefusesAPayloadOfFourGiB) {
  class Discard final : public WritableFile {
   public:
    Status Append(std::span<const std::byte>) override { return Status::OK(); }
    Status Sync() override { return Status::OK(); }
    Status Close() override { return Status::OK(); }
  };
  class DiscardingStorage final : public storage::ForwardingStorage {
   public:
    DiscardingStorage() : ForwardingStorage(std::make_shared<storage::MemoryStorage>()) {}
    Result<std::unique_ptr<WritableFile>> Create(std::string_view) override {
      return std::make_unique<Discard>();
    }
  } storage;
  const std::vector<std::byte> piece(64 << 20);
  auto writer = ChunkWriter::Create(storage, 1).value();
  Status st;
  for (int i = 0; i < 64 && st.ok(); ++i) st = writer->AppendToEntry(piece);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("wide index"), std::string::npos);
}

}  // namespace
}  // namespace stoker::format
