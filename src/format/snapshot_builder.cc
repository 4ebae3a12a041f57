#include "format/snapshot_builder.h"

#include <algorithm>
#include <charconv>
#include <functional>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "common/coding.h"
#include "common/crc32c.h"
#include "common/hash.h"

namespace stoker::format {
namespace {

constexpr size_t kMaxComponent = 255;
constexpr size_t kMaxPath = 4096;  // Linux's PATH_MAX
constexpr size_t kMaxString = 0xFFFF;

std::string_view ParentOf(std::string_view path) {
  const auto slash = path.rfind('/');
  return slash == std::string_view::npos ? std::string_view() : path.substr(0, slash);
}
std::string_view BaseOf(std::string_view path) {
  const auto slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}
// WebDataset's grouping key: the name up to its first '.'.
std::string_view KeyOf(std::string_view name) { return name.substr(0, name.find('.')); }

}  // namespace

std::string_view SampleKeyOf(std::string_view path) {
  const size_t base = path.size() - BaseOf(path).size();
  return path.substr(0, base + KeyOf(path.substr(base)).size());
}

namespace {

// Appends strings to the strings section, deduplicating the ones asked to.
class StringPool {
 public:
  Result<uint32_t> Add(std::string_view s, bool dedupe) {
    if (s.size() > kMaxString) {
      return Err(
          Status::InvalidArgument(fmt::format("string too long for a snapshot ({} bytes): "
                                              "{}...",
                                              s.size(), s.substr(0, 64))));
    }
    if (dedupe) {
      if (auto it = seen_.find(std::string(s)); it != seen_.end()) return it->second;
    }
    if (bytes_.size() + 2 + s.size() > 0xFFFFFFFFull) {
      return Err(Status::ResourceExhausted("snapshot strings exceed 4 GiB"));
    }
    const auto ref = static_cast<uint32_t>(bytes_.size());
    coding::PutFixed<uint16_t>(&bytes_, static_cast<uint16_t>(s.size()));
    bytes_.append(s);
    if (dedupe) seen_.emplace(std::string(s), ref);
    return ref;
  }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
  std::unordered_map<std::string, uint32_t> seen_;
};

uint32_t HashSlotsFor(size_t count) {
  uint64_t slots = 8;
  while (slots < count + count / 2 + 1) slots <<= 1;
  return static_cast<uint32_t>(slots);
}

// Open-addressing table of (index + 1, hash tag), linear probing (snapshot_layout.h).
std::string BuildHashTable(uint32_t slots, size_t count,
                           const std::function<std::string_view(size_t)>& key_of) {
  std::vector<uint64_t> table(slots, 0);
  const uint32_t mask = slots - 1;
  for (size_t i = 0; i < count; ++i) {
    const uint64_t h = Hash64(key_of(i));
    uint32_t k = static_cast<uint32_t>(h) & mask;
    while (table[k] != 0) k = (k + 1) & mask;
    table[k] = ((h >> 32) << 32) | (static_cast<uint64_t>(i) + 1);
  }
  return std::string(reinterpret_cast<const char*>(table.data()), table.size() * kHashSlotSize);
}

template <typename T>
void AppendRecord(std::string* out, const T& record) {
  out->append(reinterpret_cast<const char*>(&record), sizeof(T));
}

struct DirBuild {
  std::string path;
  std::string_view name;
  uint32_t parent = kNoParent;  // final index
  uint32_t first_child = 0, child_count = 0, first_file = 0, file_count = 0;
};

}  // namespace

Status ValidateRelativePath(std::string_view path) {
  if (path.empty()) return Status::InvalidArgument("empty path");
  if (path.front() == '/') return Status::InvalidArgument(fmt::format("absolute path: {}", path));
  if (path.find('\0') != std::string_view::npos) {
    return Status::InvalidArgument("path contains a NUL byte");
  }
  if (path.size() > kMaxPath) {
    return Status::InvalidArgument(fmt::format("path of {} bytes (at most {}): {}...", path.size(),
                                               kMaxPath, path.substr(0, 64)));
  }
  size_t start = 0;
  while (start <= path.size()) {
    const size_t end = std::min(path.find('/', start), path.size());
    const std::string_view part = path.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") {
      return Status::InvalidArgument(
          fmt::format("path has an empty, '.' or '..' component: {}", path));
    }
    if (part.size() > kMaxComponent) {
      return Status::InvalidArgument(
          fmt::format("path component longer than {} bytes: {}", kMaxComponent, path));
    }
    start = end + 1;
  }
  return Status::OK();
}

