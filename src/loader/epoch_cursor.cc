#include "loader/epoch_cursor.h"

#include <algorithm>
#include <cstdint>

#include <fmt/format.h>

namespace stoker::loader {

EpochCursor::EpochCursor(uint64_t num_samples, uint32_t world_size, bool drop_last)
    : num_samples_(num_samples),
      world_size_(std::max<uint32_t>(1, world_size)),
      drop_last_(drop_last),
      planned_(std::max<uint32_t>(1, world_size)) {}

Status EpochCursor::SetEpoch(int64_t epoch) {
  if (epoch < 0) return Status::InvalidArgument("epoch must be >= 0");
  Commit();
  if (static_cast<uint64_t>(epoch) != epoch_) {
    epoch_ = static_cast<uint64_t>(epoch);
    position_ = 0;
    planned_ = world_size_;
  }
  explicit_epoch_ = true;
  ++pass_;
  return Status::OK();
}

uint64_t EpochCursor::ConsumedPosition(uint64_t consumed) const {
  return std::min(num_samples_, position_ + consumed * world_size_);
}

void EpochCursor::Commit() {
  position_ = ConsumedPosition(yielded_);
  yielded_ = 0;
}

uint64_t EpochCursor::RankCount(uint64_t position, uint32_t world_size) const {
  const uint64_t remaining = num_samples_ > position ? num_samples_ - position : 0;
  return drop_last_ ? remaining / world_size : (remaining + world_size - 1) / world_size;
}

// Nothing of this epoch is left for this rank, and SetEpoch did not ask for this epoch.
bool EpochCursor::RollsOver() const {
  return !explicit_epoch_ && num_samples_ > 0 && RankCount(position_, world_size_) == 0;
}

uint64_t EpochCursor::PassSamples() const {
  if (yielded_ == 0 && RollsOver()) return RankCount(0, world_size_);
  return RankCount(position_, world_size_);
}

uint64_t EpochCursor::BeginPass() {
  Commit();
  if (RollsOver()) {
    ++epoch_;
    position_ = 0;
    planned_ = world_size_;
  }
  explicit_epoch_ = false;
  return ++pass_;
}

void EpochCursor::EndPass(uint64_t token) {
  if (token != pass_) return;
  ++epoch_;
  position_ = 0;
  planned_ = world_size_;
  yielded_ = 0;
}

void EpochCursor::AddYielded(uint64_t token, uint64_t count) {
  if (token == pass_) yielded_ += count;
}

Status EpochCursor::Load(int64_t epoch, int64_t position, int64_t planned_world_size) {
  if (epoch < 0 || position < 0 || planned_world_size < 1 || planned_world_size > UINT32_MAX) {
    return Status::InvalidArgument(
        fmt::format("bad loader state: epoch={} position={} planned_world_size={}", epoch, position,
                    planned_world_size));
  }
  epoch_ = static_cast<uint64_t>(epoch);
  position_ = static_cast<uint64_t>(position);
  planned_ = static_cast<uint32_t>(planned_world_size);
  yielded_ = 0;
  explicit_epoch_ = false;
  ++pass_;
  return Status::OK();
}

EpochCursor::State EpochCursor::Save() const {
  return {num_samples_, epoch_,   position_,  yielded_,       pass_,
          world_size_,  planned_, drop_last_, explicit_epoch_};
}

Result<EpochCursor> EpochCursor::Restore(const State& s) {
  if (s.world_size < 1 || s.planned < 1) {
    return Err(Status::InvalidArgument("bad EpochCursor state: a world size of 0"));
  }
  EpochCursor c(s.num_samples, s.world_size, s.drop_last);
  c.epoch_ = s.epoch;
  c.position_ = s.position;
  c.yielded_ = s.yielded;
  c.pass_ = s.pass;
  c.planned_ = s.planned;
  c.explicit_epoch_ = s.explicit_epoch;
  return c;
}

}  // namespace stoker::loader
