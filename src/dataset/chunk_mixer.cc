#include "dataset/chunk_mixer.h"

#include <algorithm>

namespace stoker::dataset {

ChunkMixer::ChunkMixer(uint32_t open_chunks, uint64_t chunk_bytes, uint64_t seed)
    : slots_(std::max(1u, open_chunks)), chunk_bytes_(chunk_bytes), rng_(seed) {}

uint64_t ChunkMixer::Room(uint32_t slot) const {
  return chunk_bytes_ - std::min(chunk_bytes_, slots_[slot].used);
}

ChunkMixer::Placement ChunkMixer::Place(uint64_t bytes, uint64_t remaining_bytes) {
  const uint64_t needed =
      remaining_bytes == kUnknown ? kUnknown : bytes + std::min(remaining_bytes, kUnknown - bytes);
  // Open a chunk when the open ones cannot take what remains (and a slot is free). One per
  // sample at most: the estimate of what remains is rough early on (a few bytes of input read),
  // and a chunk opened too many ends part-filled, while one opened a little late costs nothing.
  // With no estimate (input from Python: stoker.Writer), the open chunks grow with the input
  // seen: one more per chunk_bytes / kUnknownGrowth placed, so a small input still gets a few
  // well-filled chunks, not one per sample.
  const bool room_short = needed == kUnknown
                              ? placed_ >= live_.size() * (chunk_bytes_ / kUnknownGrowth)
                              : free_ < needed;
  if (live_.size() < slots_.size() && (room_short || live_.empty())) {
    uint32_t s = 0;
    while (slots_[s].open) ++s;
    slots_[s] = {true, 0};
    live_.push_back(s);
    free_ += chunk_bytes_;
  }
  Placement p;
  while (true) {
    p.slot = live_[rng_.Below(live_.size())];
    Slot& slot = slots_[p.slot];
    if (slot.used == 0 || slot.used + bytes <= chunk_bytes_) break;
    // Full. Retire the slot while the others can take the rest; otherwise it starts anew.
    p.full.push_back(p.slot);
    free_ -= Room(p.slot);
    if (live_.size() > 1 && needed != kUnknown && free_ >= needed) {
      slot = {};
      live_.erase(std::find(live_.begin(), live_.end(), p.slot));
      continue;
    }
    slot.used = 0;
    free_ += chunk_bytes_;
    break;
  }
  free_ -= std::min(bytes, Room(p.slot));
  slots_[p.slot].used += bytes;
  placed_ += bytes;
  last_ = p.slot;
  return p;
}

ChunkMixer::Placement ChunkMixer::Continue(uint64_t bytes) {
  if (live_.empty()) return Place(bytes, kUnknown);
  Placement p;
  p.slot = last_;
  Slot& slot = slots_[p.slot];
  if (slot.used > 0 && slot.used + bytes > chunk_bytes_) {
    p.full.push_back(p.slot);
    free_ += chunk_bytes_ - Room(p.slot);
    slot.used = 0;
  }
  free_ -= std::min(bytes, Room(p.slot));
  slot.used += bytes;
  placed_ += bytes;
  return p;
}

}  // namespace stoker::dataset
