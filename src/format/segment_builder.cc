#include "format/segment_builder.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <tuple>

#include <fmt/format.h>

#include "common/coding.h"
#include "common/crc32c.h"
#include "common/varint.h"
#include "format/segment_layout.h"
#include "format/snapshot_builder.h"

namespace stoker::format {
namespace {

size_t SharedPrefix(std::string_view a, std::string_view b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

// A block table of sorted keys (docs/format.md §3.3): blocks of kBlockEntries entries, each
// entry's key prefix-compressed against the previous one (the first of a block in full), its
// value length-prefixed; every block ends in its CRC32C. The index gives each block's offset
// and first key.
class KeyedTableWriter {
 public:
  void Add(std::string_view key, std::string_view value) {
    if (count_ % kBlockEntries == 0) {
      EndBlock();
      coding::PutFixed<uint64_t>(&index_, blocks_.size());
      coding::PutFixed<uint32_t>(&index_, static_cast<uint32_t>(keys_.size()));
      coding::PutFixed<uint32_t>(&index_, static_cast<uint32_t>(key.size()));
      keys_.append(key);
      previous_.clear();
    }
    const size_t shared = SharedPrefix(previous_, key);
    varint::Put(&block_, shared);
    varint::Put(&block_, key.size() - shared);
    block_.append(key.substr(shared));
    varint::Put(&block_, value.size());
    block_.append(value);
    previous_.assign(key);
    ++count_;
  }
  // Appends the table's three sections' bytes.
  void Finish(std::string* blocks, std::string* index, std::string* keys) {
    EndBlock();
    coding::PutFixed<uint64_t>(&index_, blocks_.size());
    coding::PutFixed<uint32_t>(&index_, static_cast<uint32_t>(keys_.size()));
    coding::PutFixed<uint32_t>(&index_, 0);
    *blocks = std::move(blocks_);
    *index = std::move(index_);
    *keys = std::move(keys_);
  }

 private:
  void EndBlock() {
    if (block_.empty()) return;
    coding::PutFixed<uint32_t>(&block_, crc32c::Value(block_));
    blocks_.append(block_);
    block_.clear();
  }
  std::string blocks_, index_, keys_, block_, previous_;
  uint64_t count_ = 0;
};

struct SectionBytes {
  uint32_t kind;
  std::string bytes;
};

std::string Footer(const SegmentSpec& spec, uint64_t sample_count, uint64_t dir_count,
                   uint64_t attr_count, uint64_t total_bytes, const std::vector<SectionBytes>& sections,
                   const std::vector<uint64_t>& offsets, std::string_view first_key,
                   std::string_view last_key) {
  std::string f;
  coding::PutFixed<uint32_t>(&f, kFormatVersion2);
  coding::PutFixed<uint32_t>(&f, spec.flags);
  coding::PutFixed<uint64_t>(&f, spec.first_file);
  coding::PutFixed<uint64_t>(&f, spec.files.size());
  coding::PutFixed<uint64_t>(&f, spec.first_sample);
  coding::PutFixed<uint64_t>(&f, sample_count);
  coding::PutFixed<uint32_t>(&f, spec.first_label);
  coding::PutFixed<uint32_t>(&f, static_cast<uint32_t>(spec.classes.size()));
  coding::PutFixed<uint64_t>(&f, total_bytes);
  coding::PutFixed<uint64_t>(&f, spec.chunks.size());
  coding::PutFixed<uint64_t>(&f, dir_count);
  coding::PutFixed<uint64_t>(&f, attr_count);
  coding::PutFixed<uint32_t>(&f, static_cast<uint32_t>(sections.size()));
  coding::PutFixed<uint32_t>(&f, static_cast<uint32_t>(kBlockEntries));
  for (size_t i = 0; i < sections.size(); ++i) {
    coding::PutFixed<uint32_t>(&f, sections[i].kind);
    coding::PutFixed<uint32_t>(&f, crc32c::Value(sections[i].bytes));
    coding::PutFixed<uint64_t>(&f, offsets[i]);
    coding::PutFixed<uint64_t>(&f, sections[i].bytes.size());
    coding::PutFixed<uint64_t>(&f, 0);
  }
  coding::PutFixed<uint32_t>(&f, static_cast<uint32_t>(first_key.size()));
  f.append(first_key);
  coding::PutFixed<uint32_t>(&f, static_cast<uint32_t>(last_key.size()));
  f.append(last_key);
  return f;
}

// The directory of `path` ("" for the root).
std::string_view DirOf(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? std::string_view() : path.substr(0, slash);
}

struct DirFiles {
  uint64_t first = 0, count = 0;
};

}  // namespace

Result<std::string> BuildSegment(const SegmentSpec& spec) {
  const uint64_t n = spec.files.size();
  if (spec.first_label + uint64_t{spec.classes.size()} > 0x7FFFFFFFull) {
    return Err(Status::InvalidArgument("too many classes"));
  }
  std::vector<std::string> keys(n);
  for (uint64_t i = 0; i < n; ++i) {
    const SegmentFile& f = spec.files[i];
    STOKER_RETURN_IF_ERROR(ValidateRelativePath(f.path));
    if (f.chunk >= spec.chunks.size()) return Err(Status::Internal("file names a missing chunk"));
    if (f.label < -1 || (f.label >= 0 && static_cast<uint64_t>(f.label) >=
                                             spec.first_label + spec.classes.size())) {
      return Err(Status::InvalidArgument(fmt::format("{}: label {} has no class", f.path, f.label)));
    }
    keys[i] = FileKeyOf(f.path);
  }
  // Position = rank in key order; the file index is first_file + position.
  std::vector<uint64_t> by_key(n);
  std::iota(by_key.begin(), by_key.end(), 0);
  std::sort(by_key.begin(), by_key.end(), [&](uint64_t a, uint64_t b) { return keys[a] < keys[b]; });
  for (uint64_t p = 1; p < n; ++p) {
    if (keys[by_key[p]] == keys[by_key[p - 1]]) {
      return Err(Status::InvalidArgument("duplicate path: " + spec.files[by_key[p]].path));
    }
  }

  // Directories: each one holding files here, and their ancestors up to the root.
  std::map<std::string, DirFiles, std::less<>> dirs;
  dirs[""];
  for (uint64_t p = 0; p < n; ++p) {
    std::string_view dir = DirOf(spec.files[by_key[p]].path);
    auto [it, added] = dirs.try_emplace(std::string(dir));
    if (it->second.count++ == 0) it->second.first = p;
    while (added && !dir.empty()) {
      dir = DirOf(dir);
      added = dirs.try_emplace(std::string(dir)).second;
    }
  }
  for (uint64_t i = 0; i < n; ++i) {
    if (dirs.contains(spec.files[i].path)) {
      return Err(Status::InvalidArgument(
          fmt::format("{} is both a file and a directory", spec.files[i].path)));
    }
  }

  // Locations: chunk by chunk in storage order. Payloads lie back to back, so the files of a
  // chunk must tile its data region exactly; offsets are then implied by the lengths.
  std::vector<uint64_t> by_place(n);
  std::iota(by_place.begin(), by_place.end(), 0);
  std::sort(by_place.begin(), by_place.end(), [&](uint64_t a, uint64_t b) {
    const SegmentFile &x = spec.files[a], &y = spec.files[b];
    // Empty files share their offset with the next file: they go first.
    return std::tie(x.chunk, x.offset, x.length, a) < std::tie(y.chunk, y.offset, y.length, b);
  });
  std::vector<uint64_t> first_location(spec.chunks.size() + 1, n);
  {
    uint64_t k = 0;
    for (uint32_t c = 0; c < spec.chunks.size(); ++c) {
      first_location[c] = k;
      const ChunkInfo& info = spec.chunks[c];
      uint64_t expect = kChunkHeaderSize, entries = 0;
      for (; k < n && spec.files[by_place[k]].chunk == c; ++k, ++entries) {
        const SegmentFile& f = spec.files[by_place[k]];
        if (f.offset != expect) {
          return Err(Status::InvalidArgument(fmt::format(
              "{}: offset {} in chunk {:016x}, expected {} (files must tile their chunk)", f.path,
              f.offset, info.id, expect)));
        }
        expect += f.length;
      }
      const uint64_t fixed = kChunkHeaderSize + kChunkFooterSize + kChunkIndexEntrySize * entries;
      if (entries != info.entry_count || info.file_size != expect - kChunkHeaderSize + fixed) {
        return Err(Status::InvalidArgument(fmt::format(
            "chunk {:016x}: {} files of {} payload bytes do not fill its {} entries and {} bytes",
            info.id, entries, expect - kChunkHeaderSize, info.entry_count, info.file_size)));
      }
    }
  }
  std::vector<uint64_t> position_of(n), location_of(n);
  for (uint64_t p = 0; p < n; ++p) position_of[by_key[p]] = p;
  for (uint64_t k = 0; k < n; ++k) location_of[by_place[k]] = k;

  std::vector<SectionBytes> sections;
  {
    std::string chunks;
    for (uint32_t c = 0; c < spec.chunks.size(); ++c) {
      const ChunkInfo& info = spec.chunks[c];
      coding::PutFixed<uint64_t>(&chunks, info.id);
      coding::PutFixed<uint64_t>(&chunks, info.file_size);
      coding::PutFixed<uint32_t>(&chunks, info.data_crc32c);
      coding::PutFixed<uint32_t>(&chunks, info.entry_count);
      coding::PutFixed<uint64_t>(&chunks, first_location[c]);
    }
    sections.push_back({kSegChunks, std::move(chunks)});
  }
  uint64_t total_bytes = 0;
  {
    std::string blocks, index, block;
    for (uint64_t k = 0; k < n; ++k) {
      const SegmentFile& f = spec.files[by_place[k]];
      if (k % kBlockEntries == 0) {
        coding::PutFixed<uint64_t>(&index, blocks.size());
        coding::PutFixed<uint64_t>(&block, f.offset);
      }
      varint::Put(&block, position_of[by_place[k]]);
      varint::Put(&block, f.length);
      coding::PutFixed<uint32_t>(&block, f.crc32c);
      varint::Put(&block, static_cast<uint64_t>(int64_t{f.label} + 1));
      total_bytes += f.length;
      if ((k + 1) % kBlockEntries == 0 || k + 1 == n) {
        coding::PutFixed<uint32_t>(&block, crc32c::Value(block));
        blocks.append(block);
        block.clear();
      }
    }
    coding::PutFixed<uint64_t>(&index, blocks.size());
    sections.push_back({kSegLocations, std::move(blocks)});
    sections.push_back({kSegLocationIndex, std::move(index)});
  }
  {
    KeyedTableWriter files;
    std::string value;
    for (uint64_t p = 0; p < n; ++p) {
      value.clear();
      varint::Put(&value, location_of[by_key[p]]);
      files.Add(keys[by_key[p]], value);
    }
    SectionBytes blocks{kSegFiles, {}}, index{kSegFileIndex, {}}, first_keys{kSegFileKeys, {}};
    files.Finish(&blocks.bytes, &index.bytes, &first_keys.bytes);
    sections.push_back(std::move(blocks));
    sections.push_back(std::move(index));
    sections.push_back(std::move(first_keys));
  }
  {
    KeyedTableWriter table;
    std::string value;
    for (const auto& [path, files] : dirs) {
      value.clear();
      varint::Put(&value, files.first);
      varint::Put(&value, files.count);
      table.Add(path, value);
    }
    SectionBytes blocks{kSegDirs, {}}, index{kSegDirIndex, {}}, first_keys{kSegDirKeys, {}};
    table.Finish(&blocks.bytes, &index.bytes, &first_keys.bytes);
    sections.push_back(std::move(blocks));
    sections.push_back(std::move(index));
    sections.push_back(std::move(first_keys));
  }
  {
    std::string classes;
    for (const std::string& name : spec.classes) {
      varint::Put(&classes, name.size());
      classes.append(name);
    }
    sections.push_back({kSegClasses, std::move(classes)});
  }
  uint64_t sample_count = n;
  if (spec.flags & kSegmentGrouped) {
    std::string samples;
    sample_count = 0;
    for (uint64_t p = 0; p < n; ++p) {
      if (p == 0 || SampleKeyOf(spec.files[by_key[p]].path) !=
                        SampleKeyOf(spec.files[by_key[p - 1]].path)) {
        coding::PutFixed<uint64_t>(&samples, p);
        ++sample_count;
      }
    }
    coding::PutFixed<uint64_t>(&samples, n);
    sections.push_back({kSegSamples, std::move(samples)});
  }
  uint64_t attr_count = 0;
  {
    // Key: the file's position (8 bytes big-endian, so that byte order is numeric order) and
    // the attribute's name; a file's attributes sort by name.
    std::vector<std::pair<std::string, std::string_view>> attrs;
    for (uint64_t i = 0; i < n; ++i) {
      for (const auto& [key, value] : spec.files[i].attributes) {
        std::string k(8, '\0');
        for (int b = 0; b < 8; ++b) k[b] = static_cast<char>(position_of[i] >> (56 - 8 * b));
        k.append(key);
        attrs.emplace_back(std::move(k), value);
      }
    }
    std::sort(attrs.begin(), attrs.end());
    for (size_t i = 1; i < attrs.size(); ++i) {
      if (attrs[i].first == attrs[i - 1].first) {
        return Err(Status::InvalidArgument("an attribute is given twice for one file"));
      }
    }
    KeyedTableWriter table;
    for (const auto& [key, value] : attrs) table.Add(key, value);
    attr_count = attrs.size();
    SectionBytes blocks{kSegAttrs, {}}, index{kSegAttrIndex, {}}, first_keys{kSegAttrKeys, {}};
    table.Finish(&blocks.bytes, &index.bytes, &first_keys.bytes);
    sections.push_back(std::move(blocks));
    sections.push_back(std::move(index));
    sections.push_back(std::move(first_keys));
  }

  std::string out(kSegmentHeaderSize, '\0');
  std::copy(std::begin(kSegmentMagic), std::end(kSegmentMagic), out.begin());
  coding::EncodeFixed<uint32_t>(out.data() + 8, kFormatVersion2);
  std::vector<uint64_t> offsets;
  // Sections back to back, no padding: every byte of a segment is covered by a check.
  for (const SectionBytes& s : sections) {
    offsets.push_back(out.size());
    out.append(s.bytes);
  }
  const std::string_view first_key = n ? std::string_view(keys[by_key.front()]) : "";
  const std::string_view last_key = n ? std::string_view(keys[by_key.back()]) : "";
  const std::string footer = Footer(spec, sample_count, dirs.size(), attr_count, total_bytes,
                                    sections, offsets, first_key, last_key);
  const uint64_t footer_offset = out.size();
  out.append(footer);
  coding::PutFixed<uint64_t>(&out, footer_offset);
  coding::PutFixed<uint64_t>(&out, footer.size());
  coding::PutFixed<uint32_t>(&out, crc32c::Value(footer));
  coding::PutFixed<uint32_t>(&out, 0);
  out.append(kSegmentTrailerMagic, sizeof(kSegmentTrailerMagic));
  return out;
}

}  // namespace stoker::format
