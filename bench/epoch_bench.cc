// Epoch benchmark: one epoch of a packed dataset read through the loader (sampler plan + read
// pipeline), or — the peer — the unpacked files read the way torchvision's ImageFolder does it
// (every sample: open, read the whole file, close; random order; N parallel readers, like
// DataLoader workers). Prints one JSON object on stdout.
//
//   epoch_bench --dataset=DIR [--mode=chunk|full|sequential] [--window=16] [--seed=1]
//               [--epoch=0] [--budget=1GiB] [--io_depth=8] [--engine=auto|uring|threads]
//               [--block=0|auto|SIZE] [--time_limit=SECONDS]
//   epoch_bench --files_from=LIST [--threads=8] [--time_limit=SECONDS]
//
// --block: chunk mode's shuffle unit (docs/sampler.md): 0 whole chunks (default), a block size,
// or auto: what stoker.Loader picks from the labels (batch 256).
//
// LIST holds one path per line, already in the order to read (the driver shuffles it). Every
// sample's bytes are touched (summed) by the consumer, so nothing is read without being used.
// --time_limit stops an epoch early (0: never); the output then says "complete": false and the
// rates are over the part that was read. Errors are counted per sample; the exit status is 1 if
// there was any.
//
// Driver: bench/run_epoch.py (cold cache, blkio-throttled storage; docs/benchmarks.md §4).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "common/progress.h"
#include "loader/read_pipeline.h"
#include "loader/sampler.h"
#include "loader/shuffle_unit.h"
#include "stoker/dataset.h"

namespace stoker {
namespace {

struct Flags {
  std::string dataset;
  std::string mode = "chunk";
  uint32_t window = 16;
  uint64_t seed = 1;
  uint64_t epoch = 0;
  uint64_t budget = 1ull << 30;
  uint32_t io_depth = 8;
  std::string engine = "auto";
  double time_limit = 0;
  std::string files_from;
  uint32_t threads = 8;
  std::string block = "0";  // chunk mode's shuffle unit: 0 (whole chunks), bytes, or auto
};

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "epoch_bench: %s\n", message.c_str());
  std::exit(2);
}

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    const size_t eq = a.find('=');
    if (!a.starts_with("--") || eq == std::string_view::npos) Die(fmt::format("bad flag '{}'", a));
    const std::string_view name = a.substr(2, eq - 2);
    const std::string value(a.substr(eq + 1));
    try {
      if (name == "dataset") {
        f.dataset = value;
      } else if (name == "mode") {
        f.mode = value;
      } else if (name == "window") {
        f.window = static_cast<uint32_t>(std::stoul(value));
      } else if (name == "seed") {
        f.seed = std::stoull(value);
      } else if (name == "epoch") {
        f.epoch = std::stoull(value);
      } else if (name == "budget") {
        auto budget = ParseByteSize(value);
        if (!budget) Die("--budget: " + budget.error().message());
        f.budget = *budget;
      } else if (name == "io_depth") {
        f.io_depth = static_cast<uint32_t>(std::stoul(value));
      } else if (name == "engine") {
        f.engine = value;
      } else if (name == "time_limit") {
        f.time_limit = std::stod(value);
      } else if (name == "files_from") {
        f.files_from = value;
      } else if (name == "threads") {
        f.threads = static_cast<uint32_t>(std::stoul(value));
      } else if (name == "block") {
        f.block = value;
      } else {
        Die(fmt::format("unknown flag '--{}'", name));
      }
    } catch (const std::exception&) {  // std::stoul and friends
      Die(fmt::format("bad value in '{}'", a));
    }
  }
  if (f.dataset.empty() == f.files_from.empty()) Die("give exactly one of --dataset, --files_from");
  if (f.threads == 0) Die("--threads must be positive");
  return f;
}

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// The consumer's use of a sample: a sum over its bytes (8 at a time), so every byte is loaded.
uint64_t Touch(std::span<const std::byte> bytes) {
  uint64_t sum = 0;
  size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, bytes.data() + i, 8);
    sum += w;
  }
  for (; i < bytes.size(); ++i) sum += static_cast<uint8_t>(bytes[i]);
  return sum;
}

