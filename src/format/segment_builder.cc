#include "format/segment_builder.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <unordered_map>

#include <fmt/format.h>

#include "common/coding.h"
#include "common/crc32c.h"
#include "common/varint.h"
#include "format/segment_layout.h"
#include "format/segment_writer.h"
#include "format/snapshot_builder.h"

namespace stoker::format {
namespace {

// The sample of a file key: its directory and name up to the first '.' (SampleKeyOf).
std::string_view SampleKeyOfKey(std::string_view key) {
  const size_t nul = key.find('\0');
  return key.substr(0, key.find('.', nul));
}

// Sort records, by key: varint key size | key | u32 chunk | varint entry | varint length |
// u32 crc | varint label + 1 | varint attribute count | (varint size | bytes) per name and value.
struct KeyRecord {
  std::string key;
  uint32_t chunk = 0;
  uint64_t entry = 0, length = 0;
  uint32_t crc32c = 0;
  int32_t label = -1;
  std::vector<Attribute> attributes;
};

std::string_view RecordKey(std::string_view record) {
  const uint64_t size = varint::GetOwn(&record);
  return record.substr(0, size);
}

// Reads a varint and `n` bytes from a record this builder wrote.
uint64_t TakeVarint(std::string_view* in) { return varint::GetOwn(in); }
std::string_view TakeBytes(std::string_view* in, uint64_t n) {
  const std::string_view bytes = in->substr(0, n);
  in->remove_prefix(n);
  return bytes;
}
uint32_t TakeU32(std::string_view* in) {
  return coding::DecodeFixed<uint32_t>(TakeBytes(in, 4).data());
}

KeyRecord DecodeKeyRecord(std::string_view in) {
  KeyRecord r;
  r.key = TakeBytes(&in, TakeVarint(&in));
  r.chunk = TakeU32(&in);
  r.entry = TakeVarint(&in);
  r.length = TakeVarint(&in);
  r.crc32c = TakeU32(&in);
  r.label = static_cast<int32_t>(static_cast<int64_t>(TakeVarint(&in)) - 1);
  for (uint64_t n = TakeVarint(&in); n > 0; --n) {
    std::string name(TakeBytes(&in, TakeVarint(&in)));
    std::string value(TakeBytes(&in, TakeVarint(&in)));
    r.attributes.emplace_back(std::move(name), std::move(value));
  }
  return r;
}

// A location as the builder keeps it, in ordinal order: varint position | varint length |
// u32 crc | varint label + 1 | varint class directory + 1 (index into first_level_dirs()) |
// varint sample | varint files of the sample on its first file, else 0.
struct LocationRecord {
  uint64_t position = 0, length = 0;
  uint32_t crc32c = 0;
  int32_t label = -1;
  int64_t dir_class = -1;
  uint64_t sample = 0, sample_files = 0;
};

void PutLocationRecord(std::string* out, const LocationRecord& l) {
  varint::Put(out, l.position);
  varint::Put(out, l.length);
  coding::PutFixed<uint32_t>(out, l.crc32c);
  varint::Put(out, static_cast<uint64_t>(int64_t{l.label} + 1));
  varint::Put(out, static_cast<uint64_t>(l.dir_class + 1));
  varint::Put(out, l.sample);
  varint::Put(out, l.sample_files);
}

LocationRecord TakeLocationRecord(std::string_view* in) {
  LocationRecord l;
  l.position = TakeVarint(in);
  l.length = TakeVarint(in);
  l.crc32c = TakeU32(in);
  l.label = static_cast<int32_t>(static_cast<int64_t>(TakeVarint(in)) - 1);
  l.dir_class = static_cast<int64_t>(TakeVarint(in)) - 1;
  l.sample = TakeVarint(in);
  l.sample_files = TakeVarint(in);
  return l;
}

constexpr uint64_t kMaxLocationRecord = 6 * varint::kMaxBytes + 4;

// A file's label in the new segment: by its class directory, as the input gave it, or none.
int32_t LabelOf(const LocationRecord& l, const SegmentNumbering& n) {
  if (n.labels == LabelSource::kDirs) return l.dir_class >= 0 ? n.dir_labels[l.dir_class] : -1;
  if (n.labels == LabelSource::kInput) return l.label;
  return -1;
}

// A whole section copied from a spool.
Status CopySection(SegmentFileWriter& out, uint32_t kind, const Spool& spool) {
  out.Begin(kind);
  STOKER_RETURN_IF_ERROR(spool.CopyTo([&](std::string_view b) { return out.Append(b); }));
  out.End();
  return Status::OK();
}

Status WriteClasses(SegmentFileWriter& out, const std::vector<std::string>& names) {
  std::string classes;
  for (const std::string& name : names) {
    varint::Put(&classes, name.size());
    classes.append(name);
  }
  return out.Section(kSegClasses, classes);
}

// The path of a key the builder made itself: KeyOfPath always writes the separator, so a
// key without one is a bug (or a damaged spool file), never a path to write.
Result<std::string> PathOfBuiltKey(std::string_view key) {
  std::optional<std::string> path = PathOfFileKey(key);
  if (!path) return Err(Status::Internal("a file key without a separator"));
  return *std::move(path);
}

}  // namespace

// What Seal's steps share while it runs (SegmentBuilder::State::Seal*).
struct SealWork {
  SealWork(const SortOptions& sort, size_t chunk_count)
      : by_location(sort,
                    [](std::string_view a, std::string_view b) {
                      return a.substr(0, 8) <
                             b.substr(0, 8);  // big-endian ordinals: byte order is numeric
                    }),
        entries(chunk_count),
        payload(chunk_count) {}
  ExternalSorter by_location;              // ordinal | LocationRecord, for WriteLocations
  std::vector<uint64_t> entries, payload;  // per chunk: the files and payload bytes seen
  std::unordered_map<std::string, int64_t> dir_class_of;  // first component -> first-seen rank
  std::vector<std::string> dir_class_names;               // by first-seen rank
  std::vector<KeyRecord> sample;                          // the files of the sample being read
  std::string scratch;
};

struct SegmentBuilder::State {
  explicit State(SortOptions options)
      : sort(std::move(options)), by_key(sort, [](std::string_view a, std::string_view b) {
          return RecordKey(a) < RecordKey(b);
        }) {}

