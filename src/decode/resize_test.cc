#include <gtest/gtest.h>
TEST(ResizePlaceholder, Builds) {}
