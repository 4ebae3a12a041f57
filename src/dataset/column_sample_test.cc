// Dataset::ReadColumns: a column dataset's samples as typed values, each column's file decoded
// and checked in C++ (what Python's ds[i] returns, without Python).
#include "dataset/column_sample.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "dataset/packer.h"
#include "dataset/stream_pack.h"
#include "format/columns.h"
#include "stoker/dataset.h"
#include "storage/posix_storage.h"
#include "testing/test_util.h"

namespace stoker::dataset {
namespace {

using Values = std::map<std::string, std::string>;  // column -> its file's bytes

// Every column type; `note` is optional, `label` labels the samples.
std::string SchemaText() {
  std::vector<format::Column> columns;
  for (const auto& [name, type] :
       std::vector<std::pair<std::string, std::string>>{{"caption", "str"},
                                                        {"count", "int"},
                                                        {"emb", "ndarray:float32:2x2"},
                                                        {"image", "jpeg"},
                                                        {"label", "int"},
                                                        {"meta", "json"},
                                                        {"note", "str?"},
                                                        {"raw", "bytes"},
                                                        {"score", "float"},
                                                        {"tok", "tokens:int16"}}) {
    columns.push_back(*format::ParseColumn(name, type));
  }
  return format::FormatSchema(*format::MakeSchema(std::move(columns), "label"));
}

const ElementType kFloat32{'f', 4};
const ElementType kInt16{'i', 2};

std::string Emb(std::vector<float> values) {
  const std::vector<uint64_t> shape = {2, 2};
  std::string out = format::NpyHeader(kFloat32, shape);
  out.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  return out;
}

std::string Tokens(std::vector<int16_t> tokens) {
  return {reinterpret_cast<const char*>(tokens.data()), tokens.size() * sizeof(int16_t)};
}

Values GoodSample() {
  return {{"caption", "a cat"},
          {"count", "-12"},
          {"emb", Emb({1, 2, 3, 4})},
          {"image", "\xff\xd8\xff not really a JPEG"},
          {"label", "3"},
          {"meta", R"({"k":[1,2]})"},
          {"note", "caf\xc3\xa9"},
          {"raw", std::string("\x00\x01", 2)},
          {"score", "0.5"},
          {"tok", Tokens({7, -1, 300})}};
}

// A column dataset of `samples` (keys "w/1000000", "w/1000001", ...) in `dir`.
void WriteColumns(const std::string& dir, const std::vector<Values>& samples) {
  PackOptions options;
  options.group_samples = true;
  options.columns = SchemaText();
  auto pack = StreamPack::Start(storage::NewPosixStorage(dir), options, 1 << 20);
  ASSERT_TRUE(pack.has_value()) << pack.error().ToString();
  for (size_t k = 0; k < samples.size(); ++k) {
    std::vector<SourceItem> items;
    for (const auto& [column, bytes] : samples[k]) {
      SourceItem item;
      item.path = format::ColumnPath("w/" + std::to_string(1000000 + k), column);
      const auto b = test::AsBytes(bytes);
      item.bytes.assign(b.begin(), b.end());
      items.push_back(std::move(item));
    }
    ASSERT_TRUE((*pack)->Add(std::move(items)).ok());
  }
  auto summary = (*pack)->Finish();
  ASSERT_TRUE(summary.has_value()) << summary.error().ToString();
}

std::unique_ptr<Dataset> Open(const std::string& dir) {
  auto ds = Dataset::Open(dir);
  EXPECT_TRUE(ds.has_value()) << ds.error().ToString();
  return ds ? std::move(*ds) : nullptr;
}

TEST(ReadColumns, ReadsEveryColumnTypeAsItsTypedValue) {
  test::TempDir dir;
  WriteColumns(dir.path(), {GoodSample()});
  auto ds = Open(dir.path());
  ASSERT_NE(ds, nullptr);
  auto columns = ds->ReadColumns(0);
  ASSERT_TRUE(columns.has_value()) << columns.error().ToString();
  std::map<std::string, const ColumnEntry*> by_name;
  std::vector<std::string> names;
  for (const ColumnEntry& c : *columns) {
    by_name[c.name] = &c;
    names.push_back(c.name);
    ASSERT_TRUE(c.value.has_value()) << c.name;
    EXPECT_EQ(test::AsString(c.data), GoodSample().at(c.name)) << c.name;  // the file's bytes
  }
  EXPECT_EQ(names, (std::vector<std::string>{"caption", "count", "emb", "image", "label", "meta",
                                             "note", "raw", "score", "tok"}));
  EXPECT_EQ(*by_name["caption"]->value, ColumnValue(std::string("a cat")));
  EXPECT_EQ(*by_name["count"]->value, ColumnValue(int64_t{-12}));
  EXPECT_EQ(*by_name["image"]->value, ColumnValue(BytesValue{}));
  EXPECT_EQ(*by_name["label"]->value, ColumnValue(int64_t{3}));
  EXPECT_EQ(*by_name["meta"]->value, ColumnValue(JsonValue{R"({"k":[1,2]})"}));
  EXPECT_EQ(*by_name["note"]->value, ColumnValue(std::string("caf\xc3\xa9")));
  EXPECT_EQ(*by_name["raw"]->value, ColumnValue(BytesValue{}));
  EXPECT_EQ(*by_name["score"]->value, ColumnValue(0.5));
  EXPECT_EQ(*by_name["tok"]->value, ColumnValue(TokensValue{kInt16, 3}));

  // The array lies in the file's bytes after the .npy header.
  const ColumnEntry& emb = *by_name["emb"];
  const auto& array = std::get<NdarrayValue>(*emb.value);
  EXPECT_EQ(array.element, kFloat32);
  EXPECT_EQ(array.shape, (std::vector<uint64_t>{2, 2}));
  EXPECT_EQ(array.count, 4u);
  EXPECT_EQ(array.offset, format::NpyHeader(kFloat32, array.shape).size());
  float elements[4];
  std::memcpy(elements, emb.data.data() + array.offset, sizeof(elements));
  EXPECT_EQ(elements[3], 4.0f);
  EXPECT_EQ(*ds->SampleLabel(0), 3);
}

TEST(ReadColumns, AnOptionalColumnWithoutAValueHasNone) {
  test::TempDir dir;
  Values without_note = GoodSample();
  without_note.erase("note");
  WriteColumns(dir.path(), {GoodSample(), without_note});
  auto ds = Open(dir.path());
  ASSERT_NE(ds, nullptr);
  auto columns = ds->ReadColumns(1);
  ASSERT_TRUE(columns.has_value()) << columns.error().ToString();
  ASSERT_EQ(columns->size(), 10u);
  for (const ColumnEntry& c : *columns) {
    EXPECT_EQ(c.value.has_value(), c.name != "note") << c.name;
    if (c.name == "note") {
      EXPECT_TRUE(c.data.empty());
    }
  }
  EXPECT_EQ(*(*columns)[0].value, ColumnValue(std::string("a cat")));  // the others as ever
}

TEST(ReadColumns, AValueNotOfItsColumnsTypeIsCorruptionNamingTheFile) {
  test::TempDir dir;
  std::vector<std::pair<std::string, std::string>> bad = {
      {"count", "twelve"},                       // not an int
      {"caption", "\xff\xfe"},                   // not UTF-8
      {"meta", "\xc3("},                         // not UTF-8 either
      {"score", "half"},                         // not a float
      {"emb", Emb({1, 2, 3, 4}).substr(0, 70)},  // a truncated .npy
      {"tok", "abc"},                            // 3 bytes of int16 tokens
      {"emb", format::NpyHeader(kFloat32, std::vector<uint64_t>{4}) + std::string(16, '\0')},
  };
  std::vector<Values> samples;
  for (const auto& [column, bytes] : bad) {
    samples.push_back(GoodSample());
    samples.back()[column] = bytes;
  }
  WriteColumns(dir.path(), samples);
  auto ds = Open(dir.path());
  ASSERT_NE(ds, nullptr);
  const std::vector<std::string> why = {"not an int value: 'twelve'",
                                        "not UTF-8 text",
                                        "not UTF-8 text",
                                        "not a float value: 'half'",
                                        "not an .npy array written by stoker",
                                        "3 bytes is not a whole number of int16 tokens",
                                        "shape 4, but the column holds 2x2"};
  for (uint64_t k = 0; k < bad.size(); ++k) {
    auto columns = ds->ReadColumns(k);
    ASSERT_FALSE(columns.has_value()) << bad[k].first;
    EXPECT_EQ(columns.error().code(), StatusCode::kCorruption);
    const std::string path = format::ColumnPath("w/" + std::to_string(1000000 + k), bad[k].first);
    EXPECT_TRUE(columns.error().message().starts_with(path + ": " + why[k]))
        << columns.error().ToString();
  }
}

TEST(ReadColumns, AMissingValueOfAColumnThatIsNotOptionalIsCorruption) {
  test::TempDir dir;
  Values without_caption = GoodSample();
  without_caption.erase("caption");
  WriteColumns(dir.path(), {without_caption});
  auto ds = Open(dir.path());
  ASSERT_NE(ds, nullptr);
  auto columns = ds->ReadColumns(0);
  ASSERT_FALSE(columns.has_value());
  EXPECT_EQ(columns.error().code(), StatusCode::kCorruption);
  EXPECT_EQ(columns.error().message(),
            "sample w/1000000.count: no value for column 'caption', which is not optional");
}

TEST(ReadColumns, ADatasetWithoutColumnsOrASampleOutOfRangeIsInvalidArgument) {
  test::TempDir dir;
  WriteColumns(dir.path(), {GoodSample()});
  auto ds = Open(dir.path());
  ASSERT_NE(ds, nullptr);
  EXPECT_EQ(ds->ReadColumns(1).error().code(), StatusCode::kInvalidArgument);

  test::TempDir plain;
  test::Tree tree;
  tree.files["a/x.txt"] = "x";
  auto source = test::TreeSource(tree);
  ASSERT_TRUE(Pack(*source, *storage::NewPosixStorage(plain.path()), {}).has_value());
  auto files = Open(plain.path());
  ASSERT_NE(files, nullptr);
  auto columns = files->ReadColumns(0);
  ASSERT_FALSE(columns.has_value());
  EXPECT_EQ(columns.error().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(columns.error().message().find("not a column dataset"), std::string::npos);
}

TEST(SplitSampleKey, SplitsAtTheFirstDotOfTheName) {
  EXPECT_EQ(SplitSampleKey("d.x/k.tar.cls"),
            (std::pair<std::string, std::string>{"d.x/k", "tar.cls"}));
  EXPECT_EQ(SplitSampleKey("d/k"), (std::pair<std::string, std::string>{"d/k", ""}));
}

}  // namespace
}  // namespace stoker::dataset
