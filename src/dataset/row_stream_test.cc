// The row stream (`stoker pack -`): values in their wire form become the stored values
// stoker.Writer would write, and a value or stream that is wrong is refused, naming the row and
// column, with nothing published.
#include "dataset/row_stream.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "stoker/dataset.h"
#include "storage/posix_storage.h"
#include "testing/test_util.h"

namespace stoker::dataset {
namespace {

// A stream built value by value, as the JVM writer builds it.
class Stream {
 public:
  explicit Stream(std::string start = "STKROWS1") : bytes_(std::move(start)) {}
  Stream& Row() { return Raw("\x01"); }
  Stream& End() { return Raw(std::string(1, '\0')); }
  Stream& Value(std::string_view v) {
    Length(static_cast<uint32_t>(v.size()));
    return Raw(v);
  }
  Stream& Int(int64_t v) { return Value(Bytes(v)); }
  Stream& Float(double v) { return Value(Bytes(v)); }
  Stream& None() {
    Length(0xFFFFFFFF);
    return *this;
  }
  Stream& Raw(std::string_view s) {
    bytes_ += s;
    return *this;
  }
  const std::string& bytes() const { return bytes_; }

  template <typename T>
  static std::string Bytes(T v) {
    std::string s(sizeof v, '\0');
    std::memcpy(s.data(), &v, sizeof v);
    return s;
  }

 private:
  void Length(uint32_t n) { bytes_ += Bytes(n); }
  std::string bytes_;
};

class RowStreamTest : public ::testing::Test {
 protected:
  // Packs `stream` with columns `flags` (in the stream's order); the rows read, or the error.
  Result<uint64_t> Pack(const Stream& stream, const std::vector<std::string>& flags,
                        const std::string& label = "") {
    const std::string file = dir_.Join("rows.bin");
    test::WriteStringToFile(file, stream.bytes());
    auto order = ParseRowColumns(flags);
    if (!order) return Err(order.error());
    auto schema = format::MakeSchema(*order, label);
    if (!schema) return Err(schema.error());
    PackOptions options;
    options.group_samples = true;
    options.columns = format::FormatSchema(*schema);
    auto pack = StreamPack::Start(storage::NewPosixStorage(dir_.Join(out_)), options, 1 << 20);
    if (!pack) return Err(pack.error());
    const int fd = ::open(file.c_str(), O_RDONLY);
    auto rows = PackRowStream({fd, *order, schema->label, "p/", stop_}, **pack);
    ::close(fd);
    if (!rows) {
      (*pack)->Abort();
      return rows;
    }
    auto summary = (*pack)->Finish();
    if (!summary) return Err(summary.error());
    return rows;
  }

  std::optional<std::string> Stored(uint64_t row, const std::string& column) {
    auto ds = Dataset::Open(dir_.Join(out_));
    EXPECT_TRUE(ds.has_value()) << ds.error().ToString();
    auto index = (*ds)->Find(fmt::format("p/{:012}.{}", row, column));
    if (!index) return std::nullopt;
    auto bytes = (*ds)->ReadFile(*index);
    EXPECT_TRUE(bytes.has_value()) << bytes.error().ToString();
    return std::string(test::AsString(*bytes));
  }