// What every variant reports; fields a variant does not have stay at their defaults.
struct EpochResult {
  std::string variant;
  uint64_t planned = 0, samples = 0, bytes = 0, errors = 0;
  double seconds = 0, open_seconds = 0;
  std::string first_error;
  uint64_t checksum = 0;
  std::optional<loader::ReadPipelineStats> stats;
  std::string engine;
};

void Print(const EpochResult& r) {
  std::string out = fmt::format(
      "{{\"variant\": \"{}\", \"planned\": {}, \"samples\": {}, \"complete\": {}, "
      "\"bytes\": {}, \"seconds\": {:.4f}, \"samples_per_s\": {:.1f}, \"mb_per_s\": {:.2f}, "
      "\"open_seconds\": {:.4f}, \"errors\": {}, \"checksum\": {}",
      r.variant, r.planned, r.samples, r.samples == r.planned ? "true" : "false", r.bytes,
      r.seconds, r.samples / r.seconds, r.bytes / r.seconds / 1e6, r.open_seconds, r.errors,
      r.checksum);
  if (r.stats) {
    out += fmt::format(
        ", \"engine\": \"{}\", \"ranges\": {}, \"bytes_read\": {}, \"consumer_waits\": {}, "
        "\"consumer_wait_seconds\": {:.4f}, \"peak_bytes_held\": {}",
        r.engine, r.stats->ranges, r.stats->bytes_read, r.stats->consumer_waits,
        r.stats->consumer_wait_seconds, r.stats->peak_bytes_held);
  }
  if (!r.first_error.empty()) {
    std::string escaped;
    for (char c : r.first_error) {
      if (c == '"' || c == '\\') escaped += '\\';
      escaped += (static_cast<unsigned char>(c) < 0x20) ? ' ' : c;
    }
    out += fmt::format(", \"first_error\": \"{}\"", escaped);
  }
  std::printf("%s}\n", out.c_str());
}

// One epoch through the loader: Sampler plan for rank 0 of 1, ReadPipeline, Next() until done.
EpochResult RunDataset(const Flags& f) {
  EpochResult r;
  const auto t_open = std::chrono::steady_clock::now();
  auto opened = Dataset::Open(f.dataset);
  if (!opened) Die(opened.error().ToString());
  std::shared_ptr<const Dataset> dataset = std::move(*opened);
  r.open_seconds = Since(t_open);

  auto mode = loader::ParseShuffleMode(f.mode);
  if (!mode) Die(mode.error().ToString());
  loader::SamplerOptions sampler_options;
  sampler_options.mode = *mode;
  sampler_options.seed = f.seed;
  // The shuffle unit: whole chunks, fixed blocks, or what stoker.Loader picks (batch 256).
  uint64_t block = 0;
  if (f.block == "auto") {
    block = loader::ChooseShuffleUnit(*dataset, f.window, 256).value().block_bytes;
  } else if (auto size = ParseByteSize(f.block); size) {
    block = *size;
  } else {
    Die(fmt::format("bad --block '{}' (auto, 0, or a size)", f.block));
  }
  sampler_options.window_chunks = f.window;
  auto sampler = loader::CreateSampler(*dataset, sampler_options, block);
  if (!sampler) Die(sampler.error().ToString());
  std::vector<uint32_t> plan =
      sampler->PlanRank({.epoch = f.epoch, .position = 0, .planned_world_size = 1}, 1, 0)
          .value()
          .samples;
  r.planned = plan.size();
  r.variant = *mode == loader::ShuffleMode::kChunk
                  ? fmt::format("chunk W={}{}", f.window,
                                block ? fmt::format(", blocks of {} B", block) : "")
                  : f.mode;

  loader::ReadPipelineOptions options;
  options.memory_budget_bytes = f.budget;
  options.io_depth = f.io_depth;
  if (f.engine == "auto") {
    options.engine = loader::IoEngineKind::kAuto;
  } else if (f.engine == "uring") {
    options.engine = loader::IoEngineKind::kUring;
  } else if (f.engine == "threads") {
    options.engine = loader::IoEngineKind::kThreads;
  } else {
    Die(fmt::format("bad --engine '{}' (auto, uring, threads)", f.engine));
  }

  // The clock covers planning the reads and all of them: Start() to the last sample consumed.
  const auto start = std::chrono::steady_clock::now();
  auto pipeline = loader::ReadPipeline::Start(dataset, std::move(plan), options);
  if (!pipeline) Die(pipeline.error().ToString());
  while (true) {
    auto next = (*pipeline)->Next();
    if (!next) Die(next.error().ToString());  // the pipeline itself failed
    const std::optional<loader::SampleData>& item = *next;
    if (!item) break;
    const loader::SampleData& sample = *item;
    ++r.samples;
    if (!sample.status.ok()) {
      if (r.errors++ == 0) r.first_error = sample.status.ToString();
      continue;
    }
    for (const auto& file : sample.files) {
      r.checksum += Touch(file.bytes);
      r.bytes += file.bytes.size();
    }
    if (f.time_limit > 0 && Since(start) > f.time_limit) break;
  }
  r.seconds = Since(start);
  r.stats = (*pipeline)->stats();
  r.engine = std::string((*pipeline)->engine_name());
  pipeline->reset();  // not timed: an early stop waits here for the reads in flight
  return r;
}

