// The transform's option table: every entry reads and writes its own field, and only it.
#include "decode/transform_option_table.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace stoker::decode {
namespace {

// A value of `option`'s kind that differs from `current`.
OptionValue Another(const TransformOption& option, const OptionValue& current) {
  switch (option.kind) {
    case OptionKind::kBool:
      return !std::get<bool>(current);
    case OptionKind::kUnsigned:
    case OptionKind::kByteSize:  // no transform option has this kind
      return std::get<uint64_t>(current) + 300;
    case OptionKind::kNumber:
      return std::get<double>(current) / 2 + 0.125;
    case OptionKind::kChoice:
      for (const std::string_view c : option.choices) {
        if (c != std::get<std::string>(current)) return std::string(c);
      }
      break;
    case OptionKind::kPair:
    case OptionKind::kTriple:
    case OptionKind::kSize: {
      std::vector<double> v = std::get<std::vector<double>>(current);
      for (double& x : v) x += option.kind == OptionKind::kSize ? 16 : 0.25;
      return v;
    }
  }
  ADD_FAILURE() << option.name << ": no other value";
  return current;
}

TEST(TransformOptionTableTest, NamesAreUniqueAndDocumented) {
  std::set<std::string_view> names;
  for (const TransformOption& option : TransformOptionTable()) {
    EXPECT_TRUE(names.insert(option.name).second) << option.name;
    EXPECT_FALSE(option.doc.empty()) << option.name;
    EXPECT_EQ(option.kind == OptionKind::kChoice, !option.choices.empty()) << option.name;
    EXPECT_EQ(FindTransformOption(option.name), &option);
  }
  EXPECT_EQ(FindTransformOption("no_such_option"), nullptr);
}

TEST(TransformOptionTableTest, EachOptionWritesItsOwnFieldOnly) {
  const TransformOptions defaults;
  for (const TransformOption& option : TransformOptionTable()) {
    SCOPED_TRACE(std::string(option.name));
    TransformOptions o;
    ASSERT_TRUE(option.set(o, option.get(defaults)).ok());  // writing the default changes nothing
    const OptionValue changed = Another(option, option.get(defaults));
    ASSERT_TRUE(option.set(o, changed).ok());
    const OptionValue read = option.get(o);
    if (option.kind == OptionKind::kTriple) {  // stored as float32
      for (int c = 0; c < 3; ++c) {
        EXPECT_FLOAT_EQ(std::get<std::vector<double>>(read)[c],
                        std::get<std::vector<double>>(changed)[c]);
      }
    } else {
      EXPECT_EQ(read, changed);
    }
    for (const TransformOption& other : TransformOptionTable()) {
      if (&other != &option) {
        EXPECT_EQ(other.get(o), other.get(defaults)) << other.name << " changed too";
      }
    }
  }
}

TEST(TransformOptionTableTest, SizesMustBeWholePixels) {
  const TransformOption* size = FindTransformOption("size");
  ASSERT_NE(size, nullptr);
  TransformOptions o;
  EXPECT_EQ(size->set(o, std::vector<double>{0, 10}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(size->set(o, std::vector<double>{10.5, 10}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(size->set(o, std::vector<double>{10, 1e12}).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(size->set(o, std::vector<double>{120, 160}).ok());
  EXPECT_EQ(o.output.height, 120u);
  EXPECT_EQ(o.output.width, 160u);
}

TEST(TransformOptionTableTest, ResizeZeroFollowsTheOutputSize) {
  TransformOptions o;  // 224 x 224, resize 0
  EXPECT_EQ(ResizeFor(o), 256u);
  o.output.width = 256;
  EXPECT_EQ(ResizeFor(o), 293u);  // 292.57 rounded, as round(256 * 8 / 7) in Python
  o.resize = 300;
  EXPECT_EQ(ResizeFor(o), 300u);
}

}  // namespace
}  // namespace stoker::decode
