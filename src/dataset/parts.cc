#include "dataset/parts.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <map>

#include <fmt/format.h>

#include "common/external_sorter.h"
#include "common/parse_number.h"
#include "common/spool.h"
#include "format/chunk.h"
#include "format/columns.h"
#include "format/segment.h"
#include "format/segment_builder.h"
#include "format/segment_layout.h"
#include "format/snapshot_builder.h"
#include "format/versions.h"
#include "storage/small_file.h"

namespace stoker::dataset {
namespace {

std::optional<uint32_t> ParseIndex(std::string_view s) { return ParseUnsigned<uint32_t>(s); }

constexpr std::string_view kSegmentSuffix = ".seg";
constexpr std::string_view kColumnsSuffix = ".columns";
constexpr uint64_t kMaxSchemaBytes = 1 << 20;
constexpr std::string_view kClosedName = "closed";

std::string JobDir(std::string_view job) { return fmt::format("{}/{}", kPartsDir, job); }
// The marker a commit or discard writes before it reads the parts (parts.h).
std::string ClosedPath(std::string_view job) {
  return fmt::format("{}/{}/{}", kPartsDir, job, kClosedName);
}

// A part's schema file: its segment's path with ".columns" for ".seg".
std::string ColumnsPath(std::string_view segment_path) {
  return fmt::format("{}{}", segment_path.substr(0, segment_path.size() - kSegmentSuffix.size()),
                     kColumnsSuffix);
}

// (K, N) of "part-<K>-of-<N>.seg"; nullopt for other names.
std::optional<std::pair<uint32_t, uint32_t>> ParsePartName(std::string_view name) {
  if (!name.starts_with("part-") || !name.ends_with(".seg")) return std::nullopt;
  name = name.substr(5, name.size() - 9);
  const size_t of = name.find("-of-");
  if (of == std::string_view::npos) return std::nullopt;
  const auto k = ParseIndex(name.substr(0, of)), n = ParseIndex(name.substr(of + 4));
  if (!k || !n) return std::nullopt;
  return std::pair(*k, *n);
}

const char* Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

struct Part {
  uint32_t index = 0;
  std::string path;
  std::unique_ptr<format::Segment> segment;
  std::string columns;  // a column dataset's schema; empty otherwise
};

// Every part of `job` to publish, opened and checked, by index; an error if one is missing or
// damaged.
Result<std::vector<Part>> OpenParts(Storage& storage, const CommitOptions& options) {
  const std::string dir = JobDir(options.job);
  auto names = storage.List(dir);
  if (!names && !names.error().IsNotFound()) return Err(names.error());
  std::map<uint32_t, std::string> by_index;
  uint32_t count = options.parts;
  for (const std::string& name : names ? *names : std::vector<std::string>{}) {
    const auto kn = ParsePartName(name);
    if (!kn) continue;  // a writer's temporary file, a schema, the marker
    if (kn->second != 0 && options.only.empty()) {
      if (count != 0 && kn->second != count) {
        return Err(Status::InvalidArgument(fmt::format("{}: part of {} parts, but {} expected",
                                                       storage.Describe(dir + "/" + name),
                                                       kn->second, count)));
      }
      count = kn->second;
    }
    // part-K-of-N and part-K-of-0 (or -of-M) are one part packed twice: publishing either
    // would drop the other's files.
    if (const auto [it, added] = by_index.emplace(kn->first, dir + "/" + name); !added) {
      return Err(Status::InvalidArgument(fmt::format(
          "{} and {} are both part {} of job '{}' (packed twice, with different N?): remove the "
          "one that should not be published",
          storage.Describe(it->second), storage.Describe(dir + "/" + name), kn->first,
          options.job)));
    }
  }
  if (by_index.empty()) {
    return Err(Status::NotFound(
        fmt::format("{} holds no parts of job '{}'", storage.Describe(""), options.job)));
  }
  if (!options.only.empty()) {
    // An engine's accepted attempts: exactly those, whatever else its retries left.
    std::map<uint32_t, std::string> chosen;
    for (const uint32_t k : options.only) {
      const auto it = by_index.find(k);
      if (it == by_index.end()) {
        return Err(Status::NotFound(fmt::format("part {} of job '{}' is missing", k, options.job)));
      }
      if (!chosen.emplace(k, it->second).second) {
        return Err(Status::InvalidArgument(
            fmt::format("part {} of job '{}' is listed twice", k, options.job)));
      }
    }
    by_index = std::move(chosen);
  } else {
    if (count == 0) {
      return Err(Status::InvalidArgument(fmt::format(
          "the parts of job '{}' do not say how many there are: pass --parts N", options.job)));
    }
    for (uint32_t k = 0; k < count; ++k) {
      if (!by_index.contains(k)) {
        return Err(Status::NotFound(
            fmt::format("part {} of {} of job '{}' is missing", k, count, options.job)));
      }
    }
    if (by_index.rbegin()->first >= count) {
      return Err(
          Status::InvalidArgument(fmt::format("job '{}' has a part {}, but only {} parts",
                                              options.job, by_index.rbegin()->first, count)));
    }
  }
  std::vector<Part> parts;
  for (const auto& [k, path] : by_index) {
    STOKER_ASSIGN_OR_RETURN(auto file, storage.OpenRead(path));
    STOKER_ASSIGN_OR_RETURN(auto segment,
                            format::Segment::Open(std::move(file), storage.Describe(path)));
    auto columns = storage::ReadSmallFile(storage, ColumnsPath(path), kMaxSchemaBytes);
    if (!columns && !columns.error().IsNotFound()) return Err(columns.error());
    // A damaged schema must not reach a published record, which no reader could then open.
    if (columns) {
      auto schema = format::ParseSchema(*columns);
      if (!schema) {
        return Err(Status::Corruption(fmt::format("{}: not a schema as a writer writes it: {}",
                                                  storage.Describe(ColumnsPath(path)),
                                                  schema.error().message())));
      }
    }
    parts.push_back({k, path, std::move(segment), columns ? *std::move(columns) : ""});
  }
  return parts;
}

// Every file of `seg` with its location, in position order: the locations (stored in storage
// order) are sorted by position on disk and joined with the file table, so a part of any size
// is read sequentially once, in bounded memory.
Status ForEachFileWithLocation(
    const format::Segment& seg,
    const std::function<Status(uint64_t position, std::string_view path, uint64_t ordinal,
                               const format::SegmentLocation&)>& fn) {
  const auto big_endian = [](uint64_t v) {
    std::string out(8, '\0');
    for (int b = 0; b < 8; ++b) out[b] = static_cast<char>(v >> (56 - 8 * b));
    return out;
  };
  ExternalSorter by_position(
      {}, [](std::string_view a, std::string_view b) { return a.substr(0, 8) < b.substr(0, 8); });
  Status added;
  // Record: big-endian position (the sort key), the ordinal, the location's bytes.
  STOKER_RETURN_IF_ERROR(
      seg.ForEachLocation([&](uint64_t ordinal, const format::SegmentLocation& l) {
        if (!added.ok()) return;
        std::string record = big_endian(l.position);
        record.append(reinterpret_cast<const char*>(&ordinal), sizeof(ordinal));
        record.append(reinterpret_cast<const char*>(&l), sizeof(l));
        added = by_position.Add(record);
      }));
  STOKER_RETURN_IF_ERROR(added);
  STOKER_ASSIGN_OR_RETURN(Spool sorted, Spool::Create(DefaultSpoolDir()));
  STOKER_RETURN_IF_ERROR(
      by_position.Merge([&](std::string_view r) { return sorted.AppendRecord(r); }));
  STOKER_RETURN_IF_ERROR(sorted.Seal());
  Spool::Reader reader(sorted, 1 << 20);
  return seg.ForEachFile([&](uint64_t position, std::string_view path, uint64_t) -> Status {
    STOKER_ASSIGN_OR_RETURN(auto record, reader.NextRecord());
    format::SegmentLocation l;
    uint64_t ordinal = 0;
    if (!record || record->size() != 16 + sizeof(l)) {
      return Status::Corruption(fmt::format("{}: file {} has no location", seg.name(), position));
    }
    std::memcpy(&ordinal, record->data() + 8, sizeof(ordinal));
    std::memcpy(&l, record->data() + 16, sizeof(l));
    if (l.position != position) {
      return Status::Corruption(
          fmt::format("{}: file {} and its location disagree", seg.name(), position));
    }
    return fn(position, path, ordinal, l);
  });
}

// The union of the parts, as one writer's addition: chunks renumbered part after part. Files
// stream from the parts' segments into a SegmentBuilder, so memory does not grow with them.
Result<Addition> UnionOf(const std::vector<Part>& parts, const Storage& storage) {
  Addition add;
  add.group_samples = parts.front().segment->grouped();
  add.columns = parts.front().columns;
  add.files = std::make_unique<format::SegmentBuilder>();
  std::vector<format::ChunkInfo> chunks;
  for (const Part& part : parts) {
    const format::Segment& seg = *part.segment;
    if (seg.grouped() != add.group_samples) {
      return Err(Status::InvalidArgument(fmt::format("{} and {} mix tar shards and directory trees",
                                                     storage.Describe(parts[0].path),
                                                     storage.Describe(part.path))));
    }
    if (part.columns != add.columns) {
      const auto schema = [](const std::string& s) { return s.empty() ? "no columns" : s; };
      return Err(Status::InvalidArgument(
          fmt::format("{} has {}, {} has {}: the parts of one version hold one schema",
                      storage.Describe(parts[0].path), schema(add.columns),
                      storage.Describe(part.path), schema(part.columns))));
    }
    const uint64_t chunk_base = chunks.size();
    std::vector<uint64_t> first_locations;  // of this part's chunks
    for (uint64_t c = 0; c < seg.info().chunk_count; ++c) {
      STOKER_ASSIGN_OR_RETURN(const format::SegmentChunk chunk, seg.chunk(c));
      chunks.push_back(chunk);
      first_locations.push_back(chunk.first_location);
    }
    const bool attributed = seg.info().attr_count > 0;
    const Status added = ForEachFileWithLocation(
        seg,
        [&](uint64_t position, std::string_view path, uint64_t ordinal,
            const format::SegmentLocation& l) -> Status {
          std::vector<format::Attribute> attributes;
          if (attributed) {
            STOKER_ASSIGN_OR_RETURN(attributes, seg.Attributes(position));
          }
          // Its rank in its chunk: entries follow the chunk's first location.
          const uint64_t entry = ordinal - first_locations[l.chunk];
          return add.files->Add({path, static_cast<uint32_t>(chunk_base + l.chunk), entry, l.length,
                                 l.crc32c, l.label, attributes});
        });
    STOKER_RETURN_IF_ERROR(added);
  }
  // Grouped as one pack of the union groups them: a sample whose members two parts hold (its
  // image in one shard, its .cls in the next) is one sample, every file with the label.
  const Status sealed =
      add.files->Seal(std::move(chunks), add.group_samples ? format::Grouping::kSamplesSharingLabels
                                                           : format::Grouping::kFiles);
  if (const std::optional<std::string>& duplicate = add.files->duplicate_path();
      !sealed.ok() && duplicate) {
    // Name both parts that hold it.
    const std::string& path = *duplicate;
    std::vector<uint32_t> holders;
    for (const Part& part : parts) {
      STOKER_ASSIGN_OR_RETURN(auto found, part.segment->FindFile(path));
      if (found) holders.push_back(part.index);
    }
    if (holders.size() >= 2) {
      return Err(Status::InvalidArgument(
          fmt::format("{} is in part {} and in part {}", path, holders[0], holders[1])));
    }
  }
  STOKER_RETURN_IF_ERROR(sealed);
  return add;
}

// K/N with N known: K counts from 0.
Status CheckPartInRange(const PartSpec& part) {
  if (part.count == 0 || part.index < part.count) return Status::OK();
  return Status::InvalidArgument(
      fmt::format("part {} of {}: K must be below N (parts count from 0)", part.index, part.count));
}

}  // namespace

std::string PartPath(const PartSpec& part) {
  return fmt::format("{}/{}/part-{:06}-of-{:06}.seg", kPartsDir, part.job, part.index, part.count);
}

Result<PartSpec> ParsePartSpec(std::string_view text, std::string_view job) {
  PartSpec part;
  if (text == "env") {
    STOKER_ASSIGN_OR_RETURN(part, PartFromEnvironment());
  } else {
    const size_t slash = text.find('/');
    const auto index = ParseIndex(text.substr(0, slash));
    const auto count = slash == std::string_view::npos ? std::optional<uint32_t>(part.count)
                                                       : ParseIndex(text.substr(slash + 1));
    if (!index || !count) {
      return Err(Status::InvalidArgument(fmt::format(
          "part '{}': expected K/N (parts count from 0: 0/4 .. 3/4), K, or env", text)));
    }
    part.index = *index;
    part.count = *count;
  }
  // Here too, not only when the part is written: a bad --part is a usage error (exit 2).
  STOKER_RETURN_IF_ERROR(CheckPartInRange(part));
  if (!job.empty()) part.job = job;
  return part;
}

Status ValidateJobName(std::string_view job) {
  const bool ok =
      !job.empty() && job.size() <= 64 && job != "." && job != ".." &&
      std::all_of(job.begin(), job.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
      });
  if (ok) return Status::OK();
  return Status::InvalidArgument(
      fmt::format("job name '{}': use 1-64 letters, digits, '.', '_' or '-'", job));
}