  SortOptions sort;
  ExternalSorter by_key;
  std::string record;  // scratch
  bool sealed = false;
  bool grouped = false;

  // Known after Seal().
  std::vector<ChunkInfo> chunks;
  std::vector<uint64_t> first_location;  // per chunk, then the file count
  std::vector<uint32_t> chunk_samples;   // per chunk: the samples whose first file lies in it
  uint64_t files = 0, samples = 0, total_bytes = 0;
  std::vector<std::string> first_dirs;
  std::optional<std::string> outside, duplicate;
  int32_t max_label = -1;
  std::string first_key, last_key;
  DirTable dirs;
  std::optional<Spool> keys;       // varint size | key, in key order
  std::optional<Spool> locations;  // LocationRecord, in ordinal order
  std::optional<Spool> file_blocks, samples_section, attr_blocks;
  std::unique_ptr<KeyedTableWriter> file_table, attr_table;

  // Seal's steps, in order.
  Status OpenOutputs();
  Status ReadKeys(SealWork& w, Grouping grouping);
  Status FlushSample(SealWork& w, Grouping grouping);
  Status FinishKeyOrder(SealWork& w, Grouping grouping);
  Status CheckChunksAreFilled(const SealWork& w) const;
  Status CheckNoPathIsFileAndDirectory() const;
  Status WriteLocations(SealWork& w);
  Status ForEachKey(const std::function<Status(std::string_view)>& fn) const;

