#include "format/snapshot.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "common/coding.h"
#include "common/crc32c.h"
#include "common/hash.h"
#include "format/chunk.h"

namespace stoker::format {
namespace {

std::string_view TrimSlashes(std::string_view path) {
  while (!path.empty() && path.front() == '/') path.remove_prefix(1);
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  return path;
}

bool IsPowerOfTwo(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

}  // namespace

Result<std::unique_ptr<Snapshot>> Snapshot::Open(std::shared_ptr<const FileBytes> bytes,
                                                 std::string name,
                                                 const SnapshotOpenOptions& options) {
  std::unique_ptr<Snapshot> snap(new Snapshot());
  snap->bytes_ = std::move(bytes);
  const auto data = snap->bytes_->bytes();
  snap->base_ = data.data();
  const auto* p = reinterpret_cast<const char*>(data.data());
  const uint64_t size = data.size();
  auto corrupt = [&](std::string why) {
    return Err(Status::Corruption(fmt::format("snapshot {}: {}", name, why)));
  };
  if (size < kSnapshotHeaderSize + kSnapshotTrailerSize) return corrupt("too short");
  if (std::memcmp(p, kSnapshotMagic, sizeof(kSnapshotMagic)) != 0) return corrupt("bad magic");
  const char* trailer = p + size - kSnapshotTrailerSize;
  if (std::memcmp(trailer + 12, kSnapshotTrailerMagic, 4) != 0) {
    return corrupt("bad trailer magic (truncated?)");
  }
  if (coding::DecodeFixed<uint64_t>(trailer) != size) return corrupt("size in trailer differs");
  snap->crc32c_ = coding::DecodeFixed<uint32_t>(trailer + 8);
  if (options.verify_checksum && crc32c::Value(p, size - 8) != snap->crc32c_) {
    return corrupt("CRC32C mismatch");
  }
  // Checked after the CRC, so a flipped bit in this field reads as corruption, not as a newer
  // format.
  const uint32_t version = coding::DecodeFixed<uint32_t>(p + header::kVersion);
  if (version != kSnapshotVersion) {
    return Err(Status::Unsupported(
        fmt::format("snapshot {}: format version {} (this build reads version {})", name, version,
                    kSnapshotVersion)));
  }
  snap->flags_ = coding::DecodeFixed<uint32_t>(p + header::kFlags);
  snap->dataset_version_ = coding::DecodeFixed<uint64_t>(p + header::kDatasetVersion);
  snap->created_ = coding::DecodeFixed<uint64_t>(p + header::kCreatedUnix);
  snap->total_bytes_ = coding::DecodeFixed<uint64_t>(p + header::kTotalBytes);
  auto& c = snap->counts_;
  c.files = coding::DecodeFixed<uint32_t>(p + header::kFileCount);
  c.dirs = coding::DecodeFixed<uint32_t>(p + header::kDirCount);
  c.samples = coding::DecodeFixed<uint32_t>(p + header::kSampleCount);
  c.chunks = coding::DecodeFixed<uint32_t>(p + header::kChunkCount);
  c.classes = coding::DecodeFixed<uint32_t>(p + header::kClassCount);
  c.attrs = coding::DecodeFixed<uint32_t>(p + header::kAttrCount);
  c.file_slots = coding::DecodeFixed<uint32_t>(p + header::kFileHashSlots);
  c.dir_slots = coding::DecodeFixed<uint32_t>(p + header::kDirHashSlots);
  for (uint32_t s = 0; s < kSectionCount; ++s) {
    snap->section_offset_[s] = coding::DecodeFixed<uint64_t>(p + header::kSections + 16 * s);
    snap->section_size_[s] = coding::DecodeFixed<uint64_t>(p + header::kSections + 16 * s + 8);
  }
  STOKER_RETURN_IF_ERROR(snap->Validate(name));
  return snap;
}

// Checks everything an accessor will later trust. O(files + dirs + attrs + slots).
Status Snapshot::Validate(const std::string& name) {
  for (auto step : {&Snapshot::CheckSections, &Snapshot::CheckDirectories, &Snapshot::CheckFiles,
                    &Snapshot::CheckSamplesClassesAndAttributes, &Snapshot::CheckHashTables}) {
    if (std::string why = (this->*step)(); !why.empty()) {
      return Status::Corruption(fmt::format("snapshot {}: {}", name, why));
    }
  }
  return Status::OK();
}

// Section sizes as the counts say, in bounds and aligned; flags and counts consistent.
std::string Snapshot::CheckSections() const {
  const uint64_t body_end = bytes_->bytes().size() - kSnapshotTrailerSize;
  const Counts& c = counts_;
  const bool grouped = flags_ & kFlagGroupedSamples;
  const uint64_t expected_size[kSectionCount] = {
      uint64_t{c.chunks} * sizeof(ChunkRecord),
      uint64_t{c.dirs} * sizeof(DirRecord),
      uint64_t{c.files} * sizeof(FileRecord),
      grouped ? (uint64_t{c.samples} + 1) * 4 : 0,
      uint64_t{c.classes} * 4,
      uint64_t{c.attrs} * sizeof(AttrRecord),
      uint64_t{c.file_slots} * kHashSlotSize,
      uint64_t{c.dir_slots} * kHashSlotSize,
      section_size_[kSectionStrings],
  };
  for (uint32_t s = 0; s < kSectionCount; ++s) {
    const uint64_t off = section_offset_[s], sz = section_size_[s];
    if (sz != expected_size[s]) return fmt::format("section {} has the wrong size", s);
    if (off % 8 != 0 || off < kSnapshotHeaderSize || off > body_end || sz > body_end - off) {
      return fmt::format("section {} out of bounds", s);
    }
  }
  if (flags_ & ~(kFlagGroupedSamples | kFlagLabelled | kFlagLabelsFromDirectories))
    return "unknown flags";
  if (!grouped && c.samples != c.files) return "sample count differs from file count";
  if (c.dirs == 0) return "no root directory";
  if (!IsPowerOfTwo(c.file_slots) || c.file_slots <= c.files || !IsPowerOfTwo(c.dir_slots) ||
      c.dir_slots <= c.dirs) {
    return "bad hash table size";
  }
  if (section_size_[kSectionStrings] > 0xFFFFFFFFull) return "strings section too big";
  for (uint32_t i = 0; i < c.chunks; ++i) {
    if (chunk(i).file_size < kChunkHeaderSize + kChunkFooterSize)
      return fmt::format("chunk {} too small", i);
  }
  return "";
}

// Breadth-first, so every child comes after its parent (no cycles), and the children and files
// of each directory are contiguous ranges that tile the tables.
std::string Snapshot::CheckDirectories() const {
  const Counts& c = counts_;
  uint32_t next_child = 1, next_file = 0;
  for (uint32_t d = 0; d < c.dirs; ++d) {
    const DirRecord r = dir(d);
    if (!ValidString(r.name) || !ValidString(r.path)) return "bad directory name";
    if ((d == 0) != (r.parent == kNoParent) || (d > 0 && r.parent >= d)) {
      return fmt::format("directory {} has a bad parent", d);
    }
    if (r.child_count > 0 && r.first_child != next_child) return "bad directory children";
    if (r.child_count > c.dirs - next_child) return "directory children out of range";
    for (uint32_t k = 0; k < r.child_count; ++k) {
      if (dir(next_child + k).parent != d) return "child directory has another parent";
    }
    next_child += r.child_count;
    if (r.file_count > 0 && r.first_file != next_file) return "bad directory files";
    if (r.file_count > c.files - next_file) return "directory files out of range";
    next_file += r.file_count;
  }
  if (next_child != c.dirs || next_file != c.files) return "directories do not tile";
  return "";
}

// Every file in its directory's range, its extent inside its chunk, its label a class.
std::string Snapshot::CheckFiles() const {
  const Counts& c = counts_;
  uint32_t previous_dir = 0;
  for (uint32_t i = 0; i < c.files; ++i) {
    const FileRecord f = file(i);
    if (f.dir >= c.dirs || f.dir < previous_dir) return fmt::format("file {}: bad dir", i);
    const DirRecord d = dir(f.dir);
    if (i < d.first_file || i - d.first_file >= d.file_count) {
      return fmt::format("file {} outside its directory's range", i);
    }
    previous_dir = f.dir;
    if (!ValidString(f.name)) return fmt::format("file {}: bad name", i);
    if (f.chunk >= c.chunks) return fmt::format("file {}: bad chunk", i);
    const ChunkRecord ch = chunk(f.chunk);
    const uint64_t data_end = ch.file_size - kChunkFooterSize;
    if (f.offset < kChunkHeaderSize || f.offset > data_end || f.length > data_end - f.offset) {
      return fmt::format("file {}: extent outside its chunk", i);
    }
    if (f.label != kNoLabel && (f.label < 0 || static_cast<uint32_t>(f.label) >= c.classes)) {
      return fmt::format("file {}: bad label", i);
    }
  }
  return "";
}

std::string Snapshot::CheckSamplesClassesAndAttributes() const {
  const Counts& c = counts_;
  if (flags_ & kFlagGroupedSamples) {
    uint32_t prev = Load<uint32_t>(kSectionSamples, 0);
    if (prev != 0) return "samples table does not start at 0";
    for (uint32_t s = 1; s <= c.samples; ++s) {
      const uint32_t first = Load<uint32_t>(kSectionSamples, s);
      if (first <= prev || first > c.files) return "samples table not increasing";
      prev = first;
    }
    if (prev != c.files) return "samples table does not cover the files";
  }
  for (uint32_t k = 0; k < c.classes; ++k) {
    if (!ValidString(Load<uint32_t>(kSectionClasses, k))) return "bad class name";
  }
  uint32_t previous_attr_file = 0;
  for (uint32_t a = 0; a < c.attrs; ++a) {
    const AttrRecord r = Load<AttrRecord>(kSectionAttrs, a);
    if (r.file >= c.files || r.file < previous_attr_file || !ValidString(r.key) ||
        !ValidString(r.value)) {
      return fmt::format("attribute {} is bad", a);
    }
    previous_attr_file = r.file;
  }
  return "";
}

// Every slot in range, and at least one empty slot so that every probe ends early.
std::string Snapshot::CheckHashTables() const {
  auto sound = [&](Section s, uint32_t slots, uint32_t count) {
    bool has_empty = false;
    for (uint32_t k = 0; k < slots; ++k) {
      const auto index_plus_one = static_cast<uint32_t>(Load<uint64_t>(s, k));
      if (index_plus_one > count) return false;
      has_empty |= index_plus_one == 0;
    }
    return has_empty;
  };
  if (!sound(kSectionFileHash, counts_.file_slots, counts_.files) ||
      !sound(kSectionDirHash, counts_.dir_slots, counts_.dirs)) {
    return "hash table entry out of range";
  }
  return "";
}

bool Snapshot::ValidString(uint32_t strref) const {
  const uint64_t size = section_size_[kSectionStrings];
  if (uint64_t{strref} + 2 > size) return false;
  const auto len = coding::DecodeFixed<uint16_t>(base_ + section_offset_[kSectionStrings] + strref);
  return uint64_t{strref} + 2 + len <= size;
}

std::string_view Snapshot::String(uint32_t strref) const {
  const auto* at = reinterpret_cast<const char*>(base_ + section_offset_[kSectionStrings] + strref);
  return {at + 2, coding::DecodeFixed<uint16_t>(at)};
}

std::string_view Snapshot::class_name(uint32_t label) const {
  if (label >= counts_.classes) return {};
  return String(Load<uint32_t>(kSectionClasses, label));
}

std::string Snapshot::FilePath(uint32_t i) const {
  const FileRecord f = file(i);
  const std::string_view dir = dir_path(f.dir), name = String(f.name);
  std::string path;
  path.reserve(dir.size() + 1 + name.size());
  if (!dir.empty()) path.append(dir).push_back('/');
  path.append(name);
  return path;
}

std::pair<uint32_t, uint32_t> Snapshot::SampleFiles(uint32_t s) const {
  if (!grouped()) return {s, 1};
  const uint32_t first = Load<uint32_t>(kSectionSamples, s);
  return {first, Load<uint32_t>(kSectionSamples, s + 1u) - first};
}

std::vector<std::pair<std::string_view, std::string_view>> Snapshot::FileAttributes(
    uint32_t i) const {
  // Attributes are sorted by file: binary-search the first one of file i.
  uint32_t lo = 0, hi = counts_.attrs;
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo) / 2;
    if (Load<AttrRecord>(kSectionAttrs, mid).file < i)
      lo = mid + 1;
    else
      hi = mid;
  }
  std::vector<std::pair<std::string_view, std::string_view>> out;
  for (; lo < counts_.attrs; ++lo) {
    const AttrRecord r = Load<AttrRecord>(kSectionAttrs, lo);
    if (r.file != i) break;
    out.emplace_back(String(r.key), String(r.value));
  }
  return out;
}