Result<PartSpec> PartFromEnvironment() {
  PartSpec part;
  if (const char* task = Env("SLURM_ARRAY_TASK_ID")) {
    const char* min = Env("SLURM_ARRAY_TASK_MIN");
    const char* count = Env("SLURM_ARRAY_TASK_COUNT");
    const char* step = Env("SLURM_ARRAY_TASK_STEP");  // --array=0-14:2
    const auto k = ParseIndex(task), lo = ParseIndex(min ? min : "0"),
               n = ParseIndex(count ? count : "0"), by = ParseIndex(step ? step : "1");
    if (!k || !lo || !n || !by || *by == 0 || *k < *lo) {
      return Err(Status::InvalidArgument(
          "cannot read the part from SLURM_ARRAY_TASK_ID/_MIN/_COUNT/_STEP"));
    }
    if ((*k - *lo) % *by != 0) {
      return Err(Status::InvalidArgument(fmt::format(
          "array task {} is not on the array's step ({} from {}): give the array as a range "
          "(--array=A-B or A-B:S), or --part K/N",
          *k, *by, *lo)));
    }
    part.index = (*k - *lo) / *by;
    part.count = *n;
    if (const char* job = Env("SLURM_ARRAY_JOB_ID")) part.job = fmt::format("slurm-{}", job);
    return part;
  }
  if (const char* index = Env("JOB_COMPLETION_INDEX")) {
    const auto k = ParseIndex(index);
    const char* parts = Env("STOKER_PARTS");
    const auto n = ParseIndex(parts ? parts : "0");
    if (!k || !n)
      return Err(Status::InvalidArgument("cannot read the part from JOB_COMPLETION_INDEX"));
    part.index = *k;
    part.count = *n;
    return part;
  }
  return Err(Status::NotFound(
      "--part without K/N needs a Slurm array task (SLURM_ARRAY_TASK_ID) or a Kubernetes "
      "Indexed Job (JOB_COMPLETION_INDEX)"));
}

