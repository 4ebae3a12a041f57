#include "dataset/chunk_mixer.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

namespace stoker::dataset {
namespace {

// Feeds `n` samples of `bytes` each through a mixer; returns each sample's chunk (numbered in
// the order chunks are started, as the packer numbers them).
std::vector<uint32_t> Assign(ChunkMixer& mixer, uint32_t n, uint64_t bytes, bool known_total) {
  std::map<uint32_t, uint32_t> chunk_in_slot;
  uint32_t next_chunk = 0;
  std::vector<uint32_t> chunk_of;
  for (uint32_t i = 0; i < n; ++i) {
    const uint64_t remaining = known_total ? (n - i - 1) * bytes : ChunkMixer::kUnknown;
    const auto p = mixer.Place(bytes, remaining);
    for (uint32_t slot : p.full) chunk_in_slot.erase(slot);
    if (!chunk_in_slot.contains(p.slot)) chunk_in_slot[p.slot] = next_chunk++;
    chunk_of.push_back(chunk_in_slot[p.slot]);
  }
  return chunk_of;
}

TEST(ChunkMixerTest, OneOpenChunkIsInputOrder) {
  ChunkMixer mixer(1, 100, 7);
  const auto chunks = Assign(mixer, 25, 10, true);
  for (uint32_t i = 0; i < chunks.size(); ++i) EXPECT_EQ(chunks[i], i / 10) << i;
}

TEST(ChunkMixerTest, ChunksNeverOverflowAndSmallInputsGetFewChunks) {
  // 35 samples of 10 bytes into 100-byte chunks, 1024 slots allowed: 4 chunks, none over 100.
  ChunkMixer mixer(1024, 100, 1);
  const auto chunks = Assign(mixer, 35, 10, true);
  std::map<uint32_t, uint64_t> bytes;
  for (uint32_t c : chunks) bytes[c] += 10;
  EXPECT_EQ(bytes.size(), 4u);
  for (const auto& [chunk, b] : bytes) EXPECT_LE(b, 100u) << chunk;
}

TEST(ChunkMixerTest, AnEarlyOverestimateOpensFewChunks) {
  // The packer's estimate of the input left is rough at first (tar: a header read, not its
  // data): 100x too high for 3 samples, then right. One chunk opens per sample at most.
  ChunkMixer mixer(1024, 100, 9);
  std::set<uint32_t> slots;
  for (uint32_t i = 0; i < 35; ++i) {
    const uint64_t left = (35 - i - 1) * 10;
    slots.insert(mixer.Place(10, i < 3 ? 100 * left : left).slot);
  }
  EXPECT_LE(slots.size(), 4u + 3u);
}

TEST(ChunkMixerTest, ClassOrderedInputEndsUpMixed) {
  // 100 classes of 100 samples arriving class by class; 10 samples per chunk.
  auto classes_per_chunk = [](uint32_t open) {
    ChunkMixer mixer(open, 100, 3);
    const auto chunks = Assign(mixer, 10000, 10, true);
    std::map<uint32_t, std::set<uint32_t>> classes;
    for (uint32_t i = 0; i < chunks.size(); ++i) classes[chunks[i]].insert(i / 100);
    double sum = 0;
    for (const auto& [chunk, set] : classes) sum += static_cast<double>(set.size());
    // Chunk count stays close to the minimum: no swarm of part-filled chunks at the end.
    EXPECT_LE(classes.size(), 1000u + open) << open;
    return sum / static_cast<double>(classes.size());
  };
  EXPECT_LE(classes_per_chunk(1), 1.1);
  EXPECT_GE(classes_per_chunk(64), 4.0);  // a chunk spans 64 x 10 samples = 6.4 classes
  EXPECT_GE(classes_per_chunk(1024), 8.0);
}

TEST(ChunkMixerTest, WithoutAnEstimateChunksOpenAsTheInputGrows) {
  // 1000 samples of 10 bytes into 1600-byte chunks, input size unknown (stoker.Writer): one
  // chunk opens per 100 bytes placed (1600 / kUnknownGrowth), not one per sample.
  ChunkMixer mixer(1024, 1600, 2);
  const auto chunks = Assign(mixer, 1000, 10, false);
  std::map<uint32_t, uint64_t> bytes;
  for (uint32_t c : chunks) bytes[c] += 10;
  EXPECT_GE(bytes.size(), 50u);
  EXPECT_LE(bytes.size(), 1000u * 10 / (1600 / ChunkMixer::kUnknownGrowth) + 1);
  for (const auto& [chunk, b] : bytes) EXPECT_LE(b, 1600u) << chunk;
}

TEST(ChunkMixerTest, SameSeedSamePlacement) {
  ChunkMixer a(16, 100, 42), b(16, 100, 42), c(16, 100, 43);
  const auto pa = Assign(a, 500, 7, false), pb = Assign(b, 500, 7, false),
             pc = Assign(c, 500, 7, false);
  EXPECT_EQ(pa, pb);
  EXPECT_NE(pa, pc);
}

TEST(ChunkMixerTest, ContinueKeepsASampleInOneChunk) {
  ChunkMixer mixer(8, 100, 5);
  for (int i = 0; i < 200; ++i) {
    const auto first = mixer.Place(20, ChunkMixer::kUnknown);
    const auto second = mixer.Continue(20);
    EXPECT_EQ(first.slot, second.slot);
  }
}

TEST(ChunkMixerTest, OversizedSamplesStillGetAChunk) {
  ChunkMixer mixer(4, 100, 5);
  const auto chunks = Assign(mixer, 10, 250, true);  // each bigger than a chunk: one per chunk
  EXPECT_EQ(std::set<uint32_t>(chunks.begin(), chunks.end()).size(), 10u);
}

}  // namespace
}  // namespace stoker::dataset
