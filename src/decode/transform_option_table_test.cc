// The transform's option table: every entry reads and writes its own field, and only it.
#include "decode/transform_option_table.h"

#include <gtest/gtest.h>

#include <string>

#include "testing/option_table_checks.h"

namespace stoker::decode {
namespace {

TEST(TransformOptionTableTest, NamesAreUniqueAndDocumented) {
  test::ExpectNamesUniqueAndDocumented<TransformOptions>(TransformOptionTable(),
                                                         FindTransformOption);
}

TEST(TransformOptionTableTest, EachOptionWritesItsOwnFieldOnly) {
  // mean and std are stored as float32: equal to float precision.
  test::ExpectEachOptionWritesItsOwnFieldOnly<TransformOptions>(
      TransformOptionTable(), [](const OptionValue& read, const OptionValue& written) {
        const auto* r = std::get_if<std::vector<double>>(&read);
        const auto* w = std::get_if<std::vector<double>>(&written);
        if (r == nullptr || w == nullptr || r->size() != 3) {
          EXPECT_EQ(read, written);
          return;
        }
        for (int c = 0; c < 3; ++c) EXPECT_FLOAT_EQ((*r)[c], (*w)[c]);
      });
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

// center_crop off: the whole image is the box (Resize((h, w))), and `resize`, which only the
// centre crop uses, may be smaller than the output.
TEST(TransformOptionTableTest, WithoutCenterCropTheWholeImageIsResized) {
  TransformOptions o;
  o.train = false;
  o.resize = 100;
  EXPECT_FALSE(o.Validate().ok());  // Resize(100) then CenterCrop(224): refused
  o.center_crop = false;
  EXPECT_TRUE(o.Validate().ok());
  const SampleParams p = ChooseParams(o, 470, 390, 7);
  EXPECT_EQ(p.box.x0, 0);
  EXPECT_EQ(p.box.y0, 0);
  EXPECT_EQ(p.box.x1, 470);
  EXPECT_EQ(p.box.y1, 390);
  EXPECT_FALSE(p.flip);
  o.center_crop = true;
  o.resize = 256;
  EXPECT_LT(ChooseParams(o, 470, 390, 7).box.width(), 470);  // the centre crop's
}

}  // namespace
}  // namespace stoker::decode