// The ImageFolder pattern: N readers take the next path of the (shuffled) list, open it, read it
// whole, close it.
EpochResult RunFiles(const Flags& f) {
  std::vector<std::string> paths;
  {
    std::ifstream in(f.files_from);
    if (!in) Die("cannot read " + f.files_from);
    for (std::string line; std::getline(in, line);) {
      if (!line.empty()) paths.push_back(std::move(line));
    }
  }
  EpochResult r;
  r.variant = fmt::format("files {} readers", f.threads);
  r.planned = paths.size();
  std::atomic<size_t> next{0};
  std::atomic<bool> stop{false};
  std::mutex mu;  // guards r's counters when a reader finishes
  const auto start = std::chrono::steady_clock::now();
  auto reader = [&] {
    uint64_t samples = 0, bytes = 0, errors = 0, checksum = 0;
    std::string first_error;
    std::vector<std::byte> buffer;
    auto fail = [&](const std::string& what) {
      if (errors++ == 0) first_error = what;
    };
    while (!stop.load(std::memory_order_relaxed)) {
      const size_t i = next.fetch_add(1);
      if (i >= paths.size()) break;
      ++samples;
      const int fd = ::open(paths[i].c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) {
        fail(fmt::format("open {}: {}", paths[i], std::strerror(errno)));
        continue;
      }
      struct stat st;
      if (::fstat(fd, &st) != 0) {
        fail(fmt::format("fstat {}: {}", paths[i], std::strerror(errno)));
        ::close(fd);
        continue;
      }
      buffer.resize(static_cast<size_t>(st.st_size));
      size_t got = 0;
      while (got < buffer.size()) {
        const ssize_t n = ::read(fd, buffer.data() + got, buffer.size() - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += static_cast<size_t>(n);
      }
      ::close(fd);
      if (got != buffer.size()) {
        fail(fmt::format("read {}: {} of {} bytes", paths[i], got, buffer.size()));
        continue;
      }
      checksum += Touch(buffer);
      bytes += got;
      if (f.time_limit > 0 && Since(start) > f.time_limit) stop = true;
    }
    std::lock_guard lock(mu);
    r.samples += samples;
    r.bytes += bytes;
    r.checksum += checksum;
    if (r.errors == 0 && errors > 0) r.first_error = first_error;
    r.errors += errors;
  };
  std::vector<std::thread> threads;
  threads.reserve(f.threads);
  for (uint32_t t = 0; t < f.threads; ++t) threads.emplace_back(reader);
  for (auto& t : threads) t.join();
  r.seconds = Since(start);
  return r;
}

}  // namespace
}  // namespace stoker

// NOLINTNEXTLINE(bugprone-exception-escape): a bad flag ends the benchmark; terminate names it
int main(int argc, char** argv) {
  using namespace stoker;
  const Flags flags = ParseFlags(argc, argv);
  const EpochResult r = flags.files_from.empty() ? RunDataset(flags) : RunFiles(flags);
  Print(r);
  if (r.errors > 0) {
    std::fprintf(stderr, "epoch_bench: %llu samples failed; first: %s\n",
                 static_cast<unsigned long long>(r.errors), r.first_error.c_str());
    return 1;
  }
  return 0;
}
