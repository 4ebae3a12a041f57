#include "dataset/version_view.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <set>

#include <fmt/format.h>

#include "format/segment_layout.h"

namespace stoker::dataset {
namespace {

std::string_view BaseName(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

}  // namespace

Result<std::unique_ptr<VersionView>> VersionView::Open(Storage& storage,
                                                       format::VersionRecord record,
                                                       bool verify_checksums) {
  std::unique_ptr<VersionView> v(new VersionView());
  // Files and samples are numbered in u64; chunks in u32 (2^32 chunks of 64 MiB: 256 PiB).
  if (record.chunks > std::numeric_limits<uint32_t>::max()) {
    return Err(Status::Unsupported(
        fmt::format("version {} of {} has {} chunks; this stoker reads up to 2^32 - 1 per version",
                    record.version, storage.Describe(""), record.chunks)));
  }
  v->record_ = std::move(record);
  const format::VersionRecord& r = v->record_;
  if (!r.columns.empty()) {
    // The record's parser checked it already.
    STOKER_ASSIGN_OR_RETURN(v->columns_, format::ParseSchema(r.columns));
    if (!v->grouped()) {
      return Err(Status::Corruption(
          fmt::format("version {} of {} has columns but its samples are not grouped", r.version,
                      storage.Describe(""))));
    }
  }
  uint64_t files = 0, samples = 0, bytes = 0, chunks = 0;
  for (const format::SegmentRef& ref : r.segments) {
    const std::string path = format::SegmentPath(ref.id);
    const std::string name = storage.Describe(path);
    auto file = storage.OpenRead(path);
    if (!file) {
      if (file.error().IsNotFound()) {
        return Err(Status::Corruption(
            fmt::format("version {} lists segment {}, which is missing", r.version, name)));
      }
      return Err(file.error());
    }
    if ((*file)->Size() != ref.bytes) {
      return Err(Status::Corruption(fmt::format("segment {}: {} bytes, version {} says {}", name,
                                                (*file)->Size(), r.version, ref.bytes)));
    }
    format::SegmentOpenOptions options;
    options.verify_checksums = verify_checksums;
    STOKER_ASSIGN_OR_RETURN(auto segment, format::Segment::Open(std::move(*file), name, options));
    const format::SegmentInfo& info = segment->info();
    if (segment->footer_crc32c() != ref.footer_crc32c ||
        (info.flags & format::kSegmentDatasetFlags) != r.flags || info.first_file != files ||
        info.file_count != ref.files || info.first_sample != samples ||
        info.sample_count != ref.samples || info.first_label != v->classes_.size() ||
        info.class_count != ref.classes || info.chunk_count != ref.chunks) {
      return Err(Status::Corruption(
          fmt::format("segment {} is not the one version {} lists (its footer or counts differ)",
                      name, r.version)));
    }
    Part part;
    part.first_file = files;
    part.first_sample = samples;
    if (chunks + info.chunk_count > UINT32_MAX) {
      return Err(Status::Unsupported(
          fmt::format("version {} has 2^32 chunks or more (docs/format.md §7)", r.version)));
    }
    part.first_chunk = static_cast<uint32_t>(chunks);
    chunks += info.chunk_count;
    for (uint32_t k = 0; k < info.class_count; ++k) {
      v->classes_.emplace_back(segment->class_name(k));
    }
    files += info.file_count;
    samples += info.sample_count;
    bytes += info.total_bytes;
    part.segment = std::move(segment);
    v->parts_.push_back(std::move(part));
  }
  if (files != r.files || samples != r.samples || bytes != r.bytes || chunks != r.chunks ||
      v->classes_.size() != r.classes) {
    return Err(
        Status::Corruption(fmt::format("version {} of {}: its totals differ from its segments'",
                                       r.version, storage.Describe(""))));
  }
  v->chunk_count_ = static_cast<uint32_t>(chunks);
  return v;
}

bool VersionView::grouped() const { return record_.flags & format::kSegmentGrouped; }
bool VersionView::labelled() const { return record_.flags & format::kSegmentLabelled; }
bool VersionView::labels_from_dirs() const {
  return record_.flags & format::kSegmentLabelsFromDirs;
}

const VersionView::Part& VersionView::PartOfFile(uint64_t file) const {
  auto it = std::upper_bound(parts_.begin(), parts_.end(), file,
                             [](uint64_t f, const Part& p) { return f < p.first_file; });
  return *(it - 1);
}

const VersionView::Part& VersionView::PartOfSample(uint64_t s) const {
  auto it = std::upper_bound(parts_.begin(), parts_.end(), s,
                             [](uint64_t x, const Part& p) { return x < p.first_sample; });
  return *(it - 1);
}

// The last part whose chunks start at or before c: parts without chunks share their successor's
// first chunk and come before it.
Result<ChunkRef> VersionView::chunk(uint32_t c) const {
  if (c >= chunk_count_) {
    return Err(Status::InvalidArgument(
        fmt::format("chunk {} of a version with {} chunks", c, chunk_count_)));
  }
  const Part& part = PartOfChunk(c);
  STOKER_ASSIGN_OR_RETURN(const format::SegmentChunk chunk,
                          part.segment->chunk(c - part.first_chunk));
  ChunkRef ref;
  static_cast<format::ChunkInfo&>(ref) = chunk;
  ref.sample_count = chunk.sample_count;
  return ref;
}

std::string VersionView::ChunkName(uint32_t c) const {
  auto ref = chunk(c);
  return ref ? format::ChunkPath(ref->id) : fmt::format("chunk #{}", c);
}

const VersionView::Part& VersionView::PartOfChunk(uint32_t c) const {
  auto it = std::upper_bound(parts_.begin(), parts_.end(), c,
                             [](uint32_t x, const Part& p) { return x < p.first_chunk; });
  return *(it - 1);
}

FileLocation VersionView::Global(const Part& part, const format::SegmentLocation& l) const {
  return {l.offset, l.length, l.crc32c, part.first_chunk + static_cast<uint32_t>(l.chunk), l.label};
}

std::pair<uint64_t, uint64_t> VersionView::SampleFiles(uint64_t s) const {
  if (!grouped()) return {s, 1};
  const Part& part = PartOfSample(s);
  const auto [first, count] = part.segment->SampleFiles(s - part.first_sample);
  return {part.first_file + first, count};
}

Result<std::optional<uint64_t>> VersionView::FindFile(std::string_view path) const {
  for (const Part& part : parts_) {
    STOKER_ASSIGN_OR_RETURN(auto position, part.segment->FindFile(path));
    if (position) return std::optional<uint64_t>(part.first_file + *position);
  }
  return std::optional<uint64_t>();
}

Result<bool> VersionView::IsDir(std::string_view path) const {
  if (path.empty()) return true;
  for (const Part& part : parts_) {
    STOKER_ASSIGN_OR_RETURN(auto dir, part.segment->FindDir(path));
    if (dir) return true;
  }
  return false;
}

Result<std::vector<DirEntry>> VersionView::List(std::string_view dir) const {
  bool exists = dir.empty();
  std::set<std::string> subdirs;
  std::vector<DirEntry> files;
  for (const Part& part : parts_) {
    STOKER_ASSIGN_OR_RETURN(auto found, part.segment->FindDir(dir));
    if (!found) continue;
    exists = true;
    STOKER_ASSIGN_OR_RETURN(auto children, part.segment->ChildDirs(dir));
    for (auto& name : children) subdirs.insert(std::move(name));
    STOKER_ASSIGN_OR_RETURN(auto entries,
                            part.segment->Files(found->first_rank, found->file_count));
    for (uint64_t k = 0; k < entries.size(); ++k) {
      files.push_back({std::string(BaseName(entries[k].path)), false,
                       part.first_file + entries[k].location.position, entries[k].location.length});
    }
  }
  if (!exists) {
    STOKER_ASSIGN_OR_RETURN(auto file, FindFile(dir));
    if (file) return Err(Status::InvalidArgument(fmt::format("not a directory: {}", dir)));
    return Err(Status::NotFound(fmt::format("no such directory in dataset: {}", dir)));
  }
  // Each segment lists its files by name; files added later interleave with earlier ones.
  std::sort(files.begin(), files.end(),
            [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
  std::vector<DirEntry> out;
  out.reserve(subdirs.size() + files.size());
  for (const std::string& name : subdirs) out.push_back({name, true, 0, 0});
  for (DirEntry& f : files) out.push_back(std::move(f));
  return out;
}

Result<std::vector<std::string>> VersionView::Holding(std::span<const std::string> keys) const {
  std::vector<std::string> found;
  for (const Part& part : parts_) {
    STOKER_ASSIGN_OR_RETURN(auto held, part.segment->Holding(keys));
    for (auto& p : held) found.push_back(std::move(p));
  }
  std::sort(found.begin(), found.end());
  return found;
}

Result<std::string> VersionView::FilePath(uint64_t file) const {
  const Part& part = PartOfFile(file);
  return part.segment->FilePath(file - part.first_file);
}

Result<FileLocation> VersionView::Location(uint64_t file) const {
  if (locations_loaded_.load(std::memory_order_acquire)) return locations_[file];
  const Part& part = PartOfFile(file);
  STOKER_ASSIGN_OR_RETURN(auto l, part.segment->FileLocation(file - part.first_file));
  return Global(part, l);
}

Result<std::vector<std::pair<std::string, std::string>>> VersionView::Attributes(
    uint64_t file) const {
  const Part& part = PartOfFile(file);
  return part.segment->Attributes(file - part.first_file);
}

Status VersionView::LoadSamples() const {
  for (const Part& part : parts_) STOKER_RETURN_IF_ERROR(part.segment->LoadSamples());
  return Status::OK();
}

Result<std::vector<std::pair<uint64_t, FileLocation>>> VersionView::ChunkFiles(uint32_t c) const {
  std::vector<std::pair<uint64_t, FileLocation>> out;
  STOKER_RETURN_IF_ERROR(ReadChunk(c, &out, nullptr));
  return out;
}

Status VersionView::ReadChunk(uint32_t c, std::vector<std::pair<uint64_t, FileLocation>>* files,
                              std::vector<SampleRef>* samples) const {
  const Part& part = PartOfChunk(c);
  if (samples && grouped() && !part.segment->says_samples()) {
    return Status::Unsupported(
        fmt::format("segment {} (format 2) does not say which samples start in its chunks",
                    part.segment->name()));
  }
  STOKER_ASSIGN_OR_RETURN(auto locations, part.segment->ChunkLocations(c - part.first_chunk));
  files->reserve(files->size() + locations.size());
  for (const format::SegmentLocation& l : locations) {
    files->emplace_back(part.first_file + l.position, Global(part, l));
    if (samples && grouped() && l.sample_files > 0) {
      samples->push_back(
          {part.first_sample + l.sample, part.first_file + l.position, l.sample_files});
    }
  }
  return Status::OK();
}

std::optional<std::span<const std::pair<uint64_t, FileLocation>>> KeptLocations::ChunkFiles(
    uint32_t c) const {
  const auto it = std::lower_bound(chunks.begin(), chunks.end(), c);
  if (it == chunks.end() || *it != c) return std::nullopt;
  const size_t k = static_cast<size_t>(it - chunks.begin());
  return std::span<const std::pair<uint64_t, FileLocation>>(files.data() + chunk_begin[k],
                                                            chunk_begin[k + 1] - chunk_begin[k]);
}

std::optional<std::span<const SampleRef>> KeptLocations::ChunkSamples(uint32_t c) const {
  const auto it = std::lower_bound(chunks.begin(), chunks.end(), c);
  if (it == chunks.end() || *it != c || sample_begin.empty()) return std::nullopt;
  const size_t k = static_cast<size_t>(it - chunks.begin());
  return std::span<const SampleRef>(samples.data() + sample_begin[k],
                                    sample_begin[k + 1] - sample_begin[k]);
}

const SampleRef* KeptLocations::FindSample(uint64_t sample) const {
  const auto it = std::lower_bound(by_sample.begin(), by_sample.end(), sample,
                                   [&](uint32_t k, uint64_t s) { return samples[k].sample < s; });
  if (it == by_sample.end() || samples[*it].sample != sample) return nullptr;
  return &samples[*it];
}

const FileLocation* KeptLocations::Find(uint64_t file) const {
  const auto it = std::lower_bound(by_file.begin(), by_file.end(), file,
                                   [&](uint32_t k, uint64_t f) { return files[k].first < f; });
  if (it == by_file.end() || files[*it].first != file) return nullptr;
  return &files[*it].second;
}

Status VersionView::KeepChunkLocations(std::span<const uint32_t> chunks) const {
  const std::shared_ptr<const KeptLocations> before = kept_locations();
  auto kept = std::make_shared<KeptLocations>();
  const bool with_samples = grouped();
  kept->chunk_begin.push_back(0);
  if (with_samples) kept->sample_begin.push_back(0);
  for (uint32_t c : chunks) {
    if (c >= chunk_count()) {
      return Status::InvalidArgument(fmt::format("chunk {} of {}", c, chunk_count()));
    }
    if (!kept->chunks.empty() && c <= kept->chunks.back()) continue;  // repeated
    auto old_files = before ? before->ChunkFiles(c) : std::nullopt;
    auto old_samples = before ? before->ChunkSamples(c) : std::nullopt;
    if (old_files && (!with_samples || old_samples)) {
      kept->files.insert(kept->files.end(), old_files->begin(), old_files->end());
      const std::span<const SampleRef> reused = old_samples.value_or(std::span<const SampleRef>());
      kept->samples.insert(kept->samples.end(), reused.begin(), reused.end());
    } else {
      STOKER_RETURN_IF_ERROR(ReadChunk(c, &kept->files, with_samples ? &kept->samples : nullptr));
    }
    kept->chunks.push_back(c);
    kept->chunk_begin.push_back(kept->files.size());
    if (with_samples) kept->sample_begin.push_back(kept->samples.size());
  }
  const auto index_files = [&]() -> Status {
    if (kept->files.size() > std::numeric_limits<uint32_t>::max()) {
      return Status::Unsupported("more than 2^32 - 1 files' locations kept at once");
    }
    kept->by_file.resize(kept->files.size());
    std::iota(kept->by_file.begin(), kept->by_file.end(), 0u);
    std::sort(kept->by_file.begin(), kept->by_file.end(),
              [&](uint32_t a, uint32_t b) { return kept->files[a].first < kept->files[b].first; });
    return Status::OK();
  };
  STOKER_RETURN_IF_ERROR(index_files());
  if (with_samples) {
    // A sample's files usually share its first file's chunk; the others are looked up one by
    // one (a file block and a location block each).
    std::vector<std::pair<uint64_t, FileLocation>> strays;
    for (const SampleRef& s : kept->samples) {
      for (uint64_t f = s.first_file + 1; f < s.first_file + s.count; ++f) {
        if (kept->Find(f) != nullptr) continue;
        STOKER_ASSIGN_OR_RETURN(const FileLocation l, Location(f));
        strays.emplace_back(f, l);
      }
    }
    if (!strays.empty()) {
      kept->files.insert(kept->files.end(), strays.begin(), strays.end());
      STOKER_RETURN_IF_ERROR(index_files());
    }
    kept->by_sample.resize(kept->samples.size());
    std::iota(kept->by_sample.begin(), kept->by_sample.end(), 0u);
    std::sort(kept->by_sample.begin(), kept->by_sample.end(), [&](uint32_t a, uint32_t b) {
      return kept->samples[a].sample < kept->samples[b].sample;
    });
  }
  std::lock_guard lock(kept_mu_);
  kept_ = std::move(kept);
  return Status::OK();
}

std::shared_ptr<const KeptLocations> VersionView::kept_locations() const {
  std::lock_guard lock(kept_mu_);
  return kept_;
}

Status VersionView::LoadLocations() const {
  STOKER_RETURN_IF_ERROR(LoadSamples());
  if (has_locations()) return Status::OK();
  std::lock_guard lock(locations_mu_);
  if (has_locations()) return Status::OK();  // another thread loaded them meanwhile
  std::vector<FileLocation> all(record_.files);
  for (const Part& part : parts_) {
    // Every position exactly once: a segment whose blocks each check out could still, if
    // written by a broken or hostile writer, list one file twice and another never.
    std::vector<bool> seen(part.segment->info().file_count);
    uint64_t repeated = 0;
    STOKER_RETURN_IF_ERROR(
        part.segment->ForEachLocation([&](uint64_t, const format::SegmentLocation& l) {
          if (seen[l.position]) ++repeated;
          seen[l.position] = true;
          all[part.first_file + l.position] = Global(part, l);
        }));
    if (repeated > 0) {
      return Status::Corruption(
          fmt::format("segment {}: {} files have two locations", part.segment->name(), repeated));
    }
  }
  locations_ = std::move(all);
  locations_loaded_.store(true, std::memory_order_release);
  return Status::OK();
}

}  // namespace stoker::dataset