namespace {

Status JobClosed(const Storage& dst, const PartSpec& part) {
  return Status::AlreadyExists(fmt::format(
      "{}: job '{}' was already committed or discarded; a part written after that is refused "
      "(write the parts of a new version under another --job name)",
      dst.Describe(ClosedPath(part.job)), part.job));
}

Status PackedTwice(const Storage& dst, const std::string& path, const PartSpec& part) {
  return Status::AlreadyExists(fmt::format(
      "{} was already written (part {} of job '{}' packed twice?); commit or remove it first",
      dst.Describe(path), part.index, part.job));
}

}  // namespace

Result<std::string> WritePart(Storage& dst, Addition& add, const PartSpec& part) {
  STOKER_RETURN_IF_ERROR(ValidateJobName(part.job));
  STOKER_RETURN_IF_ERROR(CheckPartInRange(part));
  // Unnumbered: Commit numbers the union. Only .cls labels are the input's own.
  format::SegmentNumbering numbering;
  numbering.flags = add.group_samples ? format::kSegmentGrouped : 0;
  if (add.any_cls_label() && add.labels == LabelPolicy::kAuto) {
    numbering.flags |= format::kSegmentLabelled;
    numbering.labels = format::LabelSource::kInput;
    numbering.classes = ClsClassNames(0, add.files->max_label());
  }
  // A part's name is fixed, so it is created exclusively from bytes in memory (a part packed
  // twice is refused); a part's segment is ~30 bytes per file.
  format::InMemorySegmentSink sink;
  STOKER_RETURN_IF_ERROR(add.files->Write(numbering, sink));
  const std::string& bytes = sink.bytes;
  std::string path = PartPath(part);
  STOKER_RETURN_IF_ERROR(dst.CreateDirs(JobDir(part.job)));
  STOKER_ASSIGN_OR_RETURN(bool closed, dst.Exists(ClosedPath(part.job)));
  if (closed) return Err(JobClosed(dst, part));
  // The same K under another N (K/N next to a bare K): the exclusive create below cannot see it.
  if (auto names = dst.List(JobDir(part.job)); names) {
    for (const std::string& name : *names) {
      const auto kn = ParsePartName(name);
      if (kn && kn->first == part.index && kn->second != part.count) {
        return Err(PackedTwice(dst, JobDir(part.job) + "/" + name, part));
      }
    }
  }
  if (!add.columns.empty()) {
    // Before the segment, whose creation makes the part whole: a schema without a segment is
    // a part that never finished, rewritten by its next attempt.
    STOKER_ASSIGN_OR_RETURN(const bool written, dst.Exists(path));
    if (written) return Err(PackedTwice(dst, path, part));
    STOKER_RETURN_IF_ERROR(storage::WriteSmallFile(dst, ColumnsPath(path), add.columns));
  }
  const Status created =
      dst.CreateExclusive(path, {reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()});
  if (created.IsAlreadyExists()) return Err(PackedTwice(dst, path, part));
  STOKER_RETURN_IF_ERROR(created);
  // A commit writes the marker before it lists the parts: a part created before the marker is
  // in its listing; one whose writer sees the marker now may not be, so it goes.
  STOKER_ASSIGN_OR_RETURN(closed, dst.Exists(ClosedPath(part.job)));
  if (closed) {
    (void)dst.Remove(path);
    if (!add.columns.empty()) (void)dst.Remove(ColumnsPath(path));
    return Err(JobClosed(dst, part));
  }
  return path;
}

