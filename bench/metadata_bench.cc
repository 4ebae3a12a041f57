// Metadata benchmark: one snapshot for an ImageNet-shaped namespace (1.28 M files in 1000 class
// directories) against the same paths as files on the local file system.
//
// Measures (docs/benchmarks.md §1): snapshot build time and bytes per file, Dataset::Open (warm
// page cache; cold after drop_caches), Snapshot::FindFile on random existing paths with 1 and 2
// threads, and per-lookup fstatat() (+ openat()/close()) on the unpacked tree, warm and cold.
//
// The snapshot is built straight from synthetic entries that all point at one tiny chunk: the
// metadata path never touches chunk bytes, so packing 1.28 M real files would only cost time.
//
//   metadata_bench [--dataset_dir=D] [--fs_tree=T] [--files=N] [--cold] [benchmark flags]
//   metadata_bench --create_fs_tree=T [--files=N]      (one-time: T gets N empty files)
//
// Driver: bench/run_metadata.py (creates the tree when missing, runs this, prints the tables).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "common/random.h"
#include "dataset/format1.h"
#include "format/chunk.h"
#include "format/snapshot.h"
#include "format/snapshot_builder.h"
#include "stoker/dataset.h"
#include "stoker/storage.h"

namespace stoker {
namespace {

constexpr uint32_t kClasses = 1000;
constexpr uint32_t kImageNetTrainFiles = 1281167;
constexpr char kTreeStamp[] = ".stoker-fs-tree";

struct Flags {
  std::string dataset_dir = "/var/tmp/stoker-bench/metadata/dataset";
  std::string fs_tree;         // empty: no file-system benchmarks
  std::string create_fs_tree;  // set: only create this tree, then exit
  uint32_t files = kImageNetTrainFiles;
  bool cold = false;              // drop caches (needs root) for the cold variants
  uint32_t cold_lookups = 20000;  // per cold iteration: a small sample, so most of it is cold
};
Flags g_flags;

// Everything the benchmarks share, prepared once in main() before any of them runs.
struct Shared {
  std::vector<std::string> paths;  // in generation (class, file) order
  std::vector<int32_t> labels;
  std::vector<std::string> lookups;  // every path once, in a random order
  format::SnapshotSpec spec;         // what BuildSnapshot gets (copied per iteration)
  uint64_t snapshot_bytes = 0;
  std::unique_ptr<format::Snapshot> dataset;  // opened once for the lookup benchmarks
  // The same snapshot copied into anonymous memory: [0] 4 KiB pages, [1] transparent huge pages.
  std::unique_ptr<format::Snapshot> anon[2];
  int fs_root = -1;  // directory fd of --fs_tree
};
Shared* g = nullptr;

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "metadata_bench: %s\n", message.c_str());
  std::exit(1);
}

// A random permutation of [0, n) from the project's PRNG (deterministic across libraries).
std::vector<uint32_t> Permutation(uint32_t n, uint64_t seed) {
  std::vector<uint32_t> p(n);
  for (uint32_t i = 0; i < n; ++i) p[i] = i;
  Pcg32 rng(seed);
  for (uint32_t i = n; i > 1; --i) std::swap(p[i - 1], p[rng.Below(i)]);
  return p;
}

// ImageNet train layout: train/n01440764/n01440764_10026.JPEG. Synset ids are distinct random
// 8-digit numbers, file numbers distinct in [1, 16000) per class, like the real ones.
void MakePaths(uint32_t files, std::vector<std::string>* paths, std::vector<int32_t>* labels) {
  Pcg32 rng(20261122);
  std::set<uint32_t> synsets;
  while (synsets.size() < kClasses) {
    synsets.insert(1000000 + static_cast<uint32_t>(rng.Below(9000000)));
  }
  paths->clear();
  paths->reserve(files);
  labels->clear();
  labels->reserve(files);
  int32_t label = 0;
  for (uint32_t synset : synsets) {
    const uint32_t count = files / kClasses + (static_cast<uint32_t>(label) < files % kClasses);
    const std::vector<uint32_t> numbers = Permutation(16000, rng.Next64());
    for (uint32_t k = 0, taken = 0; taken < count; ++k) {
      if (numbers[k] == 0) continue;
      paths->push_back(fmt::format("train/n{:08d}/n{:08d}_{}.JPEG", synset, synset, numbers[k]));
      labels->push_back(label);
      ++taken;
    }
    ++label;
  }
}