std::optional<uint32_t> Snapshot::Probe(Section table, uint32_t slots, std::string_view path,
                                        uint64_t h, bool is_dir) const {
  const auto tag = static_cast<uint32_t>(h >> 32);
  const uint32_t mask = slots - 1;
  // Split once so candidates are compared without building their paths.
  const auto slash = path.rfind('/');
  const std::string_view parent = slash == std::string_view::npos ? "" : path.substr(0, slash);
  const std::string_view base = slash == std::string_view::npos ? path : path.substr(slash + 1);
  // Validation guarantees an empty slot exists, but bound the walk anyway.
  for (uint32_t step = 0, k = static_cast<uint32_t>(h) & mask; step < slots;
       ++step, k = (k + 1) & mask) {
    const uint64_t slot = Load<uint64_t>(table, k);
    const auto index_plus_one = static_cast<uint32_t>(slot);
    if (index_plus_one == 0) return std::nullopt;
    if (static_cast<uint32_t>(slot >> 32) != tag) continue;
    const uint32_t index = index_plus_one - 1;
    if (is_dir) {
      if (dir_path(index) == path) return index;
    } else {
      const FileRecord f = file(index);
      if (String(f.name) == base && dir_path(f.dir) == parent) return index;
    }
  }
  return std::nullopt;
}