namespace {

// Removes every file of the job's directory but its marker: the parts published or discarded,
// their schemas, and the parts of attempts nobody accepted. Failures leave files gc collects.
// Returns how many part segments went.
uint64_t RemovePartsOfJob(Storage& storage, std::string_view job) {
  const std::string dir = JobDir(job);
  auto names = storage.List(dir);
  if (!names) return 0;
  uint64_t parts = 0;
  for (const std::string& name : *names) {
    if (name == kClosedName) continue;
    parts += storage.Remove(fmt::format("{}/{}", dir, name)).ok() && ParsePartName(name);
  }
  return parts;
}

Status JobAlreadyClosed(const Storage& storage, std::string_view job) {
  return Status::AlreadyExists(fmt::format(
      "{} exists: job '{}' is being committed, or was committed or discarded (the parts of "
      "a job are published once; an engine's commit killed midway leaves the file, and its job "
      "is written again under a new name while gc collects the old one's parts)",
      storage.Describe(ClosedPath(job)), job));
}

// Creates the job's marker, exclusively: one commit or discard of a job at a time.
Status CloseJob(Storage& storage, std::string_view job, std::string_view why) {
  STOKER_RETURN_IF_ERROR(storage.CreateDirs(JobDir(job)));
  const std::string text = fmt::format("{}\n", why);
  const Status created = storage.CreateExclusive(
      ClosedPath(job), {reinterpret_cast<const std::byte*>(text.data()), text.size()});
  return created.IsAlreadyExists() ? JobAlreadyClosed(storage, job) : created;
}

}  // namespace

