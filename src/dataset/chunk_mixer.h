// Where a streamed input's next sample goes when `stoker pack` mixes storage order with bounded
// memory (tar shards, which cannot be sorted or permuted in RAM at 10^9 files).
//
// Up to `open_chunks` chunks are filled at once; every sample goes to one of them, chosen
// uniformly at random, so a chunk collects a random 1/K of a stretch of the input K chunks long
// instead of one run of it. On class-ordered input (ImageNet's shards, class by class) a chunk
// then holds ~K x (samples per chunk) / (samples per class) classes instead of one or two. The
// policy only decides slots; the packer owns the chunk writers.
//
// A chunk is opened (one per sample at most) only while the open ones cannot take what remains
// of the input, so a small input gets about ceil(bytes / chunk size) chunks, not K part-filled
// ones. Without an estimate of the input left, one more chunk opens per chunk_bytes /
// kUnknownGrowth of input placed (so chunks average at least that much).
// Deterministic: the choice depends only on the seed and the sequence of calls (the packer's
// calls carry an estimate of the input left, and its K depends on the file descriptors and
// write-buffer memory it may use, so a layout is reproducible on like machines, not everywhere;
// `pack --json` reports K as open_chunks).
#pragma once

#include <cstdint>
#include <vector>

#include "common/random.h"

namespace stoker::dataset {

class ChunkMixer {
 public:
  ChunkMixer(uint32_t open_chunks, uint64_t chunk_bytes, uint64_t seed);

  static constexpr uint64_t kUnknown = ~uint64_t{0};
  static constexpr uint64_t kUnknownGrowth = 16;

  struct Placement {
    uint32_t slot = 0;  // the chunk (slot 0 .. open_chunks-1) the sample goes to
    // Slots whose chunk is full and must be finished before the sample is added; `slot` may be
    // among them (it then starts a new chunk).
    std::vector<uint32_t> full;
  };
  // Where a sample of `bytes` goes. `remaining_bytes`: an estimate of the input still to come
  // after this sample, or kUnknown.
  Placement Place(uint64_t bytes, uint64_t remaining_bytes);
  // Where the next file of the same sample goes: the chunk of the previous placement (a new one
  // in the same slot when that is full), so a sample's files stay together.
  Placement Continue(uint64_t bytes);

 private:
  struct Slot {
    bool open = false;
    uint64_t used = 0;
  };
  uint64_t Room(uint32_t slot) const;  // bytes the slot's chunk can still take

  std::vector<Slot> slots_;
  std::vector<uint32_t> live_;  // indices of open slots
  uint32_t last_ = 0;           // the slot of the latest placement
  uint64_t free_ = 0;           // the open slots' room together
  uint64_t placed_ = 0;         // bytes placed so far
  const uint64_t chunk_bytes_;
  Pcg32 rng_;
};

}  // namespace stoker::dataset