// Snapshot bytes in anonymous memory, optionally backed by 2 MiB transparent huge pages: shows
// how much of a lookup's cost is TLB misses (expensive in a VM: nested page walks).
class AnonBytes final : public FileBytes {
 public:
  AnonBytes(std::span<const std::byte> src, bool huge) : size_(src.size()) {
    const size_t len = (size_ + (2u << 20) - 1) & ~size_t{(2u << 20) - 1};
    base_ = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base_ == MAP_FAILED) Die("mmap anonymous");
    len_ = len;
    ::madvise(base_, len_, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    std::memcpy(base_, src.data(), size_);
  }
  ~AnonBytes() override { ::munmap(base_, len_); }
  std::span<const std::byte> bytes() const override {
    return {static_cast<const std::byte*>(base_), size_};
  }

 private:
  void* base_ = nullptr;
  size_t size_ = 0, len_ = 0;
};

void DropCaches(benchmark::State& state) {
  ::sync();
  std::ofstream f("/proc/sys/vm/drop_caches");
  f << "3\n";
  f.close();
  if (!f) state.SkipWithError("cannot write /proc/sys/vm/drop_caches (needs root)");
}

// Writes a one-version dataset: one tiny chunk, and a snapshot whose entries all point into it.
void WriteDataset(const std::string& dir) {
  std::filesystem::remove_all(dir);
  auto storage = OpenStorage(dir);
  if (!storage) Die(storage.error().ToString());
  if (Status s = (*storage)->CreateDirs(dataset::kChunksDir); !s.ok()) Die(s.ToString());
  auto writer = format::ChunkWriter::Create(**storage, 1);
  if (!writer) Die(writer.error().ToString());
  const std::string payload(64, 'x');
  auto ref = (*writer)->Add(std::as_bytes(std::span(payload)));
  if (!ref) Die(ref.error().ToString());
  auto info = (*writer)->Finish();
  if (!info) Die(info.error().ToString());

  g->spec.created_unix_seconds = 1795000000;
  g->spec.chunks = {*info};
  g->spec.labels = format::LabelMode::kExplicit;
  g->spec.entries.reserve(g->paths.size());
  for (size_t i = 0; i < g->paths.size(); ++i) {
    format::SnapshotEntry e;
    e.path = g->paths[i];
    e.offset = ref->offset;
    e.length = ref->length;
    e.crc32c = ref->crc32c;
    e.label = g->labels[i];
    g->spec.entries.push_back(std::move(e));
  }
  auto bytes = format::BuildSnapshot(g->spec);
  if (!bytes) Die(bytes.error().ToString());
  g->snapshot_bytes = bytes->size();
  if (Status s = dataset::PublishFormat1Version(**storage, 1, *bytes); !s.ok()) Die(s.ToString());
}

void CreateFsTree(const std::string& root) {
  namespace fs = std::filesystem;
  if (fs::exists(root) && !fs::is_empty(root)) Die(root + " exists and is not empty");
  fs::create_directories(root);
  const auto start = std::chrono::steady_clock::now();
  std::string last_dir;
  for (size_t i = 0; i < g->paths.size(); ++i) {
    const std::string full = root + "/" + g->paths[i];
    const std::string dir = full.substr(0, full.rfind('/'));
    if (dir != last_dir) {
      fs::create_directories(dir);
      last_dir = dir;
    }
    const int fd = ::open(full.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0) Die(fmt::format("create {}: {}", full, std::strerror(errno)));
    ::close(fd);
    if ((i + 1) % 100000 == 0) std::fprintf(stderr, "  %zu files\n", i + 1);
  }
  ::sync();
  std::ofstream(root + "/" + kTreeStamp) << "files=" << g->paths.size() << "\n";
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "created %zu files under %s in %.1f s\n", g->paths.size(), root.c_str(), s);
}

// --- benchmarks ------------------------------------------------------------------------------

void BM_BuildSnapshot(benchmark::State& state) {
  for (auto _ : state) {
    state.PauseTiming();
    format::SnapshotSpec copy = g->spec;
    state.ResumeTiming();
    auto bytes = format::BuildSnapshot(std::move(copy));
    if (!bytes) {
      state.SkipWithError(bytes.error().ToString().c_str());
      break;
    }
    benchmark::DoNotOptimize(bytes->data());
    state.PauseTiming();
    bytes->clear();  // freeing 100 MB is not part of building
    state.ResumeTiming();
  }
  state.counters["files"] = static_cast<double>(g->paths.size());
  state.counters["snapshot_bytes"] = static_cast<double>(g->snapshot_bytes);
  state.counters["bytes_per_file"] = static_cast<double>(g->snapshot_bytes) / g->paths.size();
}