  // Write's steps, in order (after Seal).
  Status CheckNumbering(const SegmentNumbering& n) const;
  Status WriteChunkTable(SegmentFileWriter& out, const SegmentNumbering& n) const;
  Status WriteLocationsSection(SegmentFileWriter& out, const SegmentNumbering& n) const;
};

SegmentBuilder::SegmentBuilder(SortOptions sort) : s_(std::make_unique<State>(std::move(sort))) {}
SegmentBuilder::~SegmentBuilder() = default;

Status SegmentBuilder::Add(const SegmentEntry& e) {
  if (s_->sealed) return Status::Internal("SegmentBuilder::Add after Seal");
  STOKER_RETURN_IF_ERROR(ValidateRelativePath(e.path));
  std::string& r = s_->record;
  r.clear();
  const std::string key = FileKeyOf(e.path);
  varint::Put(&r, key.size());
  r.append(key);
  coding::PutFixed<uint32_t>(&r, e.chunk);
  varint::Put(&r, e.entry);
  varint::Put(&r, e.length);
  coding::PutFixed<uint32_t>(&r, e.crc32c);
  varint::Put(&r, static_cast<uint64_t>(int64_t{std::max(e.label, -1)} + 1));
  // A file's attributes sort by name (their keys in the attribute table).
  std::vector<const Attribute*> attrs;
  for (const Attribute& a : e.attributes) attrs.push_back(&a);
  std::sort(attrs.begin(), attrs.end(), [](auto* a, auto* b) { return a->first < b->first; });
  varint::Put(&r, attrs.size());
  for (size_t i = 0; i < attrs.size(); ++i) {
    if (i > 0 && attrs[i]->first == attrs[i - 1]->first) {
      return Status::InvalidArgument(
          fmt::format("{}: attribute '{}' is given twice", e.path, attrs[i]->first));
    }
    varint::Put(&r, attrs[i]->first.size());
    r.append(attrs[i]->first);
    varint::Put(&r, attrs[i]->second.size());
    r.append(attrs[i]->second);
  }
  return s_->by_key.Add(r);
}

Status SegmentBuilder::Seal(std::vector<ChunkInfo> chunks, Grouping grouping) {
  State& s = *s_;
  if (s.sealed) return Status::Internal("SegmentBuilder::Seal twice");
  s.sealed = true;
  s.grouped = grouping != Grouping::kFiles;
  s.chunks = std::move(chunks);
  s.first_location.assign(s.chunks.size() + 1, 0);
  s.chunk_samples.assign(s.chunks.size(), 0);
  for (size_t c = 0; c < s.chunks.size(); ++c) {
    s.first_location[c + 1] = s.first_location[c] + s.chunks[c].entry_count;
  }
  STOKER_RETURN_IF_ERROR(s.OpenOutputs());
  SealWork work(s.sort, s.chunks.size());
  STOKER_RETURN_IF_ERROR(s.ReadKeys(work, grouping));
  STOKER_RETURN_IF_ERROR(s.FinishKeyOrder(work, grouping));
  STOKER_RETURN_IF_ERROR(s.CheckChunksAreFilled(work));
  STOKER_RETURN_IF_ERROR(s.CheckNoPathIsFileAndDirectory());
  return s.WriteLocations(work);
}

// The spools below exist from OpenOutputs (Seal) on, and Write refuses to run before Seal
// (CheckNumbering): the check cannot see either across calls.
// NOLINTBEGIN(bugprone-unchecked-optional-access)
Status SegmentBuilder::State::OpenOutputs() {
  STOKER_ASSIGN_OR_RETURN(keys, Spool::Create(sort.temp_dir));
  STOKER_ASSIGN_OR_RETURN(file_blocks, Spool::Create(sort.temp_dir));
  STOKER_ASSIGN_OR_RETURN(samples_section, Spool::Create(sort.temp_dir));
  STOKER_ASSIGN_OR_RETURN(attr_blocks, Spool::Create(sort.temp_dir));
  file_table = std::make_unique<KeyedTableWriter>(
      [this](std::string_view b) { return file_blocks->Append(b); }, sort.temp_dir);
  attr_table = std::make_unique<KeyedTableWriter>(
      [this](std::string_view b) { return attr_blocks->Append(b); }, sort.temp_dir);
  return Status::OK();
}

// The files in key order, a sample at a time (one file unless grouped): checks each against its
// chunk and counts what every chunk holds.
Status SegmentBuilder::State::ReadKeys(SealWork& w, Grouping grouping) {
  std::string previous;
  return by_key.Merge([&](std::string_view bytes) -> Status {
    KeyRecord r = DecodeKeyRecord(bytes);
    if (files + w.sample.size() > 0 && r.key == previous) {
      STOKER_ASSIGN_OR_RETURN(duplicate, PathOfBuiltKey(r.key));
      return Status::InvalidArgument("duplicate path: " + *duplicate);
    }
    if (r.chunk >= chunks.size()) return Status::Internal("a file names a missing chunk");
    if (r.entry >= chunks[r.chunk].entry_count) {
      STOKER_ASSIGN_OR_RETURN(const std::string path, PathOfBuiltKey(r.key));
      return Status::InvalidArgument(
          fmt::format("{}: entry {} of chunk {:016x}, which has {} entries", path, r.entry,
                      chunks[r.chunk].id, chunks[r.chunk].entry_count));
    }
    ++w.entries[r.chunk];
    w.payload[r.chunk] += r.length;
    if (!grouped ||
        (!w.sample.empty() && SampleKeyOfKey(w.sample.back().key) != SampleKeyOfKey(r.key))) {
      STOKER_RETURN_IF_ERROR(FlushSample(w, grouping));
    }
    previous = r.key;
    w.sample.push_back(std::move(r));
    return Status::OK();
  });
}

// Everything about the files of one sample, in key order: the samples section, the directory
// table, the file and attribute tables, and a location record per file (sorted later).
Status SegmentBuilder::State::FlushSample(SealWork& w, Grouping grouping) {
  std::vector<KeyRecord>& sample = w.sample;
  std::string& scratch = w.scratch;
  if (sample.empty()) return Status::OK();
  if (grouped) {
    scratch.clear();
    coding::PutFixed<uint64_t>(&scratch, files);
    STOKER_RETURN_IF_ERROR(samples_section->Append(scratch));
    if (grouping == Grouping::kSamplesSharingLabels) {
      int32_t label = -1;
      for (const KeyRecord& r : sample) label = std::max(label, r.label);
      for (KeyRecord& r : sample) r.label = label;
    }
  }
  // A sample's unit is the chunk of its first file (loader::SampleChunks).
  ++chunk_samples[sample.front().chunk];
  const uint64_t sample_index = samples++;
  for (const KeyRecord& r : sample) {
    const uint64_t p = files++;
    STOKER_ASSIGN_OR_RETURN(const std::string path, PathOfBuiltKey(r.key));
    AddToDirTable(dirs, path, p);
    LocationRecord l{p,
                     r.length,
                     r.crc32c,
                     r.label,
                     -1,
                     sample_index,
                     &r == &sample.front() ? sample.size() : 0};
    if (const size_t slash = path.find('/'); slash != std::string::npos) {
      auto [cls, fresh] = w.dir_class_of.try_emplace(
          path.substr(0, slash), static_cast<int64_t>(w.dir_class_names.size()));
      if (fresh) w.dir_class_names.push_back(path.substr(0, slash));
      l.dir_class = cls->second;
    } else if (!outside) {
      outside = path;
    }
    max_label = std::max(max_label, r.label);
    total_bytes += r.length;
    const uint64_t ordinal = first_location[r.chunk] + r.entry;
    scratch.clear();
    varint::Put(&scratch, ordinal);
    STOKER_RETURN_IF_ERROR(file_table->Add(r.key, scratch));
    STOKER_RETURN_IF_ERROR(keys->AppendRecord(r.key));
    for (const auto& [name, value] : r.attributes) {
      scratch.clear();
      PutBigEndian64(&scratch, p);  // byte order of keys is (position, name) order
      scratch.append(name);
      STOKER_RETURN_IF_ERROR(attr_table->Add(scratch, value));
    }
    scratch.clear();
    PutBigEndian64(&scratch, ordinal);
    PutLocationRecord(&scratch, l);
    STOKER_RETURN_IF_ERROR(w.by_location.Add(scratch));
    if (p == 0) first_key = r.key;
  }
  last_key = sample.back().key;
  sample.clear();
  return Status::OK();
}

// The last sample, the samples section's end, and every key-ordered output sealed.
Status SegmentBuilder::State::FinishKeyOrder(SealWork& w, Grouping grouping) {
  STOKER_RETURN_IF_ERROR(FlushSample(w, grouping));
  if (dirs.empty()) dirs[""];  // the root, also of an empty segment
  if (grouped) {
    w.scratch.clear();
    coding::PutFixed<uint64_t>(&w.scratch, files);
    STOKER_RETURN_IF_ERROR(samples_section->Append(w.scratch));
  } else {
    samples = files;
  }
  STOKER_RETURN_IF_ERROR(file_table->Finish());
  STOKER_RETURN_IF_ERROR(attr_table->Finish());
  for (auto* spool : {&*keys, &*file_blocks, &*samples_section, &*attr_blocks}) {
    STOKER_RETURN_IF_ERROR(spool->Seal());
  }
  return Status::OK();
}

// Payloads lie back to back, so the files of a chunk must fill it exactly.
Status SegmentBuilder::State::CheckChunksAreFilled(const SealWork& w) const {
  for (size_t c = 0; c < chunks.size(); ++c) {
    const ChunkInfo& info = chunks[c];
    if (w.entries[c] != info.entry_count || info.file_size != w.payload[c] + info.fixed_bytes() ||
        info.entry_count >= kChunkRecordWideIndex) {
      return Status::InvalidArgument(fmt::format(
          "chunk {:016x}: {} files of {} payload bytes do not fill its {} entries and {} bytes",
          info.id, w.entries[c], w.payload[c], info.entry_count, info.file_size));
    }
  }
  return Status::OK();
}

// A path that is a file and a directory: every directory's key as a file, against the keys.
Status SegmentBuilder::State::CheckNoPathIsFileAndDirectory() const {
  std::vector<std::string> dir_keys;
  for (const auto& [dir, dir_files] : dirs) {
    if (!dir.empty()) dir_keys.push_back(FileKeyOf(dir));
  }
  std::sort(dir_keys.begin(), dir_keys.end());
  size_t d = 0;
  return ForEachKey([&](std::string_view key) -> Status {
    while (d < dir_keys.size() && dir_keys[d] < key) ++d;
    if (d < dir_keys.size() && dir_keys[d] == key) {
      STOKER_ASSIGN_OR_RETURN(const std::string path, PathOfBuiltKey(key));
      return Status::InvalidArgument(fmt::format("{} is both a file and a directory", path));
    }
    return Status::OK();
  });
}

// Class directories by name; locations in storage order, each ordinal exactly once.
Status SegmentBuilder::State::WriteLocations(SealWork& w) {
  first_dirs = w.dir_class_names;
  std::sort(first_dirs.begin(), first_dirs.end());
  std::vector<int64_t> sorted_class(w.dir_class_names.size());
  for (size_t k = 0; k < w.dir_class_names.size(); ++k) {
    sorted_class[k] = std::lower_bound(first_dirs.begin(), first_dirs.end(), w.dir_class_names[k]) -
                      first_dirs.begin();
  }
  STOKER_ASSIGN_OR_RETURN(locations, Spool::Create(sort.temp_dir));
  uint64_t expected = 0;
  Status by_ordinal = w.by_location.Merge([&](std::string_view bytes) -> Status {
    if (GetBigEndian64(bytes) != expected) {
      return Status::InvalidArgument(fmt::format(
          "two files are given the same place in a chunk (location {})", GetBigEndian64(bytes)));
    }
    ++expected;
    std::string_view in = bytes.substr(8);
    LocationRecord l = TakeLocationRecord(&in);
    if (l.dir_class >= 0) l.dir_class = sorted_class[l.dir_class];
    w.scratch.clear();
    PutLocationRecord(&w.scratch, l);
    return locations->Append(w.scratch);
  });
  if (!by_ordinal.ok()) return by_ordinal;
  return locations->Seal();
}

Status SegmentBuilder::State::ForEachKey(const std::function<Status(std::string_view)>& fn) const {
  if (!keys) return Status::Internal("SegmentBuilder::ForEachKey before Seal");
  Spool::Reader reader(*keys, 1 << 20);
  while (true) {
    STOKER_ASSIGN_OR_RETURN(auto key, reader.NextRecord());
    if (!key) return Status::OK();
    STOKER_RETURN_IF_ERROR(fn(*key));
  }
}

const std::optional<std::string>& SegmentBuilder::duplicate_path() const { return s_->duplicate; }
uint64_t SegmentBuilder::file_count() const { return s_->files; }
uint64_t SegmentBuilder::total_bytes() const { return s_->total_bytes; }
const std::vector<ChunkInfo>& SegmentBuilder::chunks() const { return s_->chunks; }
const std::vector<std::string>& SegmentBuilder::first_level_dirs() const { return s_->first_dirs; }
const std::optional<std::string>& SegmentBuilder::a_file_outside_dirs() const {
  return s_->outside;
}
int32_t SegmentBuilder::max_label() const { return s_->max_label; }

Status SegmentBuilder::ForEachKey(const std::function<Status(std::string_view)>& fn) const {
  return s_->ForEachKey(fn);
}

Status SegmentBuilder::State::CheckNumbering(const SegmentNumbering& n) const {
  if (!locations) return Status::Internal("SegmentBuilder::Write before Seal");
  if (n.first_label + uint64_t{n.classes.size()} > 0x7FFFFFFFull) {
    return Status::InvalidArgument("too many classes");
  }
  if (n.labels == LabelSource::kDirs && n.dir_labels.size() != first_dirs.size()) {
    return Status::Internal("a label is needed for every class directory");
  }
  if (n.flags & kSegmentPositioned) return Status::Internal("a new segment is in key order");
  return Status::OK();
}

Status SegmentBuilder::State::WriteChunkTable(SegmentFileWriter& out,
                                              const SegmentNumbering& n) const {
  const bool grouped_segment = n.flags & kSegmentGrouped;
  ChunkTableWriter table(out);
  for (size_t c = 0; c < chunks.size(); ++c) {
    const uint32_t sample_count = grouped_segment ? chunk_samples[c] : chunks[c].entry_count;
    STOKER_RETURN_IF_ERROR(table.Add(chunks[c], first_location[c], sample_count));
  }
  return table.Finish();
}

Status SegmentBuilder::State::WriteLocationsSection(SegmentFileWriter& out,
                                                    const SegmentNumbering& n) const {
  const uint64_t label_end = n.first_label + uint64_t{n.classes.size()};
  // Locations, chunk by chunk in storage order; offsets are implied by the lengths.
  const bool grouped_segment = n.flags & kSegmentGrouped;
  LocationsWriter writer(out, files, grouped_segment, sort.temp_dir);
  Spool::Reader reader(*locations, 1 << 20);
  size_t c = 0;
  uint64_t offset = kChunkHeaderSize, previous_length = 0;
  for (uint64_t k = 0; k < files; ++k) {
    STOKER_ASSIGN_OR_RETURN(std::string_view head, reader.Peek(kMaxLocationRecord));
    std::string_view in = head;
    const LocationRecord l = TakeLocationRecord(&in);
    reader.Skip(head.size() - in.size());
    while (first_location[c + 1] <= k) ++c;
    offset = k == first_location[c] ? kChunkHeaderSize : offset + previous_length;
    previous_length = l.length;
    const int32_t label = LabelOf(l, n);
    if (label >= 0 && static_cast<uint64_t>(label) >= label_end) {
      return Status::InvalidArgument(
          fmt::format("the file at position {}: label {} has no class", l.position, label));
    }
    STOKER_RETURN_IF_ERROR(writer.Add({.position = l.position,
                                       .chunk = c,
                                       .offset = offset,
                                       .length = l.length,
                                       .crc32c = l.crc32c,
                                       .label = label,
                                       .sample = l.sample,
                                       .sample_files = l.sample_files}));
  }
  return writer.Finish();
}

Status SegmentBuilder::Write(const SegmentNumbering& n, SegmentSink& sink) const {
  const State& s = *s_;
  STOKER_RETURN_IF_ERROR(s.CheckNumbering(n));
  SegmentFileWriter out(sink);
  STOKER_RETURN_IF_ERROR(out.Header());
  const bool grouped = n.flags & kSegmentGrouped;
  STOKER_RETURN_IF_ERROR(s.WriteChunkTable(out, n));
  STOKER_RETURN_IF_ERROR(s.WriteLocationsSection(out, n));
  STOKER_RETURN_IF_ERROR(CopySection(out, kSegFiles, *s.file_blocks));
  STOKER_RETURN_IF_ERROR(s.file_table->WriteIndex(out, kSegFileIndex, kSegFileKeys));
  STOKER_RETURN_IF_ERROR(WriteDirTable(out, s.dirs));
  STOKER_RETURN_IF_ERROR(WriteClasses(out, n.classes));
  if (grouped) {
    if (!s.grouped) return Status::Internal("a grouped segment from files sealed ungrouped");
    STOKER_RETURN_IF_ERROR(CopySection(out, kSegSamples, *s.samples_section));
  }
  STOKER_RETURN_IF_ERROR(CopySection(out, kSegAttrs, *s.attr_blocks));
  STOKER_RETURN_IF_ERROR(s.attr_table->WriteIndex(out, kSegAttrIndex, kSegAttrKeys));
  return out.Finish({.flags = n.flags,
                     .first_file = n.first_file,
                     .files = s.files,
                     .first_sample = n.first_sample,
                     .samples = grouped ? s.samples : s.files,
                     .first_label = n.first_label,
                     .classes = static_cast<uint32_t>(n.classes.size()),
                     .total_bytes = s.total_bytes,
                     .chunks = s.chunks.size(),
                     .dirs = s.dirs.size(),
                     .attrs = s.attr_table->count(),
                     .first_key = s.first_key,
                     .last_key = s.last_key});
}
// NOLINTEND(bugprone-unchecked-optional-access)

Status WritableFileSink::Append(std::string_view bytes) {
  buffer_.append(bytes);
  size_ += bytes.size();
  return buffer_.size() >= kBuffer ? Flush() : Status::OK();
}

Status WritableFileSink::Flush() {
  const Status s =
      file_.Append({reinterpret_cast<const std::byte*>(buffer_.data()), buffer_.size()});
  buffer_.clear();
  return s;
}

Result<std::string> BuildSegment(const SegmentSpec& spec) {
  // A file's entry in its chunk is its rank by offset (empty files before the file that
  // follows them at the same offset, as they were written); offsets must then tile the chunk.
  const uint64_t n = spec.files.size();
  std::vector<uint64_t> by_place(n);
  std::iota(by_place.begin(), by_place.end(), 0);
  for (const SegmentFile& f : spec.files) {
    if (f.chunk >= spec.chunks.size()) return Err(Status::Internal("file names a missing chunk"));
  }
  std::sort(by_place.begin(), by_place.end(), [&](uint64_t a, uint64_t b) {
    const SegmentFile &x = spec.files[a], &y = spec.files[b];
    return std::tie(x.chunk, x.offset, x.length, a) < std::tie(y.chunk, y.offset, y.length, b);
  });
  SegmentBuilder builder;
  uint64_t expect = kChunkHeaderSize, entry = 0;
  for (uint64_t k = 0; k < n; ++k) {
    const SegmentFile& f = spec.files[by_place[k]];
    if (k == 0 || f.chunk != spec.files[by_place[k - 1]].chunk)
      expect = kChunkHeaderSize, entry = 0;
    if (f.offset != expect) {
      return Err(Status::InvalidArgument(
          fmt::format("{}: offset {} in chunk {:016x}, expected {} (files must tile their chunk)",
                      f.path, f.offset, spec.chunks[f.chunk].id, expect)));
    }
    if (f.label < -1 || (f.label >= 0 && static_cast<uint64_t>(f.label) >=
                                             spec.first_label + spec.classes.size())) {
      return Err(
          Status::InvalidArgument(fmt::format("{}: label {} has no class", f.path, f.label)));
    }
    expect += f.length;
    STOKER_RETURN_IF_ERROR(
        builder.Add({f.path, f.chunk, entry++, f.length, f.crc32c, f.label, f.attributes}));
  }
  STOKER_RETURN_IF_ERROR(builder.Seal(
      spec.chunks, (spec.flags & kSegmentGrouped) ? Grouping::kSamples : Grouping::kFiles));
  InMemorySegmentSink sink;
  const SegmentNumbering numbering{spec.flags,
                                   spec.first_file,
                                   spec.first_sample,
                                   spec.first_label,
                                   spec.classes,
                                   LabelSource::kInput,
                                   {}};
  STOKER_RETURN_IF_ERROR(builder.Write(numbering, sink));
  return std::move(sink.bytes);
}

}  // namespace stoker::format