Result<PackSummary> Commit(Storage& storage, const CommitOptions& options) {
  STOKER_RETURN_IF_ERROR(ValidateJobName(options.job));
  // An engine's commit (`only`) closes the job before it lists the parts (parts.h), for good
  // once published, so that a late attempt is refused; if nothing was published it reopens the
  // job. A job committed whole (`stoker commit`) is not closed: its name can name the next
  // parts, and two such commits at once still publish once (the loser finds its paths in the
  // dataset, or no parts); only a closed job is refused.
  const bool engine = !options.only.empty();
  // The lease comes first: a closed job's files are garbage to gc (FilesOfClosedJobs) except
  // while a writer that was at work when gc saw them still is, and this commit is one.
  STOKER_ASSIGN_OR_RETURN(auto lease, WriterLease::Take(storage));
  if (engine) {
    STOKER_RETURN_IF_ERROR(CloseJob(storage, options.job, "committed"));
  } else {
    STOKER_ASSIGN_OR_RETURN(const bool closed, storage.Exists(ClosedPath(options.job)));
    if (closed) return Err(JobAlreadyClosed(storage, options.job));
  }
  PackSummary summary;
  auto published = [&]() -> Result<PackSummary> {
    STOKER_ASSIGN_OR_RETURN(auto parts, OpenParts(storage, options));
    STOKER_ASSIGN_OR_RETURN(Addition add, UnionOf(parts, storage));
    summary.files_added = add.files->file_count();
    summary.bytes_added = add.files->total_bytes();
    std::string segment_path;
    // A failed publish removed its segment, unless the store could not say whether the version
    // was published: then it stays, and gc removes it if no version lists it.
    return PublishAddition(storage, add, PublishPolicy::kEither, *lease, summary, &segment_path);
  }();
  if (!published) {
    if (engine) (void)storage.Remove(ClosedPath(options.job));
    return published;
  }
  // Published: the parts are spent (a failure here leaves files that gc collects).
  RemovePartsOfJob(storage, options.job);
  return published;
}