namespace {

// Step 1: every path valid and unique, entries sorted by path.
Status SortAndCheckEntries(const SnapshotSpec& spec, std::vector<SnapshotEntry>& entries) {
  if (entries.size() >= 0xFFFFFFFFull) {
    return Status::ResourceExhausted("a snapshot holds at most 2^32-2 files");
  }
  for (const auto& e : entries) {
    STOKER_RETURN_IF_ERROR(ValidateRelativePath(e.path));
    if (e.chunk >= spec.chunks.size()) return Status::Internal("entry names a missing chunk");
  }
  std::sort(entries.begin(), entries.end(),
            [](const SnapshotEntry& a, const SnapshotEntry& b) { return a.path < b.path; });
  for (size_t i = 1; i < entries.size(); ++i) {
    if (entries[i].path == entries[i - 1].path) {
      return Status::InvalidArgument(fmt::format("duplicate path: {}", entries[i].path));
    }
  }
  return Status::OK();
}

// The directories in snapshot order and the files in theirs.
struct DirTree {
  std::vector<DirBuild> dirs;
  std::vector<uint32_t> file_order;  // entry indices in snapshot order
  std::vector<uint32_t> file_dir;    // by entry index: its directory's index in `dirs`
};

// Step 2: every ancestor of every file, then a breadth-first numbering with siblings sorted by
// name, so each directory's children and files are contiguous.
Result<DirTree> BuildDirTree(const std::vector<SnapshotEntry>& entries) {
  std::unordered_map<std::string_view, std::vector<std::string_view>> children;  // by dir path
  std::unordered_map<std::string_view, std::vector<uint32_t>> files_in;          // entry indices
  // Directories already attached to their parent. (Presence in `children` is not enough: a
  // parent's entry is created by its first child before the parent itself is attached.)
  std::unordered_set<std::string_view> attached;
  children[""];
  for (uint32_t i = 0; i < entries.size(); ++i) {
    std::string_view dir = ParentOf(entries[i].path);
    files_in[dir].push_back(i);
    while (!dir.empty() && attached.insert(dir).second) {
      children[dir];
      children[ParentOf(dir)].push_back(dir);
      dir = ParentOf(dir);
    }
  }
  for (const auto& e : entries) {
    if (children.contains(e.path)) {
      return Err(
          Status::InvalidArgument(fmt::format("path is both a file and a directory: {}", e.path)));
    }
  }
  DirTree tree;
  auto& dirs = tree.dirs;
  dirs.push_back({"", "", kNoParent});
  tree.file_order.reserve(entries.size());
  for (uint32_t d = 0; d < dirs.size(); ++d) {
    auto& kids = children[dirs[d].path];
    std::sort(kids.begin(), kids.end(),
              [](std::string_view a, std::string_view b) { return BaseOf(a) < BaseOf(b); });
    dirs[d].first_child = static_cast<uint32_t>(dirs.size());
    dirs[d].child_count = static_cast<uint32_t>(kids.size());
    for (std::string_view kid : kids) dirs.push_back({std::string(kid), BaseOf(kid), d});
    // Entries are sorted by full path, so files of one directory are already sorted by name.
    auto& mine = files_in[dirs[d].path];
    dirs[d].first_file = static_cast<uint32_t>(tree.file_order.size());
    dirs[d].file_count = static_cast<uint32_t>(mine.size());
    tree.file_order.insert(tree.file_order.end(), mine.begin(), mine.end());
  }
  for (auto& d : dirs) d.name = BaseOf(d.path);  // views into each DirBuild's own string
  tree.file_dir.resize(entries.size());
  for (uint32_t d = 0; d < dirs.size(); ++d) {
    for (uint32_t k = 0; k < dirs[d].file_count; ++k) {
      tree.file_dir[tree.file_order[dirs[d].first_file + k]] = d;
    }
  }
  return tree;
}

struct Labels {
  uint32_t flags = 0;
  std::vector<std::string> classes;
  std::vector<int32_t> by_entry;  // kNoLabel for unlabelled files
};

// Step 3: labels from the first directory (ImageFolder: sorted class names) or as given.
Result<Labels> AssignLabels(const SnapshotSpec& spec, const std::vector<SnapshotEntry>& entries,
                            const DirTree& tree) {
  Labels out;
  out.by_entry.assign(entries.size(), kNoLabel);
  if (spec.labels == LabelMode::kFirstDirectory) {
    const bool all_in_dirs = std::all_of(entries.begin(), entries.end(), [](const auto& e) {
      return e.path.find('/') != std::string::npos;
    });
    if (all_in_dirs && !entries.empty()) {
      out.flags |= kFlagLabelled | kFlagLabelsFromDirectories;
      const DirBuild& root = tree.dirs[0];
      for (uint32_t k = 0; k < root.child_count; ++k) {
        out.classes.emplace_back(tree.dirs[root.first_child + k].name);
      }
      std::sort(out.classes.begin(), out.classes.end());
      for (size_t i = 0; i < entries.size(); ++i) {
        const std::string_view first =
            std::string_view(entries[i].path).substr(0, entries[i].path.find('/'));
        out.by_entry[i] = static_cast<int32_t>(
            std::lower_bound(out.classes.begin(), out.classes.end(), first) - out.classes.begin());
      }
    }
  } else if (spec.labels == LabelMode::kExplicit) {
    int32_t max_label = -1;
    for (size_t i = 0; i < entries.size(); ++i) {
      if (entries[i].label < kNoLabel) {
        return Err(Status::InvalidArgument(fmt::format("negative label for {}", entries[i].path)));
      }
      out.by_entry[i] = entries[i].label;
      max_label = std::max(max_label, out.by_entry[i]);
    }
    if (max_label >= 0) {
      out.flags |= kFlagLabelled;
      for (int32_t k = 0; k <= max_label; ++k) out.classes.push_back(std::to_string(k));
    }
  }
  return out;
}

// Step 4 (grouped datasets): the first file of each (directory, key) group, then the file
// count; every member of a group takes the group's label (the first member label found).
std::vector<uint32_t> GroupSamples(const std::vector<SnapshotEntry>& entries, const DirTree& tree,
                                   Labels& labels) {
  const auto& order = tree.file_order;
  std::vector<uint32_t> starts;
  for (uint32_t f = 0; f < order.size(); ++f) {
    const bool starts_group =
        f == 0 || tree.file_dir[order[f - 1]] != tree.file_dir[order[f]] ||
        KeyOf(BaseOf(entries[order[f - 1]].path)) != KeyOf(BaseOf(entries[order[f]].path));
    if (starts_group) starts.push_back(f);
  }
  for (size_t s = 0; s < starts.size(); ++s) {
    const uint32_t begin = starts[s];
    const uint32_t end =
        s + 1 < starts.size() ? starts[s + 1] : static_cast<uint32_t>(order.size());
    int32_t group_label = kNoLabel;
    for (uint32_t f = begin; f < end && group_label == kNoLabel; ++f) {
      group_label = labels.by_entry[order[f]];
    }
    for (uint32_t f = begin; f < end; ++f) labels.by_entry[order[f]] = group_label;
  }
  starts.push_back(static_cast<uint32_t>(order.size()));
  return starts;
}

struct Sections {
  std::string bytes[kSectionCount];
  uint64_t total_bytes = 0;  // of every file
  uint32_t file_slots = 0, dir_slots = 0;
};

// Step 5: the sections' bytes (snapshot_layout.h).
Result<Sections> EncodeSections(const SnapshotSpec& spec, const std::vector<SnapshotEntry>& entries,
                                const DirTree& tree, const Labels& labels,
                                const std::vector<uint32_t>& sample_starts) {
  Sections out;
  auto& sec = out.bytes;
  StringPool strings;
  for (const auto& c : spec.chunks) {
    AppendRecord(&sec[kSectionChunks],
                 ChunkRecord{c.id, c.file_size, c.data_crc32c, c.entry_count});
  }
  for (const auto& d : tree.dirs) {
    STOKER_ASSIGN_OR_RETURN(const uint32_t name, strings.Add(d.name, true));
    STOKER_ASSIGN_OR_RETURN(const uint32_t path, strings.Add(d.path, true));
    AppendRecord(&sec[kSectionDirs], DirRecord{d.parent, name, path, d.first_child, d.child_count,
                                               d.first_file, d.file_count, 0});
  }
  for (uint32_t f = 0; f < tree.file_order.size(); ++f) {
    const uint32_t i = tree.file_order[f];
    const auto& e = entries[i];
    STOKER_ASSIGN_OR_RETURN(const uint32_t name, strings.Add(BaseOf(e.path), false));
    AppendRecord(&sec[kSectionFiles], FileRecord{e.offset, e.length, e.crc32c, e.chunk,
                                                 tree.file_dir[i], name, labels.by_entry[i]});
    out.total_bytes += e.length;
    for (const auto& [key, value] : e.attributes) {
      STOKER_ASSIGN_OR_RETURN(const uint32_t k, strings.Add(key, true));
      STOKER_ASSIGN_OR_RETURN(const uint32_t v, strings.Add(value, false));
      AppendRecord(&sec[kSectionAttrs], AttrRecord{f, k, v});
    }
  }
  for (uint32_t start : sample_starts) coding::PutFixed<uint32_t>(&sec[kSectionSamples], start);
  for (const auto& c : labels.classes) {
    STOKER_ASSIGN_OR_RETURN(const uint32_t ref, strings.Add(c, true));
    coding::PutFixed<uint32_t>(&sec[kSectionClasses], ref);
  }
  out.file_slots = HashSlotsFor(entries.size());
  out.dir_slots = HashSlotsFor(tree.dirs.size());
  sec[kSectionFileHash] = BuildHashTable(out.file_slots, tree.file_order.size(), [&](size_t f) {
    return std::string_view(entries[tree.file_order[f]].path);
  });
  sec[kSectionDirHash] = BuildHashTable(out.dir_slots, tree.dirs.size(), [&](size_t d) {
    return std::string_view(tree.dirs[d].path);
  });
  sec[kSectionStrings] = strings.bytes();
  return out;
}

// The header's counts, beside what the sections hold.
struct HeaderCounts {
  uint32_t flags = 0;
  uint32_t files = 0, dirs = 0, samples = 0, chunks = 0, classes = 0;
};

// Step 6: header, sections (8-byte aligned), trailer.
std::string Assemble(const SnapshotSpec& spec, const Sections& sections, const HeaderCounts& n) {
  const auto& sec = sections.bytes;
  std::string out(kSnapshotHeaderSize, '\0');
  uint64_t offsets[kSectionCount];
  for (uint32_t s = 0; s < kSectionCount; ++s) {
    out.resize((out.size() + 7) / 8 * 8, '\0');
    offsets[s] = out.size();
    out += sec[s];
  }
  out.resize((out.size() + 7) / 8 * 8, '\0');
  char* h = out.data();
  std::copy(std::begin(kSnapshotMagic), std::end(kSnapshotMagic), h);
  coding::EncodeFixed<uint32_t>(h + header::kVersion, kSnapshotVersion);
  coding::EncodeFixed<uint32_t>(h + header::kFlags, n.flags);
  coding::EncodeFixed<uint64_t>(h + header::kDatasetVersion, spec.dataset_version);
  coding::EncodeFixed<uint64_t>(h + header::kCreatedUnix, spec.created_unix_seconds);
  coding::EncodeFixed<uint64_t>(h + header::kTotalBytes, sections.total_bytes);
  coding::EncodeFixed<uint32_t>(h + header::kFileCount, n.files);
  coding::EncodeFixed<uint32_t>(h + header::kDirCount, n.dirs);
  coding::EncodeFixed<uint32_t>(h + header::kSampleCount, n.samples);
  coding::EncodeFixed<uint32_t>(h + header::kChunkCount, n.chunks);
  coding::EncodeFixed<uint32_t>(h + header::kClassCount, n.classes);
  coding::EncodeFixed<uint32_t>(
      h + header::kAttrCount,
      static_cast<uint32_t>(sec[kSectionAttrs].size() / sizeof(AttrRecord)));
  coding::EncodeFixed<uint32_t>(h + header::kFileHashSlots, sections.file_slots);
  coding::EncodeFixed<uint32_t>(h + header::kDirHashSlots, sections.dir_slots);
  for (uint32_t s = 0; s < kSectionCount; ++s) {
    coding::EncodeFixed<uint64_t>(h + header::kSections + 16 * s, offsets[s]);
    coding::EncodeFixed<uint64_t>(h + header::kSections + 16 * s + 8, sec[s].size());
  }
  const uint64_t final_size = out.size() + kSnapshotTrailerSize;
  coding::PutFixed<uint64_t>(&out, final_size);
  coding::PutFixed<uint32_t>(&out, crc32c::Value(out));
  out.append(kSnapshotTrailerMagic, sizeof(kSnapshotTrailerMagic));
  return out;
}

}  // namespace

