// stoker's own specified PRNG: PCG32 (PCG-XSH-RR 64/32, O'Neill 2014) with the reference
// constants. Anything persisted or replayed (sample order, placement, augmentation, random
// names, fault injection) draws from this, never from std:: distributions, whose output differs
// between standard libraries. The exact algorithm is pinned by golden-value tests.
// Not thread-safe: one generator per thread or guarded by the caller.
#pragma once

#include <cstdint>
#include <initializer_list>

namespace stoker {

// One step of SplitMix64 (Steele, Lea, Flood 2014): advances `state`, returns a mixed value.
inline uint64_t SplitMix64(uint64_t& state) {
  state += 0x9E3779B97F4A7C15ull;
  uint64_t z = state;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A generator seed derived from several inputs (seed, epoch, ...): s = first input, then for
// each further input x: s = SplitMix64(s) ^ x; the result is SplitMix64(s). Specified in
// docs/sampler.md; the sampler and the augmentations both derive their seeds this way.
inline uint64_t DeriveSeed(std::initializer_list<uint64_t> inputs) {
  uint64_t state = 0;
  bool first = true;
  for (uint64_t x : inputs) {
    state = first ? x : SplitMix64(state) ^ x;
    first = false;
  }
  return SplitMix64(state);
}

class Pcg32 {
 public:
  explicit Pcg32(uint64_t seed, uint64_t stream = 0x14057b7ef767814fULL) {
    inc_ = (stream << 1u) | 1u;
    state_ = 0;
    Next();
    state_ += seed;
    Next();
  }

  uint32_t Next() {
    const uint64_t old = state_;
    state_ = old * 6364136223846793005ULL + inc_;
    const auto xorshifted = static_cast<uint32_t>(((old >> 18u) ^ old) >> 27u);
    const auto rot = static_cast<uint32_t>(old >> 59u);
    return (xorshifted >> rot) | (xorshifted << ((-rot) & 31u));
  }

  uint64_t Next64() { return (uint64_t{Next()} << 32) | Next(); }

  // Uniform in [0, bound) without modulo bias (Lemire's multiply-and-reject, 64-bit product).
  uint64_t Below(uint64_t bound) {
    if (bound <= 1) return 0;
    if (bound <= 0xFFFFFFFFull) {
      const auto b32 = static_cast<uint32_t>(bound);
      uint64_t m = uint64_t{Next()} * b32;
      auto low = static_cast<uint32_t>(m);
      if (low < b32) {
        const uint32_t threshold = (0u - b32) % b32;
        while (low < threshold) {
          m = uint64_t{Next()} * b32;
          low = static_cast<uint32_t>(m);
        }
      }
      return m >> 32;
    }
    // Rare: bounds above 2^32 use rejection on 64-bit draws.
    const uint64_t limit = UINT64_MAX - (UINT64_MAX % bound);
    uint64_t x;
    do {
      x = Next64();
    } while (x >= limit);
    return x % bound;
  }

  // Uniform in [0, 1) with 53 bits of precision.
  double NextDouble() { return static_cast<double>(Next64() >> 11) * 0x1.0p-53; }

 private:
  uint64_t state_;
  uint64_t inc_;
};

}  // namespace stoker
