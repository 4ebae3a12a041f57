#include "decode/cpu_features.h"

#include <gtest/gtest.h>

namespace stoker::decode {
namespace {

// CPUID read by hand must agree with the compiler's own check, which the wheel's toolchain cannot
// link into a shared library (cpu_features.h) but this build can.
TEST(CpuFeaturesTest, Avx2AgreesWithTheCompilersCheck) {
#if defined(__x86_64__) && defined(__GNUC__)
  EXPECT_EQ(CpuHasAvx2(), __builtin_cpu_supports("avx2") != 0);
#else
  EXPECT_FALSE(CpuHasAvx2());
#endif
}

}  // namespace
}  // namespace stoker::decode