  test::TempDir dir_;
  std::string out_ = "out";  // the dataset's directory in dir_
  std::function<bool()> stop_;
};

TEST_F(RowStreamTest, ValuesAreStoredAsTheWriterStoresThem) {
  Stream s;
  const float emb[] = {1.5f, -2.0f};
  s.Row()
      .Int(7)
      .Float(0.1)
      .Value("héllo")
      .Value(std::string("\xff\xd8\xff\xe0", 4))
      .Value(std::string(reinterpret_cast<const char*>(emb), sizeof emb))
      .Int(3);
  s.Row().Int(-9).None().Value("").Value(std::string("\xff\xd8\xff", 3)).Value("").Int(0);
  s.End();
  auto rows = Pack(
      s, {"id=int", "score=float?", "text=str", "image=jpeg", "emb=ndarray:float32", "label=int"},
      "label");
  ASSERT_TRUE(rows.has_value()) << rows.error().ToString();
  EXPECT_EQ(*rows, 2u);
  EXPECT_EQ(Stored(0, "id"), "7");
  EXPECT_EQ(Stored(0, "score"), "0.1");
  EXPECT_EQ(Stored(1, "score"), std::nullopt);  // no value: no file
  EXPECT_EQ(Stored(0, "text"), "héllo");
  EXPECT_EQ(Stored(1, "id"), "-9");
  EXPECT_EQ(Stored(0, "label"), "3");
  const std::string header = format::NpyHeader({'f', 4}, std::vector<uint64_t>{2});
  EXPECT_EQ(Stored(0, "emb"), header + std::string(reinterpret_cast<const char*>(emb), 8));
  EXPECT_EQ(Stored(1, "emb"), format::NpyHeader({'f', 4}, std::vector<uint64_t>{0}));
}

TEST_F(RowStreamTest, TokensPngJsonAndFixedShapesToo) {
  const int16_t toks[] = {-3, 7, 30000};
  const uint8_t pixels[] = {1, 2, 3, 4, 5, 6};
  const std::string png("\x89PNG\r\n\x1a\nrest", 12);
  Stream s;
  s.Row()
      .Value(std::string(reinterpret_cast<const char*>(toks), sizeof toks))
      .Value(png)
      .Value(R"({"a": [1, 2.5, "x"]})")
      .Value(std::string(reinterpret_cast<const char*>(pixels), sizeof pixels))
      .End();
  auto rows = Pack(s, {"t=tokens:int16", "i=png", "j=json", "m=ndarray:uint8:2x3"});
  ASSERT_TRUE(rows.has_value()) << rows.error().ToString();
  EXPECT_EQ(Stored(0, "t"), std::string(reinterpret_cast<const char*>(toks), sizeof toks));
  EXPECT_EQ(Stored(0, "i"), png);
  EXPECT_EQ(Stored(0, "j"), R"({"a": [1, 2.5, "x"]})");
  EXPECT_EQ(Stored(0, "m"), format::NpyHeader({'u', 1}, std::vector<uint64_t>{2, 3}) +
                                std::string(reinterpret_cast<const char*>(pixels), 6));
}

TEST_F(RowStreamTest, AStopEndsTheReadWithNothingPublished) {
  stop_ = [] { return true; };
  auto rows = Pack(Stream().Row().Int(1).End(), {"x=int"});
  ASSERT_FALSE(rows.has_value());
  EXPECT_TRUE(rows.error().IsCancelled()) << rows.error().ToString();
  EXPECT_FALSE(Dataset::Open(dir_.Join(out_)).has_value());
}

TEST_F(RowStreamTest, AnEmptyStreamIsNoRows) {
  auto rows = Pack(Stream().End(), {"id=int"});
  ASSERT_TRUE(rows.has_value()) << rows.error().ToString();
  EXPECT_EQ(*rows, 0u);
}

TEST_F(RowStreamTest, WhatIsWrongIsNamedAndNothingIsPublished) {
  struct Case {
    Stream stream;
    std::vector<std::string> flags;
    std::string says;
  };
  std::vector<Case> cases;
  cases.push_back({Stream().Row().Value("abc").End(), {"image=jpeg"}, "row 0: column 'image'"});
  cases.push_back({Stream().Row().Int(1).Row().Int(1 << 23).End(),
                   {"label=int"},
                   "row 1: column 'label': label 8388608 is outside"});
  cases.push_back({Stream().Row().Float(std::numeric_limits<double>::quiet_NaN()).End(),
                   {"x=float"},
                   "float:nan"});
  cases.push_back({Stream().Row().Value("\xc3").End(), {"t=str"}, "not UTF-8"});
  cases.push_back({Stream().Row().None().End(), {"t=str"}, "not optional"});
  cases.push_back(
      {Stream().Row().Value("abc").End(), {"x=int"}, "3 bytes; int values are 8 bytes"});
  cases.push_back({Stream().Row().Value(std::string(12, 'a')).End(),
                   {"e=ndarray:float32:2x2"},
                   "3 elements, the column's shape 2x2 holds 4"});
  cases.push_back(
      {Stream().Row().Value("abc").End(), {"t=tokens:int16"}, "not a whole number of int16"});
  cases.push_back({Stream().Row().Int(1), {"x=int"}, "cut short"});
  cases.push_back({Stream().Row().Raw("\x05\x00"), {"x=int"}, "cut short"});
  cases.push_back({Stream().Raw("\x07"), {"x=int"}, "starts with 0x07"});
  cases.push_back({Stream(), {"x=int"}, "cut short"});
  cases.push_back({Stream().Row().Value("{\"a\": ").End(), {"j=json"}, "not a JSON document"});
  cases.push_back({Stream().Row().Int(1).End().Raw("x"), {"x=int"}, "after its end marker"});
  // A damaged length is refused before anything is allocated for it.
  cases.push_back({Stream().Row().Raw(Stream::Bytes(uint32_t{0xFFFFFFF0})),
                   {"x=int"},
                   "4294967280 bytes; int values are 8 bytes"});
  cases.push_back({Stream().Row().Raw(Stream::Bytes(uint32_t{0xFFFFFFF0})).Raw("abc"),
                   {"b=bytes"},
                   "cut short"});
  cases.push_back({Stream().Row().Value("\x89PNX").End(), {"i=png"}, "not a png"});
  for (auto& c : cases) {
    SCOPED_TRACE(c.says);
    out_ = "out" + std::to_string(&c - cases.data());
    auto rows = Pack(c.stream, c.flags, c.flags[0] == "label=int" ? "label" : "");
    ASSERT_FALSE(rows.has_value());
    EXPECT_NE(rows.error().ToString().find(c.says), std::string::npos) << rows.error().ToString();
  }
}

TEST_F(RowStreamTest, NotAStreamOrColumnsItCannotCarryAreRefused) {
  auto rows = Pack(Stream("PAR1 and then some"), {"x=int"});
  ASSERT_FALSE(rows.has_value());
  EXPECT_NE(rows.error().ToString().find("does not start with STKROWS1"), std::string::npos);
  rows = Pack(Stream().End(), {});
  ASSERT_FALSE(rows.has_value());
  EXPECT_NE(rows.error().ToString().find("needs its columns"), std::string::npos);
  EXPECT_FALSE(ParseRowColumns({"e=ndarray"}).has_value());  // the element type is needed
  EXPECT_FALSE(ParseRowColumns({"e"}).has_value());
}

}  // namespace
}  // namespace stoker::dataset
