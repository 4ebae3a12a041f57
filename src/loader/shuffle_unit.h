// The shuffle unit of chunk mode: what the sampler permutes and groups into windows.
//
// A window's samples are what a batch can mix. When every chunk holds a random mix of the
// dataset (the default storage order of `stoker pack`), whole chunks are the right unit: a
// window of W chunks mixes classes like a full shuffle and every read is a whole chunk. When
// chunks hold one or two classes each (a tree packed in path order, class-ordered tar shards),
// a window of W whole chunks holds ~W classes — 26 of 1000 per batch at W = 16 — and training
// loses accuracy. The same memory then holds W x k blocks: runs of consecutive samples of 1/k
// of a chunk each, from W x k places in the dataset. Smaller blocks mix better and cost more
// read requests, so the loader picks the largest block that mixes classes within kMixingTarget
// of a full shuffle, judged from the labels in the metadata (ChooseShuffleUnit).
// Specified in docs/sampler.md.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "loader/sampler.h"
#include "stoker/dataset.h"

namespace stoker::loader {

// The unit of each sample: its chunk index (block_bytes = 0), or its block. Blocks: chunk c's
// samples in storage order (by offset), its payload P_c cut into k_c = max(1, ceil(P_c /
// block_bytes)) equal byte ranges; a sample belongs to the range its first byte falls in; blocks
// are numbered chunk by chunk. A sample's bytes are those of all its files.
std::vector<uint32_t> SampleUnits(const Dataset& dataset, uint64_t block_bytes);

// Where a sample lies: its first file's chunk and offset, and the bytes of all its files.
struct SamplePlace {
  uint32_t chunk;
  uint64_t offset;
  uint64_t bytes;
};
// The same over explicit places (chunks 0 .. chunk_count-1), e.g. a synthetic layout.
std::vector<uint32_t> SampleUnits(std::span<const SamplePlace> places, uint32_t chunk_count,
                                  uint64_t block_bytes);

// Units per window holding W chunks' worth of bytes: W for whole chunks, else
// W x ceil(mean chunk payload / block_bytes).
uint32_t UnitsPerWindow(const Dataset& dataset, uint32_t window_chunks, uint64_t block_bytes);

// The sampler of `dataset` over its units for `block_bytes` (0: whole chunks), with the window
// given in chunks (options.window_chunks) turned into units: what loaders and tools build. Its
// units are DatasetUnits (rank_metadata.h): `dataset` must outlive the sampler.
Result<Sampler> CreateSampler(const Dataset& dataset, SamplerOptions options, uint64_t block_bytes);

struct MixingEstimate {
  bool labelled = false;              // at least two classes: something to mix
  uint32_t classes = 0;               // distinct labels among the samples
  double classes_per_batch = 0;       // expected distinct labels in a batch of this order
  double full_classes_per_batch = 0;  // the same for a full shuffle
  double ratio() const {
    return full_classes_per_batch > 0 ? classes_per_batch / full_classes_per_batch : 1;
  }
};

// Expected distinct labels per batch when batches are drawn from windows of `units_per_window`
// random units (chunk mode), and under a full shuffle. A batch is a uniform sample without
// replacement of its window, so each label's chance to appear is hypergeometric; averaged over
// up to 64 windows of a fixed random unit order, weighed by their samples. Labels < 0 are
// unlabelled. O(samples).
MixingEstimate EstimateMixing(std::span<const int32_t> labels,
                              std::span<const uint32_t> sample_units, uint32_t units_per_window,
                              uint32_t batch_size);

// The loader's bar for "mixes like a full shuffle", and the blocks it tries, largest first:
// 1/k of the mean chunk payload (with 64 MiB chunks: 16 MiB down to 256 KiB), never below the
// mean sample.
inline constexpr double kMixingTarget = 0.95;
inline constexpr uint32_t kBlocksPerChunk[] = {4, 8, 16, 32, 64, 128, 256};

struct ShuffleUnit {
  uint64_t block_bytes = 0;  // 0: whole chunks
  uint32_t units_per_window = 0;
  MixingEstimate whole_chunks;  // what whole chunks would give
  MixingEstimate chosen;
  // chosen reaches kMixingTarget of a full shuffle, compared in per-mille (or nothing to mix)
  bool mixes_well = true;
};

// Whole chunks when they mix well enough; else the largest block of kBlocksPerChunk that does;
// else the smallest, with mixes_well = false.
//
// From the labels of every sample, except that whole chunks of a dataset of more than
// `estimate_samples` samples that are its files are judged from a sample of its chunks: chunks in
// a fixed random order until they hold `estimate_samples` samples, read chunk by chunk, so that a
// trainer rank of a large dataset that mixes well (what `stoker pack` writes) never reads every
// location. Windows of random chunks are windows of the sample's chunks; the full-shuffle
// reference is the sample's own classes. Chunks that each hold a few classes give a sample with
// fewer classes than the dataset, which lowers that reference, but such chunks are far below the
// target anyway (a window of W chunks holds about W classes); near the target, chunks hold many
// classes and the sample holds them all. When whole chunks fall short, blocks are chosen from
// every label, as on a small dataset.
inline constexpr uint64_t kEstimateSamples = 1u << 16;
Result<ShuffleUnit> ChooseShuffleUnit(const Dataset& dataset, uint32_t window_chunks,
                                      uint32_t batch_size,
                                      uint64_t estimate_samples = kEstimateSamples);

// An explicit block size must be 0 (whole chunks) or at least the mean sample: smaller blocks
// hold no sample each and only multiply the units. InvalidArgument otherwise.
Status ValidateBlockSize(const Dataset& dataset, uint64_t block_bytes);

// The same for an explicit block size (0: whole chunks, judged as above).
Result<ShuffleUnit> FixedShuffleUnit(const Dataset& dataset, uint32_t window_chunks,
                                     uint32_t batch_size, uint64_t block_bytes,
                                     uint64_t estimate_samples = kEstimateSamples);

// Both over an explicit layout (labels and places by sample; chunks 0 .. chunk_count-1).
struct SampleLayout {
  std::vector<int32_t> labels;
  std::vector<SamplePlace> places;
  uint32_t chunk_count = 0;
};
SampleLayout LayoutOf(const Dataset& dataset);
ShuffleUnit ChooseShuffleUnit(const SampleLayout& layout, uint32_t window_chunks,
                              uint32_t batch_size);
ShuffleUnit FixedShuffleUnit(const SampleLayout& layout, uint32_t window_chunks,
                             uint32_t batch_size, uint64_t block_bytes);
// UnitsPerWindow over a layout.
uint32_t UnitsPerWindow(const SampleLayout& layout, uint32_t window_chunks, uint64_t block_bytes);

// Each sample's label (-1: none), from the metadata.
std::vector<int32_t> SampleLabels(const Dataset& dataset);

}  // namespace stoker::loader
