// Appends and compaction at scale (docs/benchmarks.md §14.5): a base segment of `--files`
// synthetic ImageNet-shaped files (synthetic_metadata.h), then `--appends` segments of
// `--append-files` each whose files land in the same class directories (daily appends: their
// keys interleave with the base's, so every lookup by path must consult every segment), then
// `stoker compact`'s merge of all of them into one segment.
//
// Measured: bytes and time per append; what a version of 1 + appends segments costs a reader
// (bytes an open reads, bytes and time per lookup by path and by index) before and after the
// merge; the merge's time, bytes written and peak RSS (the merge runs in a child process, so
// its peak is its own). Prints one JSON object.
//
//   compaction_scale --files=1000000 --appends=10 --append-files=10000 [--lookups=2000]
//                    [--dir=/var/tmp]
#include <malloc.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/random.h"
#include "format/segment.h"
#include "format/segment_merge.h"
#include "storage/posix_storage.h"
#include "synthetic_metadata.h"

namespace stoker {
namespace {

using namespace bench;

struct Opened {
  std::vector<std::shared_ptr<CountingFile>> files;
  std::vector<std::unique_ptr<format::Segment>> segments;
  uint64_t read_bytes() const {
    uint64_t n = 0;
    for (const auto& f : files) n += f->read_bytes;
    return n;
  }
};

Result<Opened> OpenAll(Storage& storage, const std::vector<std::string>& names) {
  Opened o;
  for (const std::string& name : names) {
    STOKER_ASSIGN_OR_RETURN(std::shared_ptr<RandomAccessFile> file, storage.OpenRead(name));
    o.files.push_back(std::make_shared<CountingFile>(std::move(file)));
    STOKER_ASSIGN_OR_RETURN(auto segment, format::Segment::Open(o.files.back(), name));
    o.segments.push_back(std::move(segment));
  }
  return o;
}

// Reader costs of one version made of `names`, as JSON.
Result<std::string> Measure(Storage& storage, const std::vector<std::string>& names, uint64_t total,
                            uint64_t lookups) {
  auto start = std::chrono::steady_clock::now();
  STOKER_ASSIGN_OR_RETURN(Opened o, OpenAll(storage, names));
  const double open_s = Seconds(start);
  const uint64_t open_bytes = o.read_bytes();
  Pcg32 rng(7);
  const auto random_file = [&] {
    return rng.Below(static_cast<uint32_t>(std::min<uint64_t>(total, UINT32_MAX)));
  };
  // By path: every segment whose key range could hold it, as VersionView::FindFile.
  const auto by_path = [](const Opened& v, uint64_t i) -> Status {
    for (const auto& seg : v.segments) {
      STOKER_ASSIGN_OR_RETURN(auto position, seg->FindFile(PathOf(i)));
      if (!position) continue;
      STOKER_ASSIGN_OR_RETURN(auto l, seg->FileLocation(*position));
      if (l.length == LengthOf(i)) return Status::OK();
    }
    return Status::Internal(fmt::format("file {} not found", i));
  };
  // By index: the segment holding it, then its path and location.
  const auto by_index = [](const Opened& v, uint64_t i) -> Status {
    for (const auto& seg : v.segments) {
      const auto& info = seg->info();
      if (i < info.first_file || i >= info.first_file + info.file_count) continue;
      STOKER_ASSIGN_OR_RETURN(const std::string path, seg->FilePath(i - info.first_file));
      STOKER_ASSIGN_OR_RETURN(auto l, seg->FileLocation(i - info.first_file));
      // Indices follow key order, not file numbers: check the path against its own number.
      const uint64_t number = std::stoull(path.substr(path.rfind('_') + 1));
      if (path == PathOf(number) && l.length == LengthOf(number)) return Status::OK();
    }
    return Status::Internal(fmt::format("file {} reads back wrong", i));
  };
  start = std::chrono::steady_clock::now();
  for (uint64_t n = 0; n < lookups; ++n) STOKER_RETURN_IF_ERROR(by_path(o, random_file()));
  const double path_us = Seconds(start) * 1e6 / static_cast<double>(lookups);
  const uint64_t path_bytes = (o.read_bytes() - open_bytes) / lookups;
  const uint64_t before_index = o.read_bytes();
  start = std::chrono::steady_clock::now();
  for (uint64_t n = 0; n < lookups; ++n) STOKER_RETURN_IF_ERROR(by_index(o, random_file()));
  const double index_us = Seconds(start) * 1e6 / static_cast<double>(lookups);
  const uint64_t index_bytes = (o.read_bytes() - before_index) / lookups;
  // Cold: the first lookup after an open (what one `stoker stat` moves), over fresh opens.
  constexpr int kCold = 20;
  uint64_t cold_path = 0, cold_index = 0;
  for (int r = 0; r < kCold; ++r) {
    for (const bool path : {true, false}) {
      STOKER_ASSIGN_OR_RETURN(Opened fresh, OpenAll(storage, names));
      const uint64_t opened = fresh.read_bytes();
      STOKER_RETURN_IF_ERROR(path ? by_path(fresh, random_file()) : by_index(fresh, random_file()));
      (path ? cold_path : cold_index) += fresh.read_bytes() - opened;
    }
  }
  return fmt::format(
      R"({{"segments": {}, "open_s": {:.4f}, "open_read_bytes": {}, "path_lookup_us": {:.2f}, )"
      R"("path_lookup_read_bytes": {}, "index_lookup_us": {:.2f}, "index_lookup_read_bytes": {}, )"
      R"("cold_path_lookup_read_bytes": {}, "cold_index_lookup_read_bytes": {}}})",
      names.size(), open_s, open_bytes, path_us, path_bytes, index_us, index_bytes,
      cold_path / kCold, cold_index / kCold);
}

// Merges `names` into `out` in a child process; its peak RSS and exit status come back.
Result<uint64_t> MergeInChild(const std::string& dir, const std::vector<std::string>& names,
                              const std::string& out) {
  ::malloc_trim(0);
  const pid_t pid = ::fork();
  if (pid < 0) return Err(Status::FromErrno(errno, "fork"));
  if (pid == 0) {
    auto storage = storage::NewPosixStorage(dir);
    auto opened = OpenAll(*storage, names);
    if (!opened) ::_exit(2);
    std::vector<const format::Segment*> inputs;
    for (const auto& s : opened->segments) inputs.push_back(s.get());
    auto file = storage->Create(out);
    if (!file) ::_exit(3);
    format::WritableFileSink sink(**file);
    const Status merged = format::MergeSegments(inputs, SortOptions{dir, 64ull << 20}, sink);
    if (!merged.ok()) {
      std::fprintf(stderr, "compaction_scale: %s\n", merged.ToString().c_str());
      ::_exit(4);
    }
    ::_exit(sink.Flush().ok() && (*file)->Close().ok() ? 0 : 5);
  }
  int status = 0;
  struct rusage usage{};
  if (::wait4(pid, &status, 0, &usage) < 0) return Err(Status::FromErrno(errno, "wait4"));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return Err(Status::Internal(fmt::format("the merge failed (status {})", status)));
  }
  return static_cast<uint64_t>(usage.ru_maxrss) * 1024;
}

int Run(uint64_t files, uint64_t appends, uint64_t append_files, uint64_t lookups,
        const std::string& dir) {
  auto storage = storage::NewPosixStorage(dir);
  const std::string prefix = fmt::format("compaction-scale-{}", ::getpid());
  std::vector<std::string> names;
  const auto fail = [&](const Status& s) {
    std::fprintf(stderr, "compaction_scale: %s\n", s.ToString().c_str());
    for (const auto& n : names) (void)storage->Remove(n);
    return 1;
  };
  auto start = std::chrono::steady_clock::now();
  names.push_back(prefix + "-base.seg");
  auto base = WriteSyntheticSegment(*storage, names.back(), dir, 0, files);
  if (!base) return fail(base.error());
  const double base_s = Seconds(start);
  uint64_t append_bytes = 0;
  start = std::chrono::steady_clock::now();
  for (uint64_t j = 0; j < appends; ++j) {
    names.push_back(fmt::format("{}-append{}.seg", prefix, j));
    auto size =
        WriteSyntheticSegment(*storage, names.back(), dir, files + j * append_files, append_files);
    if (!size) return fail(size.error());
    append_bytes += *size;
  }
  const double append_s = appends ? Seconds(start) / static_cast<double>(appends) : 0;
  const uint64_t total = files + appends * append_files;
  auto before = Measure(*storage, names, total, lookups);
  if (!before) return fail(before.error());

  const std::string merged = prefix + "-merged.seg";
  start = std::chrono::steady_clock::now();
  auto rss = MergeInChild(dir, names, merged);
  const double merge_s = Seconds(start);
  if (!rss) return fail(rss.error());
  uint64_t inputs_bytes = *base + append_bytes;
  auto merged_file = storage->OpenRead(merged);
  if (!merged_file) return fail(merged_file.error());
  const uint64_t merged_bytes = (*merged_file)->Size();
  merged_file->reset();
  auto after = Measure(*storage, {merged}, total, lookups);
  for (const auto& n : names) (void)storage->Remove(n);
  (void)storage->Remove(merged);
  if (!after) return fail(after.error());
  std::printf(
      "%s\n",
      fmt::format(
          R"({{"files": {}, "appends": {}, "append_files": {}, "synthetic": true, )"
          R"("base": {{"bytes": {}, "bytes_per_file": {:.1f}, "build_s": {:.2f}}}, )"
          R"("append": {{"bytes": {}, "fraction_of_base": {:.5f}, "build_s": {:.3f}}}, )"
          R"("before": {}, "merge": {{"s": {:.2f}, "files_per_s": {:.0f}, "bytes_read": {}, )"
          R"("bytes_written": {}, "bytes_per_file": {:.1f}, "peak_rss_bytes": {}}}, "after": {}}})",
          files, appends, append_files, *base, double(*base) / files, base_s,
          appends ? append_bytes / appends : 0,
          appends ? double(append_bytes) / appends / *base : 0.0, append_s, *before, merge_s,
          double(total) / merge_s, inputs_bytes, merged_bytes, double(merged_bytes) / total, *rss,
          *after)
          .c_str());
  return 0;
}

}  // namespace
}  // namespace stoker

int main(int argc, char** argv) {
  uint64_t files = 1000000, appends = 10, append_files = 10000, lookups = 2000;
  std::string dir = "/var/tmp";
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    const auto value = [&](std::string_view flag) {
      return std::stoull(std::string(a.substr(flag.size())));
    };
    if (a.starts_with("--files="))
      files = value("--files=");
    else if (a.starts_with("--appends="))
      appends = value("--appends=");
    else if (a.starts_with("--append-files="))
      append_files = value("--append-files=");
    else if (a.starts_with("--lookups="))
      lookups = value("--lookups=");
    else if (a.starts_with("--dir="))
      dir = a.substr(6);
    else {
      std::fprintf(stderr,
                   "usage: compaction_scale [--files=N] [--appends=K] [--append-files=M] "
                   "[--lookups=N] [--dir=D]\n");
      return 2;
    }
  }
  if (files == 0 || lookups == 0) return 2;
  return stoker::Run(files, appends, append_files, lookups, dir);
}
