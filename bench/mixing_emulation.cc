// ImageNet-geometry emulation of chunk-wise shuffle: how many classes a batch mixes, and how
// many reads an epoch costs, for each storage order `stoker pack` can produce and each shuffle
// unit the loader can use — at ImageNet-1k's size, without packing 140 GB.
//
// Synthetic layout (no data, no I/O): 1,281,200 samples in 1000 classes (900 of 1,300 and 100
// of 1,112; ImageNet-1k has 1,281,167 in classes of 732-1,300), sample sizes log-normal with
// mean ~110 KB (sigma 0.5), packed into 64 MiB chunks (payload + 8-byte index entries, as
// ChunkWriter fills them) in one of these storage orders:
//   path          class by class (a tree packed with --order path; class-ordered tar shards)
//   tree-mixed    a uniform permutation (a tree packed with the default --order shuffled)
//   tar-mixed-K   class-ordered input spread over K chunks filled at once (dataset::ChunkMixer,
//                 what the default does for tar input: K = 1024 on local/shared file systems,
//                 64 on S3 with the default 2 GiB of part buffers)
// Then the real loader::Sampler (window W = 16 chunks' worth of units, seed 0, epoch 0, one
// rank) builds the epoch's order over whole chunks, blocks of a chunk, or the unit the loader
// chooses by itself (ChooseShuffleUnit), and MeasureOrder counts the distinct classes of every
// batch of 256. Output: a Markdown table (and --json FILE).
//
//   mixing_emulation [--json FILE] [--window 16] [--batch 256]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/random.h"
#include "dataset/chunk_mixer.h"
#include "loader/sampler.h"
#include "loader/shuffle_report.h"
#include "loader/shuffle_unit.h"

namespace stoker {
namespace {

constexpr uint64_t kChunkBytes = 64ull << 20;
constexpr uint64_t kChunkCapacity = kChunkBytes - 64;  // header + footer
constexpr uint64_t kIndexEntry = 8;

struct Sample {
  int32_t label;
  uint64_t bytes;
};

// ImageNet-like samples in class order.
std::vector<Sample> ClassOrderedSamples() {
  Pcg32 rng(2012);
  std::vector<Sample> samples;
  for (int32_t c = 0; c < 1000; ++c) {
    const int n = c < 100 ? 1112 : 1300;
    for (int i = 0; i < n; ++i) {
      // Box-Muller from two uniforms: log-normal, mean exp(mu + s^2/2) = 110 KB.
      const double u1 = std::max(rng.NextDouble(), 1e-12), u2 = rng.NextDouble();
      const double z = std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * u2);
      const double sigma = 0.5, mu = std::log(110e3) - sigma * sigma / 2;
      samples.push_back({c, static_cast<uint64_t>(std::exp(mu + sigma * z))});
    }
  }
  return samples;
}

// Packs `order` (indices into samples) with `open_chunks` chunks filled at once.
loader::SampleLayout Pack(const std::vector<Sample>& samples, const std::vector<uint32_t>& order,
                          uint32_t open_chunks) {
  dataset::ChunkMixer mixer(open_chunks, kChunkCapacity, 7);
  std::vector<uint32_t> chunk_in_slot(open_chunks, UINT32_MAX);
  std::vector<uint64_t> fill;  // by chunk
  loader::SampleLayout layout;
  layout.labels.resize(samples.size());
  layout.places.resize(samples.size());
  uint64_t remaining = 0;
  for (const Sample& s : samples) remaining += s.bytes + kIndexEntry;
  for (uint32_t i : order) {
    const uint64_t bytes = samples[i].bytes + kIndexEntry;
    remaining -= bytes;
    const auto p = mixer.Place(bytes, remaining);
    for (uint32_t slot : p.full) chunk_in_slot[slot] = UINT32_MAX;
    if (chunk_in_slot[p.slot] == UINT32_MAX) {
      chunk_in_slot[p.slot] = static_cast<uint32_t>(fill.size());
      fill.push_back(0);
    }
    const uint32_t chunk = chunk_in_slot[p.slot];
    layout.labels[i] = samples[i].label;
    layout.places[i] = {chunk, 32 + fill[chunk], samples[i].bytes};
    fill[chunk] += samples[i].bytes;
  }
  layout.chunk_count = static_cast<uint32_t>(fill.size());
  return layout;
}

struct Row {
  std::string storage, unit;
  uint32_t chunks = 0;
  uint64_t block_bytes = 0, reads = 0;
  double measured = 0, expected = 0, full = 0;
};

Row Measure(const std::string& storage, const loader::SampleLayout& layout, uint32_t window,
            uint32_t batch, std::optional<uint64_t> block, bool full_shuffle = false) {
  const loader::ShuffleUnit unit = block ? loader::FixedShuffleUnit(layout, window, batch, *block)
                                         : loader::ChooseShuffleUnit(layout, window, batch);
  const std::vector<uint32_t> units =
      loader::SampleUnits(layout.places, layout.chunk_count, unit.block_bytes);
  loader::SamplerOptions o;
  o.mode = full_shuffle ? loader::ShuffleMode::kFull : loader::ShuffleMode::kChunk;
  o.window_chunks = unit.units_per_window;
  auto sampler = loader::Sampler::Create(units, 1, o).value();
  std::vector<uint32_t> chunks(layout.places.size());
  for (size_t s = 0; s < chunks.size(); ++s) chunks[s] = layout.places[s].chunk;
  const auto m =
      loader::MeasureOrder(sampler.GlobalOrder(0, 1).value(), layout.labels, chunks, batch);
  Row r;
  r.storage = storage;
  r.chunks = layout.chunk_count;
  r.block_bytes = full_shuffle ? 0 : unit.block_bytes;
  r.unit = full_shuffle ? "full shuffle (reference)"
           : block      ? (*block ? fmt::format("blocks of {} KiB", *block >> 10) : "whole chunks")
                        : fmt::format("loader default: {}",
                                 unit.block_bytes
                                          ? fmt::format("blocks of {} KiB", unit.block_bytes >> 10)
                                          : "whole chunks");
  std::vector<uint32_t> distinct(units);
  std::sort(distinct.begin(), distinct.end());
  r.reads =
      full_shuffle
          ? layout.places.size()
          : static_cast<uint64_t>(std::unique(distinct.begin(), distinct.end()) - distinct.begin());
  r.measured = m.batch_distinct_classes;
  r.expected = full_shuffle ? unit.chosen.full_classes_per_batch : unit.chosen.classes_per_batch;
  r.full = unit.chosen.full_classes_per_batch;
  return r;
}

}  // namespace
}  // namespace stoker

