// `stoker pack`: turns a source (directory tree or tar shards) into a dataset version.
//
// Chunks are written and synced, then the pack's metadata segment, then the next version's
// record is created exclusively (docs/format.md §5): a crash at any instant leaves the previous
// version (or no dataset) visible, never a partial one, and of several writers appending at
// once each one's files land in a version of its own (a writer that loses a version to another
// renumbers its segment after it and tries again). On an error what no version lists is
// removed again.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/external_sorter.h"
#include "common/progress.h"
#include "dataset/source.h"
#include "stoker/storage.h"

namespace stoker::dataset {

enum class LabelPolicy : uint8_t {
  kAuto,  // tree: first directory level when every file is inside one; tar: .cls members
  kNone,
};

struct PackProgress {
  uint64_t files_done = 0, bytes_done = 0;  // payload written
  uint64_t files_total = 0;                 // 0: unknown (tar input)
  uint64_t source_bytes_done = 0, source_bytes_total = 0;
};

// One of N parts of a version that N writers pack at once (`stoker pack --part K/N`), published
// together by Commit (dataset/parts.h).
struct PartSpec {
  std::string job = "default";  // names the set of parts; several jobs may run at once
  uint32_t index = 0;           // K, 0-based
  uint32_t count = 0;           // N; 0: not known to this writer (give it to Commit)
};

struct PackOptions {
  // Target size of a chunk file. 64 MiB from the sweep in docs/benchmarks.md: large enough for
  // full-bandwidth reads from disks, network file systems and S3, small enough that a shuffle
  // window of a few dozen chunks fits in memory.
  uint64_t chunk_bytes = 64ull << 20;
  bool append = false;  // add to the existing dataset as a new version that reuses its chunks
  bool group_samples = false;  // group files sharing a basename into samples (WebDataset)
  LabelPolicy labels = LabelPolicy::kAuto;
  // Mixed storage order for streamed input (group_samples): this many chunks are filled at once,
  // each sample going to a random one (dataset/chunk_mixer.h), so that a chunk holds many
  // classes even when the input comes class by class. 1: input order. Directory trees are
  // permuted by their source instead (DirectorySourceOptions::shuffle_seed).
  uint32_t open_chunks = 1;
  uint64_t mix_seed = 0;
  // Open chunks are capped so their write buffers (S3 keeps parts in memory) fit in this.
  uint64_t mix_memory_bytes = 2ull << 30;
  // Write part K of N of the next version instead of publishing a version (Commit does).
  std::optional<PartSpec> part;
  // Optional user attributes (key, value) by file path; every path must be among the input.
  std::unordered_map<std::string, std::vector<std::pair<std::string, std::string>>> attributes;
  // A column dataset's schema, in its text form (format/columns.h; stoker.Writer): published
  // in the version record, and its label column's members (not .cls) label the samples.
  // Appending needs the dataset's schema, exactly.
  std::string columns;
  // Where the files' metadata is sorted, in bounded memory (temporary files; memory budget).
  SortOptions sort;
  // Called from the packing thread after every file and once at the end.
  std::function<void(const PackProgress&)> progress;
  // Polled after every file and before publishing: true stops the pack (Ctrl-C), which then
  // removes what it wrote, publishes nothing and returns Cancelled.
  std::function<bool()> stop_requested;

  Status Validate() const;
};

struct PackSummary {
  uint64_t version = 0;
  uint64_t files_added = 0, bytes_added = 0;
  uint64_t files_total = 0, bytes_total = 0;  // in the new version
  uint64_t chunks_added = 0, chunks_total = 0;
  // Chunks filled at once (tar input, mixed order: up to PackOptions::open_chunks, fewer where
  // write-buffer memory or file descriptors are short); 1: input order.
  uint32_t open_chunks = 1;
  uint64_t segment_bytes = 0;   // metadata this pack added
  uint64_t metadata_bytes = 0;  // of the whole new version (all its segments)
  uint64_t segments = 0;
  uint64_t classes = 0, classes_added = 0;
  uint64_t samples = 0;
  int publish_attempts = 0;  // > 1: other writers published first and this pack rebased
  std::string part_path;     // with PackOptions::part: where the part was written
  double seconds = 0;
  LeftOut left_out;  // what the source left out (PackSource::left_out)
  // With --labels auto, the input gave no labels (a tree without class directories, tar shards
  // without .cls members): said, never silent.
  bool no_labels_found = false;
  bool samples_grouped = false;  // the input's samples were grouped (tar shards, columns)
};

// The lines a pack's summary adds for people (what was left out, labels not found), each
// without a newline; none when there is nothing to say. `stoker pack` prints them on stderr,
// stoker.pack warns with them.
std::vector<std::string> PackNotes(const PackSummary& summary);

Result<PackSummary> Pack(PackSource& source, Storage& destination, const PackOptions& options);

// PackOptions::progress for a terminal (`stoker pack`, `stoker.pack`): `bar` shows files packed
// of the total when known, else MiB of input read (tar shards).
std::function<void(const PackProgress&)> ShowProgressOn(ProgressBar& bar);

// Where files land in chunks (`stoker pack --order`; the CLI's and stoker.pack's default is
// kMixed; PackOptions and DirectorySourceOptions alone give input order).
//   kMixed ("shuffled"): every chunk holds a random mix of the input, so
//     chunk-wise shuffle mixes classes with any window: a tree's files are permuted; tar input
//     is spread over kMixOpenChunks chunks filled at once (bounded memory).
//   kInput ("path"): path order for trees (class by class for ImageFolder), archive order for
//     tar input. Helps readers of class subsets; chunk-wise shuffle then needs small blocks to
//     mix classes (docs/sampler.md).
enum class StorageOrder : uint8_t { kMixed, kInput };
inline constexpr uint32_t kMixOpenChunks = 1024;
Result<StorageOrder> ParseStorageOrder(std::string_view name);  // "shuffled" | "path"
// Sets what gives `order`; `seed` chooses the mix (a tree's permutation, and with the version
// the tar mixer's choices).
void SetStorageOrder(StorageOrder order, uint64_t seed, DirectorySourceOptions* source,
                     PackOptions* pack);

}  // namespace stoker::dataset