Result<std::string> BuildSnapshot(SnapshotSpec spec) {
  auto& entries = spec.entries;
  STOKER_RETURN_IF_ERROR(SortAndCheckEntries(spec, entries));
  STOKER_ASSIGN_OR_RETURN(const DirTree tree, BuildDirTree(entries));
  STOKER_ASSIGN_OR_RETURN(Labels labels, AssignLabels(spec, entries, tree));
  // Samples: one per file, or one per (directory, key) group.
  std::vector<uint32_t> sample_starts;
  if (spec.group_by_key) {
    labels.flags |= kFlagGroupedSamples;
    sample_starts = GroupSamples(entries, tree, labels);
  }
  STOKER_ASSIGN_OR_RETURN(const Sections sections,
                          EncodeSections(spec, entries, tree, labels, sample_starts));
  HeaderCounts counts;
  counts.flags = labels.flags;
  counts.files = static_cast<uint32_t>(entries.size());
  counts.dirs = static_cast<uint32_t>(tree.dirs.size());
  counts.samples = spec.group_by_key ? static_cast<uint32_t>(sample_starts.size() - 1)
                                     : static_cast<uint32_t>(entries.size());
  counts.chunks = static_cast<uint32_t>(spec.chunks.size());
  counts.classes = static_cast<uint32_t>(labels.classes.size());
  return Assemble(spec, sections, counts);
}

}  // namespace stoker::format
