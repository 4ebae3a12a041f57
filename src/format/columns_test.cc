#include "format/columns.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

namespace stoker::format {
namespace {

TEST(Columns, SchemaTextRoundTripsInNameOrder) {
  std::vector<Column> columns;
  for (const auto& [name, type] :
       std::vector<std::pair<std::string, std::string>>{{"label", "int"},
                                                        {"image", "jpeg"},
                                                        {"emb", "ndarray:float32?"},
                                                        {"ids", "tokens"},
                                                        {"t16", "tokens:uint16"},
                                                        {"score", "float:nan"}}) {
    auto c = ParseColumn(name, type);
    ASSERT_TRUE(c.has_value()) << c.error().ToString();
    columns.push_back(*c);
  }
  auto schema = MakeSchema(columns, "label");
  ASSERT_TRUE(schema.has_value()) << schema.error().ToString();
  const std::string text = FormatSchema(*schema);
  EXPECT_EQ(text,
            "emb:ndarray:float32? ids:tokens image:jpeg label:int score:float:nan "
            "t16:tokens:uint16 label=label");
  auto parsed = ParseSchema(text);
  ASSERT_TRUE(parsed.has_value()) << parsed.error().ToString();
  EXPECT_EQ(*parsed, *schema);
  EXPECT_EQ(parsed->Find("ids")->element, (ElementType{'i', 4}));
  EXPECT_EQ(parsed->Find("nope"), nullptr);
}

TEST(Columns, BadSchemasAreRefusedByName) {
  auto bad_name = ParseColumn("a.b", "int");
  ASSERT_FALSE(bad_name.has_value());
  EXPECT_NE(bad_name.error().message().find("'a.b'"), std::string::npos);
  EXPECT_FALSE(ParseColumn("__key__", "str").has_value());
  EXPECT_FALSE(ParseColumn("x", "integer").has_value());
  EXPECT_FALSE(ParseColumn("x", "tokens:float32").has_value());
  EXPECT_FALSE(ParseColumn("x", "str:nan").has_value());
  EXPECT_FALSE(ParseColumn("x", "ndarray:float").has_value());
  auto x = ParseColumn("x", "str");
  ASSERT_TRUE(x.has_value());
  EXPECT_FALSE(MakeSchema({*x, *x}, "").has_value());  // twice
  EXPECT_FALSE(MakeSchema({*x}, "x").has_value());     // label not int
  EXPECT_FALSE(MakeSchema({*x}, "y").has_value());     // label not a column
  EXPECT_FALSE(ParseSchema("x:str label=x").has_value());
  EXPECT_FALSE(ParseSchema("y:str x:str").has_value());  // not canonical
  // The default element type is not written: "tokens", never "tokens:int32" (docs/format.md §9).
  EXPECT_TRUE(ParseSchema("t:tokens").has_value());
  EXPECT_TRUE(ParseSchema("t:tokens:uint16").has_value());
  auto spelled_out = ParseSchema("t:tokens:int32");
  ASSERT_FALSE(spelled_out.has_value());
  EXPECT_NE(spelled_out.error().message().find("'t:tokens'"), std::string::npos)
      << spelled_out.error().ToString();
  EXPECT_FALSE(ParseSchema("x:str  y:str").has_value());
  EXPECT_FALSE(ParseSchema("").has_value());
}

std::vector<std::byte> NpyFile(const ElementType& e, std::vector<uint64_t> shape, size_t data) {
  const std::string header = NpyHeader(e, shape);
  std::vector<std::byte> file(header.size() + data);
  std::memcpy(file.data(), header.data(), header.size());
  return file;
}

TEST(Columns, NpyHeadersAreNumpysAndParseBack) {
  const std::string header = NpyHeader({'f', 4}, std::vector<uint64_t>{3, 4});
  EXPECT_EQ(header.size() % 64, 0u);
  EXPECT_EQ(header.substr(10, 59), "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }");
  EXPECT_NE(NpyHeader({'u', 1}, std::vector<uint64_t>{5}).find("'|u1'"), std::string::npos);
  EXPECT_NE(NpyHeader({'u', 1}, std::vector<uint64_t>{5}).find("(5,)"), std::string::npos);
  EXPECT_NE(NpyHeader({'b', 1}, {}).find("'shape': ()"), std::string::npos);
  for (const auto& shape : std::vector<std::vector<uint64_t>>{{}, {7}, {2, 3}, {0, 9}, {1, 2, 3}}) {
    uint64_t count = 1;
    for (uint64_t d : shape) count *= d;
    const auto file = NpyFile({'i', 8}, shape, count * 8);
    auto layout = ParseNpy(file);
    ASSERT_TRUE(layout.has_value()) << layout.error().ToString();
    EXPECT_EQ(layout->shape, shape);
    EXPECT_EQ(layout->count, count);
    EXPECT_EQ(layout->element, (ElementType{'i', 8}));
    EXPECT_EQ(layout->data_offset % 64, 0u);
  }
}

TEST(Columns, HostileNpyIsCorruptionNotAnAllocation) {
  auto file = NpyFile({'f', 8}, {1ull << 40, 1ull << 40}, 16);  // declares 2^83 bytes
  EXPECT_FALSE(ParseNpy(file).has_value());
  file = NpyFile({'f', 8}, {4}, 31);  // one byte short
  EXPECT_FALSE(ParseNpy(file).has_value());
  file = NpyFile({'f', 8}, {4}, 32);
  EXPECT_TRUE(ParseNpy(file).has_value());
  for (size_t cut = 0; cut < 70; ++cut) {
    EXPECT_FALSE(ParseNpy(std::span(file).first(cut)).has_value()) << cut;
  }
  std::string text(reinterpret_cast<const char*>(file.data()), file.size());
  text.replace(text.find("<f8"), 3, ">f8");  // big-endian: not written by stoker
  EXPECT_FALSE(ParseNpy(std::as_bytes(std::span(text))).has_value());
}

TEST(Columns, NumbersAsText) {
  EXPECT_EQ(IntText(-12), "-12");
  EXPECT_EQ(*ParseIntText("9223372036854775807"), INT64_MAX);
  EXPECT_FALSE(ParseIntText("1.5").has_value());
  EXPECT_FALSE(ParseIntText("").has_value());
  for (double v : {0.1, 1.0, -2.5e-300, 1e300, 3.141592653589793}) {
    EXPECT_EQ(*ParseFloatText(FloatText(v)), v) << FloatText(v);
  }
  EXPECT_TRUE(std::isnan(*ParseFloatText(FloatText(NAN))));
  EXPECT_FALSE(ParseFloatText("1x").has_value());
}

// A fixed shape: "ndarray:<element>:<d1>x<d2>...", written back the same; nonsense refused.
TEST(Columns, NdarrayShapesParseAndPrintTheSame) {
  auto c = ParseColumn("img", "ndarray:uint8:224x224x3?");
  ASSERT_TRUE(c.has_value()) << c.error().ToString();
  EXPECT_EQ(c->shape, (std::vector<uint64_t>{224, 224, 3}));
  EXPECT_TRUE(c->optional);
  EXPECT_EQ(ColumnTypeText(*c), "ndarray:uint8:224x224x3?");
  EXPECT_EQ(ColumnTypeText(ParseColumn("e", "ndarray:float32:512").value()), "ndarray:float32:512");
  EXPECT_TRUE(ParseColumn("e", "ndarray:float32").value().shape.empty());
  for (const char* bad :
       {"ndarray:float32:", "ndarray:float32:0", "ndarray:float32:4x", "ndarray:float32:x4",
        "ndarray:float32:-1", "ndarray:float32:4x4:2", "ndarray:float32:2147483649",
        "ndarray:float32:1048576x1048576x2", "tokens:uint16:16", "ndarray:16"}) {
    auto r = ParseColumn("e", bad);
    ASSERT_FALSE(r.has_value()) << bad;
    EXPECT_NE(r.error().message().find("column 'e'"), std::string::npos) << r.error().ToString();
  }
  EXPECT_EQ(ShapeText(std::vector<uint64_t>{}), "()");
}

}  // namespace
}  // namespace stoker::format