// Format 1 (this benchmark's subject; format 2 is bench/metadata_scale.cc): MANIFEST, then the
// snapshot mapped and validated.
Result<std::unique_ptr<format::Snapshot>> OpenFormat1(const std::string& dir, bool verify) {
  STOKER_ASSIGN_OR_RETURN(auto storage, OpenStorage(dir));
  STOKER_ASSIGN_OR_RETURN(auto manifest, dataset::ReadFormat1Manifest(*storage));
  if (!manifest) return Err(Status::NotFound(dir + " has no MANIFEST"));
  return dataset::OpenSnapshot(*storage, *manifest, verify);
}

// range(0): verify the snapshot CRC32C; range(1): drop the page cache before every open.
void BM_DatasetOpen(benchmark::State& state) {
  const bool verify = state.range(0) != 0;
  const bool cold = state.range(1) != 0;
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      DropCaches(state);
      state.ResumeTiming();
    }
    auto ds = OpenFormat1(g_flags.dataset_dir, verify);
    if (!ds) {
      state.SkipWithError(ds.error().ToString().c_str());
      break;
    }
    benchmark::DoNotOptimize(ds->get());
    state.PauseTiming();
    ds->reset();  // munmap is not part of opening
    state.ResumeTiming();
  }
  state.counters["files"] = static_cast<double>(g->paths.size());
}

// range(0): 0 = the Dataset's mmap of the page-cached file, 1 = anonymous 4 KiB pages,
// 2 = anonymous transparent huge pages.
void BM_SnapshotFindFile(benchmark::State& state) {
  const format::Snapshot& snapshot =
      state.range(0) == 0 ? *g->dataset : *g->anon[state.range(0) - 1];
  const auto& paths = g->lookups;
  size_t i = state.thread_index() * paths.size() / state.threads();
  uint64_t found = 0;
  for (auto _ : state) {
    const std::optional<uint32_t> index = snapshot.FindFile(paths[i]);
    found += index.has_value();
    benchmark::DoNotOptimize(index);
    if (++i == paths.size()) i = 0;
  }
  if (found != static_cast<uint64_t>(state.iterations())) {
    state.SkipWithError("a lookup of an existing path failed");
  }
  state.SetItemsProcessed(state.iterations());
}

