// FUZZ_CHECK: a property the fuzz targets assert. A failure prints the condition and traps, so
// libFuzzer records the input as a crash (an assert() would vanish under NDEBUG).
#pragma once

#include <cstdio>

#define FUZZ_CHECK(cond)                                                                 \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      __builtin_trap();                                                                  \
    }                                                                                    \
  } while (0)
