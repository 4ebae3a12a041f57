// Which vector instructions this machine runs, for the AVX2 paths of resize, warp and output.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

namespace stoker::decode {

// Whether the CPU has AVX2 and the OS saves the YMM registers (XCR0 bits 1 and 2). Read with
// CPUID rather than __builtin_cpu_supports: the wheel's toolchain (Zig's clang) defines that
// builtin's __cpu_model in every object, which cannot be linked into a shared library.
inline bool CpuHasAvx2() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
    if ((ecx & bit_OSXSAVE) == 0 || (ecx & bit_AVX) == 0) return false;
    unsigned xcr0_low = 0, xcr0_high = 0;
    __asm__("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
    if ((xcr0_low & 0x6) != 0x6) return false;
    if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
    return (ebx & bit_AVX2) != 0;
  }();
  return has;
#else
  return false;
#endif
}

}  // namespace stoker::decode