std::optional<uint32_t> Snapshot::FindFile(std::string_view path) const {
  path = TrimSlashes(path);
  if (path.empty()) return std::nullopt;
  return Probe(kSectionFileHash, counts_.file_slots, path, Hash64(path), false);
}

// Memory-level parallelism: at a million files every probe misses the cache three times (slot,
// record, name). Resolving a group of paths stage by stage — hash all and prefetch their slots,
// then prefetch the records the slots name, then their names — overlaps those misses instead
// of paying them one after another.
void Snapshot::FindFiles(std::span<const std::string_view> paths,
                         std::span<std::optional<uint32_t>> out) const {
  constexpr size_t kGroup = 16;
  const uint32_t mask = counts_.file_slots - 1;
  const std::byte* slots = base_ + section_offset_[kSectionFileHash];
  const std::byte* records = base_ + section_offset_[kSectionFiles];
  const std::byte* strings = base_ + section_offset_[kSectionStrings];
  std::string_view trimmed[kGroup];
  uint64_t hash[kGroup];
  uint32_t candidate[kGroup];  // index + 1 from the home slot when its tag matches, else 0
  for (size_t base = 0; base < paths.size() && base < out.size(); base += kGroup) {
    const size_t n = std::min({kGroup, paths.size() - base, out.size() - base});
    for (size_t i = 0; i < n; ++i) {
      trimmed[i] = TrimSlashes(paths[base + i]);
      hash[i] = Hash64(trimmed[i]);
      __builtin_prefetch(slots + (hash[i] & mask) * kHashSlotSize);
    }
    for (size_t i = 0; i < n; ++i) {
      const uint64_t slot = Load<uint64_t>(kSectionFileHash, hash[i] & mask);
      const bool match = static_cast<uint32_t>(slot) != 0 &&
                         static_cast<uint32_t>(slot >> 32) == static_cast<uint32_t>(hash[i] >> 32);
      candidate[i] = match ? static_cast<uint32_t>(slot) : 0;
      if (match) __builtin_prefetch(records + uint64_t{candidate[i] - 1} * sizeof(FileRecord));
    }
    for (size_t i = 0; i < n; ++i) {
      if (candidate[i] != 0) __builtin_prefetch(strings + file(candidate[i] - 1).name);
    }
    for (size_t i = 0; i < n; ++i) {
      out[base + i] = trimmed[i].empty()
                          ? std::nullopt
                          : Probe(kSectionFileHash, counts_.file_slots, trimmed[i], hash[i], false);
    }
  }
}

std::optional<uint32_t> Snapshot::FindDir(std::string_view path) const {
  path = TrimSlashes(path);
  if (path.empty()) return 0;
  return Probe(kSectionDirHash, counts_.dir_slots, path, Hash64(path), true);
}

}  // namespace stoker::format