// NOLINTNEXTLINE(bugprone-exception-escape): a bad flag ends the benchmark; terminate names it
int main(int argc, char** argv) {
  using namespace stoker;
  std::string json_path;
  uint32_t window = 16, batch = 256;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--json"))
      json_path = argv[i + 1];
    else if (!std::strcmp(argv[i], "--window"))
      window = static_cast<uint32_t>(std::stoul(argv[i + 1]));
    else if (!std::strcmp(argv[i], "--batch"))
      batch = static_cast<uint32_t>(std::stoul(argv[i + 1]));
  }
  const std::vector<Sample> samples = ClassOrderedSamples();
  uint64_t total = 0;
  for (const Sample& s : samples) total += s.bytes;
  std::fprintf(stderr, "%zu samples, mean %.1f KB, %.1f GB\n", samples.size(),
               total / 1e3 / samples.size(), total / 1e9);
  std::vector<uint32_t> in_order(samples.size());
  for (uint32_t i = 0; i < in_order.size(); ++i) in_order[i] = i;
  std::vector<uint32_t> permuted = in_order;
  Pcg32 rng(1);
  loader::Shuffle(std::span<uint32_t>(permuted), rng);

  std::vector<Row> rows;
  const auto path = Pack(samples, in_order, 1);
  rows.push_back(Measure("path", path, window, batch, 0, /*full_shuffle=*/true));
  rows.push_back(Measure("path", path, window, batch, 0));
  for (uint64_t block : {4ull << 20, 1ull << 20, 512ull << 10, 256ull << 10}) {
    rows.push_back(Measure("path", path, window, batch, block));
  }
  rows.push_back(Measure("path", path, window, batch, std::nullopt));
  const auto tree = Pack(samples, permuted, 1);
  rows.push_back(Measure("tree-mixed", tree, window, batch, 0));
  rows.push_back(Measure("tree-mixed", tree, window, batch, std::nullopt));
  for (uint32_t k : {64u, 256u, 1024u}) {
    const auto tar = Pack(samples, in_order, k);
    const std::string name = fmt::format("tar-mixed-{}", k);
    rows.push_back(Measure(name, tar, window, batch, 0));
    rows.push_back(Measure(name, tar, window, batch, std::nullopt));
  }

  std::printf(
      "| storage order | chunks | shuffle unit (W = %u chunks' worth) | classes / batch of %u "
      "(measured) | expected | of full shuffle | reads / epoch | mean read |\n",
      window, batch);
  std::printf("|---|---|---|---|---|---|---|---|\n");
  nlohmann::json out = nlohmann::json::array();
  for (const Row& r : rows) {
    const double mean_read = static_cast<double>(total) / static_cast<double>(r.reads);
    std::printf("| %s | %u | %s | %.1f | %.1f | %.0f %% | %s | %s |\n", r.storage.c_str(), r.chunks,
                r.unit.c_str(), r.measured, r.expected, 100 * r.measured / r.full,
                fmt::format("{:L}", r.reads).c_str(),
                mean_read >= 1 << 20 ? fmt::format("{:.1f} MiB", mean_read / (1 << 20)).c_str()
                                     : fmt::format("{:.0f} KiB", mean_read / 1024).c_str());
    out.push_back({{"storage", r.storage},
                   {"unit", r.unit},
                   {"chunks", r.chunks},
                   {"block_bytes", r.block_bytes},
                   {"reads_per_epoch", r.reads},
                   {"classes_per_batch", r.measured},
                   {"expected_classes_per_batch", r.expected},
                   {"full_shuffle_classes_per_batch", r.full}});
  }
  if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
  return 0;
}