// Snapshot::FindFiles over batches of 64 random existing paths (items = paths resolved).
void BM_SnapshotFindFilesBatched(benchmark::State& state) {
  const format::Snapshot& snapshot = *g->dataset;
  constexpr size_t kBatch = 64;
  std::vector<std::string_view> views(g->lookups.begin(), g->lookups.end());
  std::vector<std::optional<uint32_t>> out(kBatch);
  size_t i = state.thread_index() * (views.size() / state.threads()) / kBatch * kBatch;
  uint64_t found = 0;
  for (auto _ : state) {
    if (i + kBatch > views.size()) i = 0;
    snapshot.FindFiles(std::span(views).subspan(i, kBatch), out);
    for (const auto& o : out) found += o.has_value();
    benchmark::DoNotOptimize(out.data());
    i += kBatch;
  }
  if (found != static_cast<uint64_t>(state.iterations()) * kBatch) {
    state.SkipWithError("a batched lookup of an existing path failed");
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}

// One ImageFolder-style lookup: stat() the path, open() and close() it (mode 1), or stat only
// (mode 0). Relative to a directory fd, which spares the kernel the walk to the tree's root.
bool FsLookup(const std::string& path, bool open_close) {
  struct stat st;
  if (::fstatat(g->fs_root, path.c_str(), &st, 0) != 0) return false;
  benchmark::DoNotOptimize(st.st_size);
  if (open_close) {
    const int fd = ::openat(g->fs_root, path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    ::close(fd);
  }
  return true;
}

// range(0): 1 = stat + open + close, 0 = stat only. Warm: main() stat()ed every path first.
void BM_FsLookupWarm(benchmark::State& state) {
  const bool open_close = state.range(0) != 0;
  const auto& paths = g->lookups;
  size_t i = state.thread_index() * paths.size() / state.threads();
  for (auto _ : state) {
    if (!FsLookup(paths[i], open_close)) {
      state.SkipWithError(("lookup failed: " + paths[i]).c_str());
      break;
    }
    if (++i == paths.size()) i = 0;
  }
  state.SetItemsProcessed(state.iterations());
}

// Each iteration drops the page, dentry and inode caches, then looks up `cold_lookups` random
// paths (a different slice each time). range(0) as above.
void BM_FsLookupCold(benchmark::State& state) {
  const bool open_close = state.range(0) != 0;
  const auto& paths = g->lookups;
  size_t i = paths.size() / 3;  // not the slice the warm runs started from
  for (auto _ : state) {
    state.PauseTiming();
    DropCaches(state);
    state.ResumeTiming();
    for (uint32_t k = 0; k < g_flags.cold_lookups; ++k) {
      if (!FsLookup(paths[i], open_close)) {
        state.SkipWithError(("lookup failed: " + paths[i]).c_str());
        break;
      }
      if (++i == paths.size()) i = 0;
    }
  }
  state.SetItemsProcessed(state.iterations() * g_flags.cold_lookups);
}

// Lookup cost right after a cold open: the snapshot was read whole by the open (MAP_POPULATE
// + CRC), so this shows that nothing is left to fault in.
void BM_SnapshotFindFileAfterColdOpen(benchmark::State& state) {
  size_t i = g->lookups.size() / 3;
  for (auto _ : state) {
    state.PauseTiming();
    g->dataset.reset();
    DropCaches(state);
    auto ds = OpenFormat1(g_flags.dataset_dir, true);
    if (!ds) {
      state.SkipWithError(ds.error().ToString().c_str());
      break;
    }
    g->dataset = std::move(*ds);
    state.ResumeTiming();
    const format::Snapshot& snapshot = *g->dataset;
    for (uint32_t k = 0; k < g_flags.cold_lookups; ++k) {
      benchmark::DoNotOptimize(snapshot.FindFile(g->lookups[i]));
      if (++i == g->lookups.size()) i = 0;
    }
  }
  state.SetItemsProcessed(state.iterations() * g_flags.cold_lookups);
}

void RegisterAll() {
  using benchmark::kMillisecond;
  benchmark::RegisterBenchmark("BuildSnapshot", BM_BuildSnapshot)
      ->Unit(kMillisecond)
      ->Iterations(3)
      ->UseRealTime();
  benchmark::RegisterBenchmark("DatasetOpen/warm/verify_crc", BM_DatasetOpen)
      ->Args({1, 0})
      ->Unit(kMillisecond)
      ->MinTime(2.0)
      ->UseRealTime();
  benchmark::RegisterBenchmark("DatasetOpen/warm/no_crc", BM_DatasetOpen)
      ->Args({0, 0})
      ->Unit(kMillisecond)
      ->MinTime(2.0)
      ->UseRealTime();
  benchmark::RegisterBenchmark("SnapshotFindFiles/batch64", BM_SnapshotFindFilesBatched)
      ->Threads(1)
      ->Threads(2)
      ->MinTime(3.0)
      ->UseRealTime();
  benchmark::RegisterBenchmark("SnapshotFindFile/mmap", BM_SnapshotFindFile)
      ->Arg(0)
      ->Threads(1)
      ->Threads(2)
      ->MinTime(3.0)
      ->UseRealTime();
  benchmark::RegisterBenchmark("SnapshotFindFile/anon_4k", BM_SnapshotFindFile)
      ->Arg(1)
      ->Threads(1)
      ->MinTime(3.0)
      ->UseRealTime();
  benchmark::RegisterBenchmark("SnapshotFindFile/anon_thp", BM_SnapshotFindFile)
      ->Arg(2)
      ->Threads(1)
      ->Threads(2)
      ->MinTime(3.0)
      ->UseRealTime();
  if (!g_flags.fs_tree.empty()) {
    benchmark::RegisterBenchmark("FsLookupWarm/stat", BM_FsLookupWarm)
        ->Arg(0)
        ->Threads(1)
        ->Threads(2)
        ->MinTime(3.0)
        ->UseRealTime();
    benchmark::RegisterBenchmark("FsLookupWarm/stat_open_close", BM_FsLookupWarm)
        ->Arg(1)
        ->Threads(1)
        ->Threads(2)
        ->MinTime(3.0)
        ->UseRealTime();
  }
  if (g_flags.cold) {  // last: they leave the caches empty
    benchmark::RegisterBenchmark("DatasetOpen/cold/verify_crc", BM_DatasetOpen)
        ->Args({1, 1})
        ->Unit(kMillisecond)
        ->Iterations(10)
        ->UseRealTime();
    benchmark::RegisterBenchmark("SnapshotFindFile/after_cold_open",
                                 BM_SnapshotFindFileAfterColdOpen)
        ->Iterations(3)
        ->UseRealTime();
    if (!g_flags.fs_tree.empty()) {
      benchmark::RegisterBenchmark("FsLookupCold/stat", BM_FsLookupCold)
          ->Arg(0)
          ->Unit(kMillisecond)
          ->Iterations(3)
          ->UseRealTime();
      benchmark::RegisterBenchmark("FsLookupCold/stat_open_close", BM_FsLookupCold)
          ->Arg(1)
          ->Unit(kMillisecond)
          ->Iterations(3)
          ->UseRealTime();
    }
  }
}

// Removes our flags from argv, leaving the rest to Google Benchmark.
void ParseFlags(int* argc, char** argv) {
  int out = 1;
  for (int i = 1; i < *argc; ++i) {
    const std::string_view a = argv[i];
    auto value = [&](std::string_view name) -> std::optional<std::string> {
      if (a.starts_with(name) && a.size() > name.size() && a[name.size()] == '=') {
        return std::string(a.substr(name.size() + 1));
      }
      return std::nullopt;
    };
    if (auto v = value("--dataset_dir")) {
      g_flags.dataset_dir = *v;
    } else if (auto t = value("--fs_tree")) {
      g_flags.fs_tree = *t;
    } else if (auto c = value("--create_fs_tree")) {
      g_flags.create_fs_tree = *c;
    } else if (auto n = value("--files")) {
      g_flags.files = static_cast<uint32_t>(std::stoul(*n));
    } else if (auto k = value("--cold_lookups")) {
      g_flags.cold_lookups = static_cast<uint32_t>(std::stoul(*k));
    } else if (a == "--cold") {
      g_flags.cold = true;
    } else {
      argv[out++] = argv[i];
    }
  }
  *argc = out;
  if (g_flags.files < kClasses) Die("--files must be at least 1000");
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

}  // namespace
}  // namespace stoker

int main(int argc, char** argv) {
  using namespace stoker;
  ParseFlags(&argc, argv);
  Shared shared;
  g = &shared;
  MakePaths(g_flags.files, &g->paths, &g->labels);
  if (!g_flags.create_fs_tree.empty()) {
    CreateFsTree(g_flags.create_fs_tree);
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;

  auto t = std::chrono::steady_clock::now();
  WriteDataset(g_flags.dataset_dir);
  std::fprintf(stderr, "wrote dataset (%zu files, snapshot %llu bytes) to %s in %.1f s\n",
               g->paths.size(), static_cast<unsigned long long>(g->snapshot_bytes),
               g_flags.dataset_dir.c_str(), Seconds(t));
  for (uint32_t i : Permutation(static_cast<uint32_t>(g->paths.size()), 42)) {
    g->lookups.push_back(g->paths[i]);  // allocated in lookup order: no pointer chase
  }
  auto ds = OpenFormat1(g_flags.dataset_dir, true);
  if (!ds) Die(ds.error().ToString());
  g->dataset = std::move(*ds);
  auto storage = OpenStorage(g_flags.dataset_dir);
  if (!storage) Die(storage.error().ToString());
  auto mapped = (*storage)->Map(dataset::SnapshotPath(1));
  if (!mapped) Die(mapped.error().ToString());
  for (int huge = 0; huge < 2; ++huge) {
    auto snap = format::Snapshot::Open(std::make_shared<AnonBytes>((*mapped)->bytes(), huge != 0),
                                       "anonymous copy");
    if (!snap) Die(snap.error().ToString());
    g->anon[huge] = std::move(*snap);
  }
  {  // whether the kernel really backed the THP copy with huge pages
    std::ifstream rollup("/proc/self/smaps_rollup");
    for (std::string line; std::getline(rollup, line);) {
      if (line.starts_with("AnonHugePages")) std::fprintf(stderr, "%s\n", line.c_str());
    }
  }

  if (!g_flags.fs_tree.empty()) {
    std::ifstream stamp(g_flags.fs_tree + "/" + kTreeStamp);
    std::string line;
    if (!std::getline(stamp, line) || line != fmt::format("files={}", g->paths.size())) {
      Die(fmt::format("{} is not a complete tree of {} files (create it with --create_fs_tree)",
                      g_flags.fs_tree, g->paths.size()));
    }
    g->fs_root = ::open(g_flags.fs_tree.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (g->fs_root < 0) Die("open " + g_flags.fs_tree + ": " + std::strerror(errno));
    // Warm-up: one full pass, so every dentry and inode is cached.
    t = std::chrono::steady_clock::now();
    for (const auto& p : g->paths) {
      struct stat st;
      if (::fstatat(g->fs_root, p.c_str(), &st, 0) != 0) Die("missing from tree: " + p);
    }
    std::fprintf(stderr, "fs warm-up pass (stat of all %zu files, in tree order): %.1f s\n",
                 g->paths.size(), Seconds(t));
  }

  RegisterAll();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  if (g->fs_root >= 0) ::close(g->fs_root);
  return 0;
}
