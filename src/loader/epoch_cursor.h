// Where one rank's reading stands in its sequence of epochs: the epoch, the position in the
// epoch's global order where the current (or next) pass over this rank's share starts, the world
// size that position was planned for, and the samples yielded since. It decides how a pass's
// start and end, set_epoch and a loaded state move it (docs/sampler.md, "Resuming"); the Python
// loaders (stoker.Loader, ImageLoader, stoker.torch) each hold one and only count what they
// yield.
//
// Passes are numbered: a generator counts its samples with its pass's token, so a generator
// abandoned by a new pass, set_epoch or Load no longer moves the cursor.
//
// Thread-safety: a value; one thread at a time (a loader and its generator run on one thread).
#pragma once

#include <cstdint>

#include "stoker/status.h"

namespace stoker::loader {

class EpochCursor {
 public:
  EpochCursor(uint64_t num_samples, uint32_t world_size, bool drop_last);

  uint64_t epoch() const { return epoch_; }
  uint64_t position() const { return position_; }
  uint32_t planned_world_size() const { return planned_; }
  uint64_t yielded() const { return yielded_; }
  uint64_t pass() const { return pass_; }  // the token of the pass under way

  // Reads `epoch` next. A different epoch starts at its beginning; the current one keeps its
  // position (set_epoch(e) after loading a state saved in epoch e continues it).
  // InvalidArgument for a negative epoch (Python passes what the user gave).
  Status SetEpoch(int64_t epoch);
  // Starts a pass: folds what was yielded into the position and, when nothing of this epoch is
  // left for this rank (and SetEpoch did not choose it), moves to the next epoch. Its token.
  uint64_t BeginPass();
  // The pass `token` ran to its end: the next one reads the next epoch, planned for this world.
  void EndPass(uint64_t token);
  // The pass `token` yielded `count` more samples (ignored for an abandoned pass).
  void AddYielded(uint64_t token, uint64_t count);
  // Sets the count outright (a DataLoader worker restarts its count; a resumed one starts at
  // what it had read).
  void SetYielded(uint64_t count) { yielded_ = count; }
  // The epoch position after this rank (and every other) consumed `consumed` more samples.
  uint64_t ConsumedPosition(uint64_t consumed) const;
  // Samples this rank reads in the pass under way, or else in the next one.
  uint64_t PassSamples() const;
  // Continues from a saved (epoch, position, planned world size); InvalidArgument if one is
  // negative or the world size is not a positive 32-bit count.
  Status Load(int64_t epoch, int64_t position, int64_t planned_world_size);

  // Everything, for pickling (a DataLoader worker gets a copy).
  struct State {
    uint64_t num_samples, epoch, position, yielded, pass;
    uint32_t world_size, planned;
    bool drop_last, explicit_epoch;
  };
  State Save() const;
  static Result<EpochCursor> Restore(const State& state);

 private:
  void Commit();
  uint64_t RankCount(uint64_t position, uint32_t world_size) const;
  bool RollsOver() const;

  uint64_t num_samples_;
  uint32_t world_size_;
  bool drop_last_;
  uint64_t epoch_ = 0, position_ = 0;
  uint32_t planned_;
  uint64_t yielded_ = 0;
  bool explicit_epoch_ = false;
  uint64_t pass_ = 0;
};

}  // namespace stoker::loader
