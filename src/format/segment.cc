#include "format/segment.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "common/byte_cursor.h"
#include "common/coding.h"
#include "common/crc32c.h"
#include "common/varint.h"
#include "format/chunk.h"
#include "format/segment_layout.h"
#include "format/segment_table.h"
#include "format/segment_writer.h"

namespace stoker::format {
namespace {

constexpr size_t kMaxSections = 32;

// For searching keyed entries and plain keys alike.
template <typename T>
std::string_view KeyOf(const T& x) {
  if constexpr (requires { x.key; }) {
    return x.key;
  } else {
    return x;
  }
}

uint64_t BlocksFor(uint64_t entries) { return (entries + kBlockEntries - 1) / kBlockEntries; }

}  // namespace

Segment::~Segment() = default;

Status Segment::Corrupt(std::string_view what) const {
  return Status::Corruption(fmt::format("segment {}: {}", name_, what));
}

bool Segment::grouped() const { return info_.flags & kSegmentGrouped; }
bool Segment::positioned() const { return info_.flags & kSegmentPositioned; }

Result<std::unique_ptr<Segment>> Segment::Open(std::shared_ptr<RandomAccessFile> file,
                                               std::string name,
                                               const SegmentOpenOptions& options) {
  std::unique_ptr<Segment> s(new Segment());
  s->options_ = options;
  s->file_ = std::move(file);
  s->name_ = std::move(name);
  s->size_ = s->file_->Size();
  STOKER_RETURN_IF_ERROR(s->Load());
  return s;
}

Result<std::string> Segment::ReadBlockBytes(uint32_t kind, uint64_t offset, uint64_t size,
                                            bool keep) const {
  const SectionRef& ref = sections_[kind];
  if (size < 4) return Err(Corrupt(fmt::format("empty block in section {}", kind)));
  const uint64_t at = ref.offset + offset;
  {
    std::lock_guard lock(cache_mu_);
    if (auto it = block_cache_.find(at); it != block_cache_.end()) return it->second;
  }
  std::string bytes(size, '\0');
  STOKER_RETURN_IF_ERROR(file_->ReadAt(at, {reinterpret_cast<std::byte*>(bytes.data()), size}));
  const auto stored = coding::DecodeFixed<uint32_t>(bytes.data() + size - 4);
  bytes.resize(size - 4);
  if (options_.verify_checksums && crc32c::Value(bytes) != stored) {
    return Err(
        Corrupt(fmt::format("CRC32C mismatch in a block of section {} at offset {}", kind, at)));
  }
  if (!keep) return bytes;
  std::lock_guard lock(cache_mu_);
  if (cache_bytes_ + bytes.size() > kBlockCacheBytes) {
    block_cache_.clear();  // crude, but bounded; a reader's working set is usually far smaller
    cache_bytes_ = 0;
  }
  if (block_cache_.try_emplace(at, bytes).second) cache_bytes_ += bytes.size();
  return bytes;
}

Result<std::string> Segment::ReadSection(uint32_t kind) const {
  const SectionRef& ref = sections_[kind];
  std::string bytes(ref.size, '\0');
  STOKER_RETURN_IF_ERROR(
      file_->ReadAt(ref.offset, {reinterpret_cast<std::byte*>(bytes.data()), bytes.size()}));
  if (options_.verify_checksums && crc32c::Value(bytes) != ref.crc) {
    return Err(Corrupt(fmt::format("CRC32C mismatch in section {}", kind)));
  }
  return bytes;
}

namespace {

// The footer's counts contradict each other or exceed this reader's limits.
bool FooterFieldsInvalid(const SegmentInfo& info, uint32_t section_count, uint32_t block_entries) {
  const bool grouped = info.flags & kSegmentGrouped;
  return (info.flags & ~kSegmentKnownFlags) != 0 || block_entries != kBlockEntries ||
         section_count > kMaxSections || info.first_file > (1ull << 62) ||
         info.file_count > (1ull << 62) || info.first_sample > (1ull << 62) ||
         info.sample_count > info.file_count ||
         (!grouped && info.sample_count != info.file_count) ||
         (info.file_count > 0 && info.sample_count == 0) ||
         uint64_t{info.first_label} + info.class_count > 0x7FFFFFFFull ||
         info.chunk_count > info.file_count + 1 || info.dir_count == 0 ||
         info.dir_count > info.file_count + (1ull << 32);
}

// Sections, as (offset, size), tile the bytes between header and footer exactly.
bool SectionsTile(std::vector<std::pair<uint64_t, uint64_t>> extents, uint64_t footer_offset) {
  std::sort(extents.begin(), extents.end());
  uint64_t end = kSegmentHeaderSize;
  for (const auto& [offset, size] : extents) {
    if (offset != end) return false;
    end = offset + size;
  }
  return end == footer_offset;
}

}  // namespace

Status Segment::Load() {
  STOKER_ASSIGN_OR_RETURN(const std::string footer, ReadFooter());
  // ReadFooter checked that the footer ends where the trailer begins.
  const uint64_t footer_offset = size_ - kSegmentTrailerSize - footer.size();
  STOKER_RETURN_IF_ERROR(ParseFooter(footer, footer_offset));
  STOKER_RETURN_IF_ERROR(version_ == kFormatVersion2 ? LoadFlatIndexes() : CheckGroupedSizes());
  STOKER_RETURN_IF_ERROR(LoadTables());
  STOKER_RETURN_IF_ERROR(LoadClasses());
  if (grouped() && sections_[kSegSamples].size != 8 * (info_.sample_count + 1)) {
    return Corrupt("samples section has the wrong size");
  }
  return Status::OK();
}

Result<std::string> Segment::ReadFooter() {
  if (size_ < kSegmentHeaderSize + kSegmentFooterFixedSize + kSegmentTrailerSize) {
    return Err(Corrupt(fmt::format("{} bytes is too small", size_)));
  }
  char header[kSegmentHeaderSize], trailer[kSegmentTrailerSize];
  STOKER_RETURN_IF_ERROR(file_->ReadAt(0, {reinterpret_cast<std::byte*>(header), sizeof header}));
  STOKER_RETURN_IF_ERROR(file_->ReadAt(size_ - sizeof trailer,
                                       {reinterpret_cast<std::byte*>(trailer), sizeof trailer}));
  if (std::memcmp(header, kSegmentMagic, 8) != 0 ||
      coding::DecodeFixed<uint32_t>(header + 12) != 0 ||
      std::memcmp(trailer + 24, kSegmentTrailerMagic, 8) != 0) {
    return Err(Corrupt("not a stoker segment (bad magic)"));
  }
  const auto footer_offset = coding::DecodeFixed<uint64_t>(trailer);
  const auto footer_size = coding::DecodeFixed<uint64_t>(trailer + 8);
  footer_crc_ = coding::DecodeFixed<uint32_t>(trailer + 16);
  if (footer_size < kSegmentFooterFixedSize || footer_size > kMaxSegmentFooterSize ||
      footer_offset < kSegmentHeaderSize || coding::DecodeFixed<uint32_t>(trailer + 20) != 0 ||
      footer_offset + footer_size + kSegmentTrailerSize != size_) {
    return Err(Corrupt("bad trailer"));
  }
  std::string footer(footer_size, '\0');
  STOKER_RETURN_IF_ERROR(
      file_->ReadAt(footer_offset, {reinterpret_cast<std::byte*>(footer.data()), footer.size()}));
  if (options_.verify_checksums && crc32c::Value(footer) != footer_crc_)
    return Err(Corrupt("CRC32C mismatch in the footer"));
  // Checked after the CRC, so that a damaged version field reads as corruption.
  const auto version = coding::DecodeFixed<uint32_t>(footer.data());
  if (version != kFormatVersion2 && version != kFormatVersion3) {
    return Err(Status::Unsupported(
        fmt::format("segment {}: format version {} (this stoker reads {} and {})", name_, version,
                    kFormatVersion2, kFormatVersion3)));
  }
  version_ = version;
  if (coding::DecodeFixed<uint32_t>(header + 8) != version) return Err(Corrupt("bad header"));
  return footer;
}

Status Segment::ParseFooter(std::string_view footer, uint64_t footer_offset) {
  ByteCursor c{footer};
  c.Fixed<uint32_t>();  // the version, checked by ReadFooter
  info_.flags = c.Fixed<uint32_t>();
  info_.first_file = c.Fixed<uint64_t>();
  info_.file_count = c.Fixed<uint64_t>();
  info_.first_sample = c.Fixed<uint64_t>();
  info_.sample_count = c.Fixed<uint64_t>();
  info_.first_label = c.Fixed<uint32_t>();
  info_.class_count = c.Fixed<uint32_t>();
  info_.total_bytes = c.Fixed<uint64_t>();
  info_.chunk_count = c.Fixed<uint64_t>();
  info_.dir_count = c.Fixed<uint64_t>();
  info_.attr_count = c.Fixed<uint64_t>();
  const auto section_count = c.Fixed<uint32_t>();
  const auto block_entries = c.Fixed<uint32_t>();
  if (FooterFieldsInvalid(info_, section_count, block_entries)) {
    return Corrupt("bad footer fields");
  }
  std::vector<std::pair<uint64_t, uint64_t>> extents;
  for (uint32_t i = 0; i < section_count && c.ok; ++i) {
    const auto kind = c.Fixed<uint32_t>();
    const auto crc = c.Fixed<uint32_t>();
    const auto offset = c.Fixed<uint64_t>();
    const auto size = c.Fixed<uint64_t>();
    const auto reserved = c.Fixed<uint64_t>();
    if (!c.ok || kind == 0 || kind >= kSegSectionKinds || sections_[kind].present ||
        reserved != 0 || offset < kSegmentHeaderSize || size > footer_offset ||
        offset > footer_offset - size) {
      return Corrupt(fmt::format("bad section record {}", i));
    }
    sections_[kind] = {offset, size, crc, true};
    extents.emplace_back(offset, size);
  }
  // Sections tile the bytes between header and footer: no byte escapes a check.
  if (!SectionsTile(std::move(extents), footer_offset)) {
    return Corrupt("sections overlap or leave gaps");
  }
  STOKER_RETURN_IF_ERROR(CheckSectionKinds());
  for (std::string* key : {&info_.first_key, &info_.last_key}) {
    const auto n = c.Fixed<uint32_t>();
    key->assign(c.Bytes(n));
  }
  if (!c.ok || !c.in.empty() || (info_.file_count > 0) == info_.first_key.empty() ||
      info_.first_key > info_.last_key) {
    return Corrupt("bad footer keys");
  }
  return Status::OK();
}

Status Segment::CheckSectionKinds() const {
  for (uint32_t kind = kSegChunks; kind < kSegSectionKinds; ++kind) {
    const bool expected = kind == kSegSamples    ? grouped()
                          : kind == kSegKeyRanks ? positioned()
                                                 : true;
    if (sections_[kind].present != expected) {
      return Corrupt(fmt::format("section {} {}", kind,
                                 sections_[kind].present ? "is unexpected" : "is missing"));
    }
  }
  // Every file costs at least 7 bytes of location (§3.2: varint position, varint length, CRC,
  // varint label) and 3 of its files-table entry: a footer that counts more files than its
  // sections could hold is refused here, before anything is sized by the count.
  if (sections_[kSegLocations].size / 7 < info_.file_count ||
      sections_[kSegFiles].size / 3 < info_.file_count) {
    return Corrupt(fmt::format("the footer counts {} files, more than its sections could hold",
                               info_.file_count));
  }
  return Status::OK();
}

Status Segment::LoadTables() {
  struct TableKinds {
    std::unique_ptr<Table>* table;
    uint32_t blocks, index, keys;
    uint64_t entries;
  };
  for (const TableKinds& t :
       {TableKinds{&files_, kSegFiles, kSegFileIndex, kSegFileKeys, info_.file_count},
        TableKinds{&dirs_, kSegDirs, kSegDirIndex, kSegDirKeys, info_.dir_count},
        TableKinds{&attrs_, kSegAttrs, kSegAttrIndex, kSegAttrKeys, info_.attr_count}}) {
    *t.table = std::make_unique<Table>(this, t.blocks, t.index, t.entries);
    STOKER_ASSIGN_OR_RETURN(std::string keys, ReadSection(t.keys));
    if (version_ == kFormatVersion2) {
      STOKER_ASSIGN_OR_RETURN(std::string index, ReadSection(t.index));
      STOKER_RETURN_IF_ERROR((*t.table)->LoadFlat(index, keys, t.keys));
    } else {
      STOKER_RETURN_IF_ERROR((*t.table)->LoadTop(keys, t.keys));
    }
  }
  if (positioned() &&
      sections_[kSegKeyRanks].size !=
          KeyRankWidth(info_.file_count) * info_.file_count + 4 * BlocksFor(info_.file_count)) {
    return Corrupt("key ranks section has the wrong size");
  }
  if (info_.file_count > 0 && files_->first_key() != info_.first_key) {
    return Corrupt("the footer's first key differs from the files'");
  }
  if (!dirs_->first_key().empty()) {
    return Corrupt("the directories do not start at the root");
  }
  return Status::OK();
}

Status Segment::LoadClasses() {
  STOKER_ASSIGN_OR_RETURN(std::string classes, ReadSection(kSegClasses));
  ByteCursor cc{classes};
  for (uint32_t k = 0; k < info_.class_count && cc.ok; ++k) {
    classes_.emplace_back(cc.Bytes(cc.Varint()));
  }
  if (!cc.ok || !cc.in.empty()) return Corrupt("malformed classes section");
  return Status::OK();
}

namespace {

// A chunk record; nullopt if a format-3 record's sample count or zero word is impossible.
std::optional<SegmentChunk> DecodeChunkRecord(const char* r, uint32_t version, bool grouped) {
  const uint32_t count_word = coding::DecodeFixed<uint32_t>(r + 20);
  SegmentChunk ch;
  ch.id = coding::DecodeFixed<uint64_t>(r);
  ch.file_size = coding::DecodeFixed<uint64_t>(r + 8);
  ch.data_crc32c = coding::DecodeFixed<uint32_t>(r + 16);
  ch.entry_count = count_word & ~kChunkRecordWideIndex;
  ch.wide_index = count_word & kChunkRecordWideIndex;
  ch.first_location = coding::DecodeFixed<uint64_t>(r + 24);
  if (version == kFormatVersion2) {
    if (!grouped) ch.sample_count = ch.entry_count;
    return ch;
  }
  ch.sample_count = coding::DecodeFixed<uint32_t>(r + 32);
  if (coding::DecodeFixed<uint32_t>(r + 36) != 0 || *ch.sample_count > ch.entry_count ||
      (!grouped && *ch.sample_count != ch.entry_count)) {
    return std::nullopt;
  }
  return ch;
}

// The size of a section of `items` fixed-size records in groups of kBlockEntries, each group
// with `extra` records more (the location index's shared end) and a CRC32C.
uint64_t GroupedSize(uint64_t items, uint64_t record, uint64_t extra) {
  const uint64_t full = items / kBlockEntries, rest = items % kBlockEntries;
  return full * ((kBlockEntries + extra) * record + 4) + (rest ? (rest + extra) * record + 4 : 0);
}

}  // namespace

Status Segment::LoadFlatIndexes() {
  // Chunks: their entries tile the locations.
  STOKER_ASSIGN_OR_RETURN(std::string chunks, ReadSection(kSegChunks));
  if (chunks.size() % kSegmentChunkRecordSize2 != 0 ||
      chunks.size() / kSegmentChunkRecordSize2 != info_.chunk_count) {
    return Corrupt("chunks section has the wrong size");
  }
  uint64_t next_location = 0;
  for (uint64_t i = 0; i < info_.chunk_count; ++i) {
    const std::optional<SegmentChunk> decoded =
        DecodeChunkRecord(chunks.data() + kSegmentChunkRecordSize2 * i, version_, grouped());
    if (!decoded) return Corrupt(fmt::format("bad chunk record {}", i));
    const SegmentChunk& ch = *decoded;
    if (ch.first_location != next_location || ch.file_size < ch.fixed_bytes()) {
      return Corrupt(fmt::format("bad chunk record {}", i));
    }
    next_location += ch.entry_count;
    chunks_.push_back(ch);
  }
  if (next_location != info_.file_count) return Corrupt("chunk entries do not add up to the files");

  STOKER_ASSIGN_OR_RETURN(std::string locations, ReadSection(kSegLocationIndex));
  const uint64_t location_blocks = BlocksFor(info_.file_count);
  if (locations.size() != 8 * (location_blocks + 1)) {
    return Corrupt("location index has the wrong size");
  }
  for (uint64_t b = 0; b <= location_blocks; ++b) {
    const auto offset = coding::DecodeFixed<uint64_t>(locations.data() + 8 * b);
    if ((b == 0 ? offset != 0 : offset <= location_index_.back()) ||
        (b == location_blocks && offset != sections_[kSegLocations].size)) {
      return Corrupt("location index is out of order");
    }
    location_index_.push_back(offset);
  }
  return Status::OK();
}

Status Segment::CheckGroupedSizes() const {
  if (sections_[kSegChunks].size != GroupedSize(info_.chunk_count, kSegmentChunkRecordSize, 0)) {
    return Corrupt("chunks section has the wrong size");
  }
  if (sections_[kSegLocationIndex].size != GroupedSize(BlocksFor(info_.file_count), 8, 1)) {
    return Corrupt("location index has the wrong size");
  }
  return Status::OK();
}

Result<SegmentChunk> Segment::chunk(uint64_t c) const {
  if (c >= info_.chunk_count) {
    return Err(Corrupt(fmt::format("chunk {} of {} asked for", c, info_.chunk_count)));
  }
  if (version_ == kFormatVersion2) return chunks_[c];
  const uint64_t g = c / kBlockEntries;
  STOKER_ASSIGN_OR_RETURN(
      auto group, chunk_groups_.Get(g, [&]() -> Result<std::vector<SegmentChunk>> {
        const uint64_t count = std::min(kBlockEntries, info_.chunk_count - g * kBlockEntries);
        // Not into the block cache: the parsed group is cached (chunk_groups_).
        STOKER_ASSIGN_OR_RETURN(
            std::string bytes, ReadBlockBytes(kSegChunks, g * kChunkGroupStride,
                                              count * kSegmentChunkRecordSize + 4, /*keep=*/false));
        std::vector<SegmentChunk> out;
        for (uint64_t i = 0; i < count; ++i) {
          const auto decoded =
              DecodeChunkRecord(bytes.data() + kSegmentChunkRecordSize * i, version_, grouped());
          if (!decoded)
            return Err(Corrupt(fmt::format("bad chunk record {}", g * kBlockEntries + i)));
          const SegmentChunk& ch = *decoded;
          const uint64_t expected = i > 0    ? out.back().first_location + out.back().entry_count
                                    : g == 0 ? 0
                                             : ch.first_location;
          const bool last = g * kBlockEntries + i + 1 == info_.chunk_count;
          if (ch.first_location != expected || ch.file_size < ch.fixed_bytes() ||
              ch.first_location > info_.file_count ||
              ch.entry_count > info_.file_count - ch.first_location ||
              (last && ch.first_location + ch.entry_count != info_.file_count)) {
            return Err(Corrupt(fmt::format("bad chunk record {}", g * kBlockEntries + i)));
          }
          out.push_back(ch);
        }
        return out;
      }));
  return (*group)[c % kBlockEntries];
}

Result<std::pair<uint64_t, uint64_t>> Segment::LocationBlockExtent(uint64_t b) const {
  if (version_ == kFormatVersion2) {
    return std::pair(location_index_[b], location_index_[b + 1] - location_index_[b]);
  }
  const uint64_t blocks = BlocksFor(info_.file_count), g = b / kBlockEntries;
  const uint64_t entries = std::min(kBlockEntries, blocks - g * kBlockEntries) + 1;
  STOKER_ASSIGN_OR_RETURN(
      std::string bytes,
      ReadBlockBytes(kSegLocationIndex, g * kLocationGroupStride, entries * 8 + 4));
  const uint64_t i = b % kBlockEntries;
  const auto begin = coding::DecodeFixed<uint64_t>(bytes.data() + 8 * i);
  const auto end = coding::DecodeFixed<uint64_t>(bytes.data() + 8 * (i + 1));
  const uint64_t section = sections_[kSegLocations].size;
  if ((b == 0 && begin != 0) || end <= begin || end > section ||
      (b + 1 == blocks && end != section)) {
    return Err(Corrupt(fmt::format("location index entry {} is out of order", b)));
  }
  return std::pair(begin, end - begin);
}

Status Segment::LoadSamples() const {
  if (!grouped() || samples_loaded_.load(std::memory_order_acquire)) return Status::OK();
  std::lock_guard lock(samples_mu_);
  if (samples_loaded_.load(std::memory_order_relaxed)) return Status::OK();
  STOKER_ASSIGN_OR_RETURN(std::string samples, ReadSection(kSegSamples));
  std::vector<uint64_t> firsts;
  firsts.reserve(info_.sample_count + 1);
  for (uint64_t s = 0; s <= info_.sample_count; ++s) {
    const auto first = coding::DecodeFixed<uint64_t>(samples.data() + 8 * s);
    if ((s == 0 ? first != 0 : first <= firsts.back()) ||
        (s == info_.sample_count && first != info_.file_count)) {
      return Corrupt("samples section is out of order");
    }
    firsts.push_back(first);
  }
  samples_ = std::move(firsts);
  samples_loaded_.store(true, std::memory_order_release);
  return Status::OK();
}

Result<std::vector<SegmentLocation>> Segment::LocationBlock(uint64_t block, bool keep) const {
  STOKER_ASSIGN_OR_RETURN(const auto extent, LocationBlockExtent(block));
  STOKER_ASSIGN_OR_RETURN(std::string bytes,
                          ReadBlockBytes(kSegLocations, extent.first, extent.second, keep));
  const uint64_t first = block * kBlockEntries;
  const uint64_t count = std::min(kBlockEntries, info_.file_count - first);
  const Status bad = Corrupt(fmt::format("location block {} is malformed", block));
  std::vector<SegmentLocation> out(count);
  ByteCursor c{bytes};
  uint64_t offset = c.Fixed<uint64_t>();
  // The chunk of the block's first entry: format 3 says it; in format 2, the last chunk that
  // starts at or before it (every chunk is in memory).
  uint64_t chunk = 0;
  if (version_ == kFormatVersion2) {
    auto it =
        std::upper_bound(chunks_.begin(), chunks_.end(), first,
                         [](uint64_t k, const SegmentChunk& ch) { return k < ch.first_location; });
    chunk = static_cast<uint64_t>(it - chunks_.begin()) - 1;
    while (chunks_[chunk].entry_count == 0) ++chunk;  // empty chunks hold no locations
  } else {
    chunk = c.Varint();
  }
  if (!c.ok) return Err(bad);
  STOKER_ASSIGN_OR_RETURN(SegmentChunk ch, this->chunk(chunk));
  if (first < ch.first_location || first >= ch.first_location + ch.entry_count) return Err(bad);
  const uint64_t total_labels = uint64_t{info_.first_label} + info_.class_count;
  for (uint64_t i = 0; i < count && c.ok; ++i) {
    const uint64_t ordinal = first + i;
    while (ordinal >= ch.first_location + ch.entry_count) {
      const uint64_t end = ch.first_location + ch.entry_count;
      STOKER_ASSIGN_OR_RETURN(ch, this->chunk(++chunk));
      if (ch.first_location != end) return Err(bad);  // chunk records must tile the locations
    }
    if (ordinal == ch.first_location) {
      if (i > 0)
        offset = kChunkHeaderSize;
      else if (offset != kChunkHeaderSize)
        c.ok = false;
    } else if (i > 0) {
      offset = out[i - 1].offset + out[i - 1].length;
    }
    SegmentLocation& l = out[i];
    l.position = c.Varint();
    l.chunk = chunk;
    l.offset = offset;
    l.length = c.Varint();
    l.crc32c = c.Fixed<uint32_t>();
    const uint64_t label = c.Varint();
    l.label = static_cast<int32_t>(label) - 1;
    if (!grouped()) {
      l.sample = l.position;
      l.sample_files = 1;
    } else if (version_ == kFormatVersion3) {
      l.sample = c.Varint();
      l.sample_files = c.Varint();
      if (l.sample >= info_.sample_count || l.sample_files > info_.file_count) c.ok = false;
    }
    const uint64_t data_end = ch.file_size - ch.fixed_bytes() + kChunkHeaderSize;
    if (l.position >= info_.file_count || label > total_labels || offset < kChunkHeaderSize ||
        l.length > data_end || offset > data_end - l.length) {
      c.ok = false;
    }
  }
  if (!c.ok || !c.in.empty()) return Err(bad);
  return out;
}

Result<std::vector<uint64_t>> Segment::KeyRankBlock(uint64_t b, bool keep) const {
  const uint64_t width = KeyRankWidth(info_.file_count);
  const uint64_t entries = std::min(kBlockEntries, info_.file_count - b * kBlockEntries);
  STOKER_ASSIGN_OR_RETURN(
      std::string bytes,
      ReadBlockBytes(kSegKeyRanks, b * (kBlockEntries * width + 4), entries * width + 4, keep));
  std::vector<uint64_t> ranks(entries);
  for (uint64_t i = 0; i < entries; ++i) {
    const char* at = bytes.data() + i * width;
    ranks[i] = width == 4 ? coding::DecodeFixed<uint32_t>(at) : coding::DecodeFixed<uint64_t>(at);
    if (ranks[i] >= info_.file_count) {
      return Err(Corrupt(fmt::format("bad key rank of file {}", b * kBlockEntries + i)));
    }
  }
  return ranks;
}

Result<uint64_t> Segment::KeyRank(uint64_t position) const {
  if (!positioned()) return position;
  STOKER_ASSIGN_OR_RETURN(auto ranks, KeyRankBlock(position / kBlockEntries, true));
  return ranks[position % kBlockEntries];
}

Result<Segment::FileValue> Segment::ParseFileValue(std::string_view value, uint64_t rank) const {
  const auto ordinal = varint::Get(&value);
  const auto position = positioned() ? varint::Get(&value) : std::optional<uint64_t>(rank);
  if (!ordinal || !position || !value.empty() || *ordinal >= info_.file_count ||
      *position >= info_.file_count) {
    return Err(Corrupt(fmt::format("bad value of file entry {}", rank)));
  }
  return FileValue{*ordinal, *position};
}

Result<std::pair<std::string, Segment::FileValue>> Segment::FileAt(uint64_t position) const {
  STOKER_ASSIGN_OR_RETURN(const uint64_t rank, KeyRank(position));
  STOKER_ASSIGN_OR_RETURN(auto entry, files_->EntryAt(rank / kBlockEntries, rank % kBlockEntries));
  STOKER_ASSIGN_OR_RETURN(const FileValue value, ParseFileValue(entry.value, rank));
  if (value.position != position) {
    return Err(Corrupt(fmt::format("file {} and its key rank disagree", position)));
  }
  return std::pair(std::move(entry.key), value);
}

Result<std::string> Segment::PathOf(std::string_view key, uint64_t position) const {
  auto path = PathOfFileKey(key);
  if (!path) return Err(Corrupt(fmt::format("the key of file {} is malformed", position)));
  return std::move(*path);
}

Result<std::string> Segment::FilePath(uint64_t position) const {
  STOKER_ASSIGN_OR_RETURN(auto file, FileAt(position));
  return PathOf(file.first, position);
}

Result<SegmentLocation> Segment::FileLocation(uint64_t position) const {
  STOKER_ASSIGN_OR_RETURN(auto file, FileAt(position));
  const uint64_t ordinal = file.second.location;
  STOKER_ASSIGN_OR_RETURN(auto block, LocationBlock(ordinal / kBlockEntries));
  const SegmentLocation& l = block[ordinal % kBlockEntries];
  if (l.position != position) {
    return Err(Corrupt(fmt::format("file {} and its location disagree", position)));
  }
  return l;
}

Result<std::optional<uint64_t>> Segment::FindFile(std::string_view path) const {
  const std::string key = FileKeyOf(path);
  if (info_.file_count == 0 || key < info_.first_key || key > info_.last_key) {
    return std::optional<uint64_t>();
  }
  STOKER_ASSIGN_OR_RETURN(auto found, files_->Find(key));
  if (!found) return std::optional<uint64_t>();
  STOKER_ASSIGN_OR_RETURN(const FileValue value, ParseFileValue(found->second.value, found->first));
  // A merged segment's position must map back to this entry: two entries claiming one position
  // (a hostile or broken writer) would otherwise hand out another file's bytes.
  if (positioned()) {
    STOKER_ASSIGN_OR_RETURN(const uint64_t rank, KeyRank(value.position));
    if (rank != found->first) {
      return Err(Corrupt(fmt::format("file {} and its key rank disagree", value.position)));
    }
  }
  return std::optional<uint64_t>(value.position);
}

Result<std::vector<SegmentFileEntry>> Segment::Files(uint64_t first, uint64_t count) const {
  if (first > info_.file_count || count > info_.file_count - first) {
    return Err(Status::InvalidArgument(
        fmt::format("segment {}: files [{}, +{}) out of range", name_, first, count)));
  }
  std::vector<SegmentFileEntry> out(count);
  std::vector<uint64_t> positions(count);
  std::vector<std::pair<uint64_t, uint64_t>> by_ordinal;  // (location ordinal, output slot)
  by_ordinal.reserve(count);
  for (uint64_t b = first / kBlockEntries; count > 0 && b <= (first + count - 1) / kBlockEntries;
       ++b) {
    STOKER_ASSIGN_OR_RETURN(auto block, files_->Block(b));
    for (uint64_t i = 0; i < block.size(); ++i) {
      const uint64_t rank = b * kBlockEntries + i;
      if (rank < first || rank >= first + count) continue;
      STOKER_ASSIGN_OR_RETURN(const FileValue value, ParseFileValue(block[i].value, rank));
      STOKER_ASSIGN_OR_RETURN(out[rank - first].path, PathOf(block[i].key, rank));
      positions[rank - first] = value.position;
      by_ordinal.emplace_back(value.location, rank - first);
    }
  }
  // Locations lie in storage order, not key order: read each block they fall in once.
  std::sort(by_ordinal.begin(), by_ordinal.end());
  std::vector<SegmentLocation> block;
  uint64_t loaded = UINT64_MAX;
  for (const auto& [ordinal, slot] : by_ordinal) {
    if (ordinal / kBlockEntries != loaded) {
      loaded = ordinal / kBlockEntries;
      STOKER_ASSIGN_OR_RETURN(block, LocationBlock(loaded));
    }
    out[slot].location = block[ordinal % kBlockEntries];
    if (out[slot].location.position != positions[slot]) {
      return Err(Corrupt(fmt::format("file {} and its location disagree", positions[slot])));
    }
  }
  return out;
}

Result<std::vector<std::string>> Segment::Holding(std::span<const std::string> keys) const {
  std::vector<std::string> found;
  if (info_.file_count == 0) return found;
  std::vector<Table::Entry> block;
  uint64_t loaded = UINT64_MAX;
  for (const std::string& key : keys) {
    if (key < info_.first_key || key > info_.last_key) continue;
    STOKER_ASSIGN_OR_RETURN(const auto b, files_->BlockFor(key));
    if (!b) continue;
    if (*b != loaded) {
      loaded = *b;
      STOKER_ASSIGN_OR_RETURN(block, files_->Block(loaded));
    }
    if (std::binary_search(block.begin(), block.end(), key,
                           [](const auto& x, const auto& y) { return KeyOf(x) < KeyOf(y); })) {
      found.push_back(PathOfFileKey(key).value_or(key));  // the caller's own key
    }
  }
  return found;
}

Result<std::optional<SegmentDir>> Segment::FindDir(std::string_view path) const {
  STOKER_ASSIGN_OR_RETURN(auto found, dirs_->Find(path));
  if (!found) return std::optional<SegmentDir>();
  std::string_view in = found->second.value;
  const auto first = varint::Get(&in), count = varint::Get(&in);
  if (!first || !count || !in.empty() || *first > info_.file_count ||
      *count > info_.file_count - *first) {
    return Err(Corrupt(fmt::format("bad directory record for '{}'", path)));
  }
  return std::optional<SegmentDir>(SegmentDir{*first, *count});
}

Result<std::vector<std::string>> Segment::ChildDirs(std::string_view dir) const {
  const std::string prefix = dir.empty() ? std::string() : std::string(dir) + "/";
  std::vector<std::string> out;
  STOKER_RETURN_IF_ERROR(dirs_->Scan(prefix, [&](const Table::Entry& e) {
    if (!e.key.starts_with(prefix)) return false;
    const std::string_view rest = std::string_view(e.key).substr(prefix.size());
    // Children come before their own subdirectories ("a" < "a/b"), so a name is new when it
    // differs from the last one added.
    if (!rest.empty() && rest.find('/') == std::string_view::npos) out.emplace_back(rest);
    return true;
  }));
  return out;
}

bool Segment::says_samples() const { return !grouped() || version_ != kFormatVersion2; }

std::pair<uint64_t, uint64_t> Segment::SampleOf(uint64_t position) const {
  if (!grouped()) return {position, 1};
  const auto it = std::upper_bound(samples_.begin(), samples_.end(), position);
  const uint64_t s = static_cast<uint64_t>(it - samples_.begin()) - 1;
  return {s, samples_[s] == position ? samples_[s + 1] - samples_[s] : 0};
}

std::pair<uint64_t, uint64_t> Segment::SampleFiles(uint64_t s) const {
  if (!grouped()) return {s, 1};
  return {samples_[s], samples_[s + 1] - samples_[s]};
}

Result<std::vector<std::pair<std::string, std::string>>> Segment::Attributes(
    uint64_t position) const {
  std::string prefix(8, '\0');
  for (int b = 0; b < 8; ++b) prefix[b] = static_cast<char>(position >> (56 - 8 * b));
  std::vector<std::pair<std::string, std::string>> out;
  if (info_.attr_count == 0) return out;
  STOKER_RETURN_IF_ERROR(attrs_->Scan(prefix, [&](const Table::Entry& e) {
    if (!e.key.starts_with(prefix)) return false;
    out.emplace_back(e.key.substr(8), e.value);
    return true;
  }));
  return out;
}

Status Segment::ForEachAttribute(
    const std::function<void(uint64_t, std::string_view, std::string_view)>& fn) const {
  if (info_.attr_count == 0) return Status::OK();
  Status bad;
  STOKER_RETURN_IF_ERROR(attrs_->Scan(
      "",
      [&](const Table::Entry& e) {
        uint64_t position = 0;
        for (int b = 0; b < 8 && b < static_cast<int>(e.key.size()); ++b) {
          position = (position << 8) | static_cast<uint8_t>(e.key[b]);
        }
        if (e.key.size() < 8 || position >= info_.file_count) {
          bad = Corrupt("an attribute names no file");
          return false;
        }
        fn(position, std::string_view(e.key).substr(8), e.value);
        return true;
      },
      /*keep=*/false));
  return bad;
}

Status Segment::CheckSamplesOfLocations() const {
  // Every location block's CRC and structure; and, in a grouped format-3 segment, that each
  // location names the sample the samples section puts it in, its file count on its first
  // file, and that each chunk record counts the samples that start in it.
  const bool says_samples = grouped() && version_ == kFormatVersion3;
  uint64_t chunk = 0, started = 0, total = 0;
  std::optional<SegmentChunk> current;
  const auto end_chunk = [&]() -> Status {
    if (current && current->sample_count && *current->sample_count != started) {
      return Corrupt(fmt::format("chunk record {} counts {} samples, its files start {}", chunk,
                                 *current->sample_count, started));
    }
    return Status::OK();
  };
  Status bad;
  STOKER_RETURN_IF_ERROR(ForEachLocation([&](uint64_t, const SegmentLocation& l) {
    if (!bad.ok()) return;
    if (!current || l.chunk != chunk) {
      bad = end_chunk();
      chunk = l.chunk;
      started = 0;
      auto ch = this->chunk(chunk);
      if (!ch) {
        bad = ch.error();
        return;
      }
      current = *ch;
    }
    if (!says_samples) {
      started += !grouped();
      return;
    }
    const auto [first, count] = SampleFiles(l.sample);
    const bool starts = l.position == first;
    if (l.position < first || l.position >= first + count ||
        l.sample_files != (starts ? count : 0)) {
      bad = Corrupt(fmt::format("the location of file {} names the wrong sample", l.position));
    }
    started += starts;
    total += starts;
  }));
  STOKER_RETURN_IF_ERROR(bad);
  STOKER_RETURN_IF_ERROR(end_chunk());
  if (says_samples && total != info_.sample_count) {
    return Corrupt("the locations do not start every sample once");
  }
  return Status::OK();
}

Status Segment::CheckEveryBlock() const {
  STOKER_RETURN_IF_ERROR(LoadSamples());
  for (const Table* table : {files_.get(), dirs_.get(), attrs_.get()}) {
    STOKER_RETURN_IF_ERROR(table->CheckEveryBlock());
  }
  // Chunk records tile the locations (format 3 reads them a group at a time, and checks within
  // a group as it goes; this checks across groups too).
  uint64_t next_location = 0;
  for (uint64_t c = 0; c < info_.chunk_count; ++c) {
    STOKER_ASSIGN_OR_RETURN(const SegmentChunk ch, chunk(c));
    if (ch.first_location != next_location) return Corrupt(fmt::format("bad chunk record {}", c));
    next_location += ch.entry_count;
  }
  if (next_location != info_.file_count) return Corrupt("chunk entries do not add up to the files");
  if (version_ == kFormatVersion3) {
    // The footer's CRC of the chunk table is over its records alone (docs/format.md §3.1).
    uint32_t crc = 0;
    for (uint64_t g = 0; g * kBlockEntries < info_.chunk_count; ++g) {
      const uint64_t count = std::min(kBlockEntries, info_.chunk_count - g * kBlockEntries);
      STOKER_ASSIGN_OR_RETURN(const std::string records,
                              ReadBlockBytes(kSegChunks, g * kChunkGroupStride,
                                             count * kSegmentChunkRecordSize + 4, false));
      crc = crc32c::Extend(crc, records.data(), records.size());
    }
    if (options_.verify_checksums && crc != sections_[kSegChunks].crc) {
      return Corrupt("the chunk table differs from the footer's CRC32C of it");
    }
  }
  STOKER_RETURN_IF_ERROR(CheckSamplesOfLocations());
  STOKER_RETURN_IF_ERROR(
      ForEachKeyRank([](uint64_t, uint64_t) { return Status::OK(); }));  // every block's CRC
  return ForEachFile([](uint64_t, std::string_view, uint64_t) { return Status::OK(); });
}

Result<std::vector<SegmentLocation>> Segment::ChunkLocations(uint64_t c) const {
  STOKER_ASSIGN_OR_RETURN(const SegmentChunk ch, chunk(c));
  std::vector<SegmentLocation> out;
  out.reserve(ch.entry_count);
  const uint64_t end = ch.first_location + ch.entry_count;
  for (uint64_t b = ch.first_location / kBlockEntries; b * kBlockEntries < end; ++b) {
    STOKER_ASSIGN_OR_RETURN(auto block, LocationBlock(b, false));
    for (uint64_t i = 0; i < block.size(); ++i) {
      const uint64_t ordinal = b * kBlockEntries + i;
      if (ordinal >= ch.first_location && ordinal < end) out.push_back(block[i]);
    }
  }
  return out;
}

Status Segment::ForEachLocation(
    const std::function<void(uint64_t, const SegmentLocation&)>& fn) const {
  for (uint64_t b = 0; b < BlocksFor(info_.file_count); ++b) {
    STOKER_ASSIGN_OR_RETURN(auto block, LocationBlock(b, false));
    for (uint64_t i = 0; i < block.size(); ++i) fn(b * kBlockEntries + i, block[i]);
  }
  return Status::OK();
}

Status Segment::ForEachFile(
    const std::function<Status(uint64_t, std::string_view, uint64_t)>& fn) const {
  for (uint64_t b = 0; b < files_->block_count(); ++b) {
    STOKER_ASSIGN_OR_RETURN(auto block, files_->Block(b, false));
    for (uint64_t i = 0; i < block.size(); ++i) {
      const uint64_t rank = b * kBlockEntries + i;
      STOKER_ASSIGN_OR_RETURN(const FileValue value, ParseFileValue(block[i].value, rank));
      STOKER_ASSIGN_OR_RETURN(const std::string path, PathOf(block[i].key, value.position));
      STOKER_RETURN_IF_ERROR(fn(value.position, path, value.location));
    }
  }
  return Status::OK();
}

uint64_t Segment::file_block_count() const { return files_->block_count(); }

Result<std::vector<SegmentKeyedFile>> Segment::FileBlock(uint64_t b) const {
  STOKER_ASSIGN_OR_RETURN(auto block, files_->Block(b, false));
  std::vector<SegmentKeyedFile> out(block.size());
  for (uint64_t i = 0; i < block.size(); ++i) {
    STOKER_ASSIGN_OR_RETURN(const FileValue value,
                            ParseFileValue(block[i].value, b * kBlockEntries + i));
    out[i] = {std::move(block[i].key), value.position, value.location};
  }
  return out;
}

Status Segment::ForEachKeyRank(const std::function<Status(uint64_t, uint64_t)>& fn) const {
  for (uint64_t b = 0; b < BlocksFor(info_.file_count); ++b) {
    std::vector<uint64_t> ranks;
    if (positioned()) {
      STOKER_ASSIGN_OR_RETURN(ranks, KeyRankBlock(b, false));
    }
    const uint64_t first = b * kBlockEntries;
    for (uint64_t p = first; p < std::min(first + kBlockEntries, info_.file_count); ++p) {
      STOKER_RETURN_IF_ERROR(fn(p, positioned() ? ranks[p - first] : p));
    }
  }
  return Status::OK();
}

}  // namespace stoker::format