Result<DiscardResult> DiscardParts(Storage& storage, std::string_view job, bool close_empty) {
  STOKER_RETURN_IF_ERROR(ValidateJobName(job));
  STOKER_ASSIGN_OR_RETURN(const bool has_job, storage.Exists(JobDir(job)));
  if (!has_job && !close_empty) {
    return Err(Status::NotFound(
        fmt::format("{} holds no parts of job '{}'", storage.Describe(JobDir(job)), job)));
  }
  // Closed already (committed, being committed, or discarded): nothing to do, and nothing of a
  // commit at work is touched; its parts are gc's once it ends.
  const Status closed = CloseJob(storage, job, "discarded");
  if (closed.IsAlreadyExists()) return DiscardResult{.already_closed = true};
  STOKER_RETURN_IF_ERROR(closed);
  return DiscardResult{.parts_removed = RemovePartsOfJob(storage, job)};
}

Result<std::vector<std::string>> FilesOfClosedJobs(Storage& storage) {
  std::vector<std::string> out;
  auto jobs = storage.List(kPartsDir);
  if (!jobs) {
    return jobs.error().IsNotFound() ? Result<std::vector<std::string>>(out) : Err(jobs.error());
  }
  for (const std::string& job : *jobs) {
    auto names = storage.List(JobDir(job));
    if (!names || !std::ranges::binary_search(*names, kClosedName)) continue;
    // The marker last: it goes once nothing else is left, so that it refuses late attempts
    // for as long as their job has files.
    for (const std::string& name : *names) {
      if (name != kClosedName || names->size() == 1) {
        out.push_back(fmt::format("{}/{}", JobDir(job), name));
      }
    }
  }
  return out;
}

Result<UncommittedParts> ListUncommittedParts(Storage& storage) {
  UncommittedParts out;
  auto jobs = storage.List(kPartsDir);
  if (!jobs)
    return jobs.error().IsNotFound() ? Result<UncommittedParts>(std::move(out)) : Err(jobs.error());
  for (const std::string& job : *jobs) {
    const std::string dir = fmt::format("{}/{}", kPartsDir, job);
    auto names = storage.List(dir);
    // A closed job publishes nothing more: its parts are garbage (FilesOfClosedJobs).
    if (!names || std::ranges::binary_search(*names, kClosedName)) continue;
    OpenJob open{.job = job};
    for (const std::string& name : *names) {
      const auto spec = ParsePartName(name);
      if (!spec) continue;
      auto file = storage.OpenRead(dir + "/" + name);
      if (!file) continue;
      // A damaged part cannot be committed; its chunks become garbage like any other.
      auto segment = format::Segment::Open(std::move(*file), storage.Describe(dir + "/" + name));
      if (!segment) continue;
      ++open.parts;
      open.count = std::max(open.count, spec->second);
      for (uint64_t c = 0; c < (*segment)->info().chunk_count; ++c) {
        auto chunk = (*segment)->chunk(c);
        if (!chunk) break;  // as above: garbage like any other
        out.chunks.insert(format::ChunkPath(chunk->id));
        ++open.chunks;
      }
    }
    if (open.parts > 0) out.jobs.push_back(std::move(open));
  }
  return out;
}

}  // namespace stoker::dataset
