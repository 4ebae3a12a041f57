// Chunk mode's epoch order (docs/sampler.md), built from the units' sample counts, so that one
// rank's share is computed from the members of the units it reads, not from every sample.
//
// The order is defined over all units: they are permuted, dealt to per-rank streams (each next
// unit to the stream with the fewest samples), each stream's windows are shuffled one after the
// other with one generator (rank 0's windows first), the long streams' tails fill the short
// ones, and G[i·R + r] is stream r's element i. Everything but the shuffles depends only on the
// counts, and a shuffle of m samples draws from the generator the same way whatever the samples
// are. So a window nobody asked for is skipped by drawing its m - 1 numbers, and only the
// windows that hold a wanted element are read and shuffled: a rank's own, plus the tail windows
// whose samples even the streams out and the first windows that pad the last round.
//
// Use: Want() each element, NeededUnits() to fetch their members, Materialize(), then Element().
// Not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "stoker/status.h"

namespace stoker::loader {

class ChunkStreams {
 public:
  // `counts[u]`: samples of unit u (units with none take no part); `window`: units per window;
  // `unit_seed`: the seed of the unit permutation's generator.
  ChunkStreams(std::span<const uint32_t> counts, uint32_t window, uint64_t unit_seed,
               uint32_t ranks);

  uint64_t sample_count() const { return total_; }

  // Asks for element i of rank r's final stream (G[i·R + r]); i < the stream's length.
  void Want(uint32_t rank, uint64_t i);
  // The units of every window a wanted element lies in, ascending.
  std::vector<uint32_t> NeededUnits() const;

  // The samples of a unit, ascending.
  using Members = std::function<Result<std::vector<uint32_t>>(uint32_t unit)>;
  // Shuffles the wanted windows with a generator seeded by `sample_seed`, skipping the others.
  // An error from `members` is returned as is; a unit whose members disagree with its count is
  // Corruption.
  Status Materialize(uint64_t sample_seed, const Members& members);

  // Element i of rank r's final stream; only for wanted elements, after Materialize.
  uint32_t Element(uint32_t rank, uint64_t i) const;

 private:
  struct Stream {
    std::vector<uint32_t> units;                  // in reading order
    std::vector<uint64_t> window_begin;           // sample offset of each window, then the length
    std::vector<bool> wanted;                     // per window
    std::vector<std::vector<uint32_t>> shuffled;  // per window, once materialized
    uint64_t length() const { return window_begin.back(); }
  };
  // Where element i of rank r's final stream lies in the streams as dealt: (stream, index).
  std::pair<uint32_t, uint64_t> Locate(uint32_t rank, uint64_t i) const;
  size_t WindowOf(const Stream& s, uint64_t i) const;

  std::span<const uint32_t> counts_;
  uint32_t window_;
  uint32_t ranks_;
  uint64_t total_ = 0;
  std::vector<Stream> streams_;
  std::vector<uint64_t> want_;  // final length of each stream
  // The surplus of long streams, as a stack: giver g's tail elements sit at
  // [surplus_begin_[g], surplus_begin_[g + 1]), last element first; short streams take from the
  // top in rank order, rank r's deficit starting deficit_before_[r] below it.
  std::vector<uint64_t> surplus_begin_;
  std::vector<uint64_t> deficit_before_;
};

}  // namespace stoker::loader
