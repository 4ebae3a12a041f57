#include "common/crc32c.h"

#include <gtest/gtest.h>

#include <string>

#include "common/random.h"

namespace stoker::crc32c {
namespace {

std::string Repeat(unsigned char byte, size_t n) { return std::string(n, static_cast<char>(byte)); }

TEST(Crc32c, StandardCheckValue) {
  // The "check" value of the CRC-32C catalogue entry (Castagnoli, reflected, init/xorout ~0).
  EXPECT_EQ(Value(std::string_view("123456789")), 0xE3069283u);
}

TEST(Crc32c, EmptyInputIsZero) {
  EXPECT_EQ(Value(std::string_view()), 0u);
  EXPECT_EQ(Extend(0x12345678u, nullptr, 0), 0x12345678u);
}

// RFC 3720 (iSCSI), appendix B.4.
TEST(Crc32c, Rfc3720TestVectors) {
  EXPECT_EQ(Value(Repeat(0x00, 32)), 0x8A9136AAu);
  EXPECT_EQ(Value(Repeat(0xFF, 32)), 0x62A8AB43u);
  std::string ascending, descending;
  for (int i = 0; i < 32; ++i) {
    ascending.push_back(static_cast<char>(i));
    descending.push_back(static_cast<char>(31 - i));
  }
  EXPECT_EQ(Value(ascending), 0x46DD794Eu);
  EXPECT_EQ(Value(descending), 0x113FDB5Cu);
  // An iSCSI SCSI Read (10) command PDU.
  const unsigned char pdu[48] = {0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                                 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00,
                                 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00,
                                 0x00, 0x18, 0x28, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                                 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
  EXPECT_EQ(Value(pdu, sizeof(pdu)), 0xD9963A56u);
}

TEST(Crc32c, OverloadsAgree) {
  const std::string s = "stoker keeps GPUs fed";
  const auto* bytes = reinterpret_cast<const std::byte*>(s.data());
  EXPECT_EQ(Value(s), Value(s.data(), s.size()));
  EXPECT_EQ(Value(std::span<const std::byte>(bytes, s.size())), Value(s));
}

TEST(Crc32c, ExtendComposesAtEverySplit) {
  Pcg32 rng(3);
  std::string data(4099, '\0');
  for (auto& c : data) c = static_cast<char>(rng.Next());
  const uint32_t whole = Value(data);
  for (size_t split = 0; split <= data.size(); split += 1 + split / 8) {
    const uint32_t first = Value(data.data(), split);
    EXPECT_EQ(Extend(first, data.data() + split, data.size() - split), whole) << split;
  }
  // Three pieces, and byte by byte.
  uint32_t crc = 0;
  for (char c : data.substr(0, 300)) crc = Extend(crc, &c, 1);
  EXPECT_EQ(crc, Value(data.data(), 300));
}

TEST(Crc32c, DetectsEverySingleBitFlip) {
  std::string data = "The quick brown fox jumps over the lazy dog";
  const uint32_t good = Value(data);
  EXPECT_EQ(good, 0x22620404u);  // widely published CRC-32C of this sentence
  for (size_t bit = 0; bit < data.size() * 8; ++bit) {
    data[bit / 8] ^= static_cast<char>(1 << (bit % 8));
    EXPECT_NE(Value(data), good) << bit;
    data[bit / 8] ^= static_cast<char>(1 << (bit % 8));
  }
}

}  // namespace
}  // namespace stoker::crc32c
