#include "loader/epoch_cursor.h"

#include <gtest/gtest.h>

namespace stoker::loader {
namespace {

// 10 samples over 3 ranks, padded: 4 per rank per epoch.
TEST(EpochCursor, APassThatRunsToItsEndMovesToTheNextEpoch) {
  EpochCursor c(10, 3, /*drop_last=*/false);
  EXPECT_EQ(c.PassSamples(), 4u);
  const uint64_t token = c.BeginPass();
  c.AddYielded(token, 4);
  c.EndPass(token);
  EXPECT_EQ(c.epoch(), 1u);
  EXPECT_EQ(c.position(), 0u);
  EXPECT_EQ(c.yielded(), 0u);
  EXPECT_EQ(EpochCursor(10, 3, /*drop_last=*/true).PassSamples(), 3u);
}

TEST(EpochCursor, AnAbandonedPassContinuesWhereItStopped) {
  EpochCursor c(10, 2, false);
  const uint64_t first = c.BeginPass();
  c.AddYielded(first, 2);
  EXPECT_EQ(c.ConsumedPosition(c.yielded()), 4u);  // both ranks took 2
  const uint64_t second = c.BeginPass();           // the loop was left and entered again
  EXPECT_EQ(c.epoch(), 0u);
  EXPECT_EQ(c.position(), 4u);
  EXPECT_EQ(c.PassSamples(), 3u);
  c.AddYielded(first, 5);  // the abandoned generator no longer counts
  EXPECT_EQ(c.yielded(), 0u);
  c.EndPass(first);  // nor ends anything
  EXPECT_EQ(c.epoch(), 0u);
  c.AddYielded(second, 3);
  c.EndPass(second);
  EXPECT_EQ(c.epoch(), 1u);
}

TEST(EpochCursor, SetEpochKeepsTheCurrentEpochsPositionAndStartsAnotherAtZero) {
  EpochCursor c(10, 1, false);
  ASSERT_TRUE(c.Load(3, 6, 2).ok());
  ASSERT_TRUE(c.SetEpoch(3).ok());
  EXPECT_EQ(c.position(), 6u);
  EXPECT_EQ(c.planned_world_size(), 2u);
  ASSERT_TRUE(c.SetEpoch(4).ok());
  EXPECT_EQ(c.epoch(), 4u);
  EXPECT_EQ(c.position(), 0u);
  EXPECT_EQ(c.planned_world_size(), 1u);
}

// A state saved after the epoch's last sample: the next pass reads the next epoch, unless
// set_epoch chose the finished one, which then yields nothing.
TEST(EpochCursor, AFinishedEpochRollsOverUnlessChosen) {
  EpochCursor c(10, 2, false);
  ASSERT_TRUE(c.Load(5, 10, 2).ok());
  EXPECT_EQ(c.PassSamples(), 5u);  // the next epoch's
  c.BeginPass();
  EXPECT_EQ(c.epoch(), 6u);
  ASSERT_TRUE(c.Load(5, 10, 2).ok());
  ASSERT_TRUE(c.SetEpoch(5).ok());
  EXPECT_EQ(c.PassSamples(), 0u);
  c.BeginPass();
  EXPECT_EQ(c.epoch(), 5u);
  EXPECT_FALSE(c.Load(0, 0, 0).ok());
  EXPECT_FALSE(c.Load(-1, 0, 1).ok());
  EXPECT_FALSE(c.Load(0, -3, 1).ok());
  EXPECT_FALSE(c.SetEpoch(-1).ok());
}

TEST(EpochCursor, SavedAndRestoredItIsTheSame) {
  EpochCursor c(100, 4, true);
  const uint64_t token = c.BeginPass();
  c.AddYielded(token, 7);
  auto copy = EpochCursor::Restore(c.Save());
  ASSERT_TRUE(copy.has_value());
  EXPECT_EQ(copy->yielded(), 7u);
  EXPECT_EQ(copy->pass(), token);
  EXPECT_EQ(copy->ConsumedPosition(copy->yielded()), 28u);
  EpochCursor::State bad = c.Save();
  bad.world_size = 0;
  EXPECT_FALSE(EpochCursor::Restore(bad).has_value());
}

}  // namespace
}  // namespace stoker::loader
