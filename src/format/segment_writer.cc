#include "format/segment_writer.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/coding.h"
#include "common/crc32c.h"
#include "common/varint.h"
#include "format/chunk.h"
#include "format/segment_layout.h"

namespace stoker::format {
namespace {

size_t SharedPrefix(std::string_view a, std::string_view b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

// The directory of `path` ("" for the root).
std::string_view DirOf(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? std::string_view() : path.substr(0, slash);
}

}  // namespace

// ---- SegmentFileWriter

Status SegmentFileWriter::Header() {
  std::string header(kSegmentHeaderSize, '\0');
  std::copy(std::begin(kSegmentMagic), std::end(kSegmentMagic), header.begin());
  coding::EncodeFixed<uint32_t>(header.data() + 8, kFormatVersion3);
  offset_ += header.size();
  return sink_.Append(header);
}

void SegmentFileWriter::Begin(uint32_t kind) {
  sections_.push_back({kind, 0, offset_, 0});
  open_ = true;
}

Status SegmentFileWriter::Append(std::string_view bytes) {
  if (!open_) return Status::Internal("segment bytes outside a section");
  Record& r = sections_.back();
  r.crc32c = crc32c::Extend(r.crc32c, bytes.data(), bytes.size());
  r.size += bytes.size();
  offset_ += bytes.size();
  return sink_.Append(bytes);
}

Status SegmentFileWriter::AppendGroup(std::string_view group) {
  if (!open_ || group.size() < 4) return Status::Internal("a segment group outside a section");
  Record& r = sections_.back();
  r.crc32c = crc32c::Extend(r.crc32c, group.data(), group.size() - 4);
  r.size += group.size();
  offset_ += group.size();
  return sink_.Append(group);
}

void SegmentFileWriter::End() { open_ = false; }

Status SegmentFileWriter::Section(uint32_t kind, std::string_view bytes) {
  Begin(kind);
  STOKER_RETURN_IF_ERROR(Append(bytes));
  End();
  return Status::OK();
}

Status SegmentFileWriter::Section(uint32_t kind, const Spool& spool) {
  Begin(kind);
  STOKER_RETURN_IF_ERROR(spool.CopyTo([this](std::string_view bytes) { return Append(bytes); }));
  End();
  return Status::OK();
}

Status SegmentFileWriter::Finish(const Footer& ft) {
  if (open_) return Status::Internal("a segment section was not ended");
  std::string f;
  coding::PutFixed<uint32_t>(&f, kFormatVersion3);
  coding::PutFixed<uint32_t>(&f, ft.flags);
  coding::PutFixed<uint64_t>(&f, ft.first_file);
  coding::PutFixed<uint64_t>(&f, ft.files);
  coding::PutFixed<uint64_t>(&f, ft.first_sample);
  coding::PutFixed<uint64_t>(&f, ft.samples);
  coding::PutFixed<uint32_t>(&f, ft.first_label);
  coding::PutFixed<uint32_t>(&f, ft.classes);
  coding::PutFixed<uint64_t>(&f, ft.total_bytes);
  coding::PutFixed<uint64_t>(&f, ft.chunks);
  coding::PutFixed<uint64_t>(&f, ft.dirs);
  coding::PutFixed<uint64_t>(&f, ft.attrs);
  coding::PutFixed<uint32_t>(&f, static_cast<uint32_t>(sections_.size()));
  coding::PutFixed<uint32_t>(&f, static_cast<uint32_t>(kBlockEntries));
  for (const Record& r : sections_) {
    coding::PutFixed<uint32_t>(&f, r.kind);
    coding::PutFixed<uint32_t>(&f, r.crc32c);
    coding::PutFixed<uint64_t>(&f, r.offset);
    coding::PutFixed<uint64_t>(&f, r.size);
    coding::PutFixed<uint64_t>(&f, 0);
  }
  for (const std::string* key : {&ft.first_key, &ft.last_key}) {
    coding::PutFixed<uint32_t>(&f, static_cast<uint32_t>(key->size()));
    f.append(*key);
  }
  std::string trailer;
  coding::PutFixed<uint64_t>(&trailer, offset_);
  coding::PutFixed<uint64_t>(&trailer, f.size());
  coding::PutFixed<uint32_t>(&trailer, crc32c::Value(f));
  coding::PutFixed<uint32_t>(&trailer, 0);
  trailer.append(kSegmentTrailerMagic, sizeof(kSegmentTrailerMagic));
  STOKER_RETURN_IF_ERROR(sink_.Append(f));
  offset_ += f.size();
  offset_ += trailer.size();
  return sink_.Append(trailer);
}

// ---- KeyedBlockEncoder

void KeyedBlockEncoder::Add(std::string_view key, std::string_view value) {
  if (count_ == 0) first_key_.assign(key);
  const size_t shared = count_ == 0 ? 0 : SharedPrefix(previous_, key);
  varint::Put(&block_, shared);
  varint::Put(&block_, key.size() - shared);
  block_.append(key.substr(shared));
  varint::Put(&block_, value.size());
  block_.append(value);
  previous_.assign(key);
  ++count_;
}

std::string KeyedBlockEncoder::Take() {
  coding::PutFixed<uint32_t>(&block_, crc32c::Value(block_));
  std::string out = std::move(block_);
  block_.clear();
  count_ = 0;
  return out;
}

// ---- KeyedTableWriter

Status KeyedTableWriter::CreateSpools() {
  if (index_) return Status::OK();
  STOKER_ASSIGN_OR_RETURN(index_, Spool::Create(temp_dir_));
  STOKER_ASSIGN_OR_RETURN(top_, Spool::Create(temp_dir_));
  return Status::OK();
}

Status KeyedTableWriter::Add(std::string_view key, std::string_view value) {
  if (key.size() > kMaxKeyBytes) {
    return Status::InvalidArgument(fmt::format("a key of {} bytes (at most {}): {}...", key.size(),
                                               kMaxKeyBytes, key.substr(0, 64)));
  }
  if (block_.count() == kBlockEntries) STOKER_RETURN_IF_ERROR(EndBlock());
  block_.Add(key, value);
  ++count_;
  return Status::OK();
}

// index_ and top_ exist from CreateSpools (run by EndBlock and Finish) on: the check cannot see
// that across calls.
// NOLINTBEGIN(bugprone-unchecked-optional-access)
Status KeyedTableWriter::EndBlock() {
  if (block_.count() == 0) return Status::OK();
  STOKER_RETURN_IF_ERROR(CreateSpools());
  if (index_block_.count() == kBlockEntries) STOKER_RETURN_IF_ERROR(EndIndexBlock());
  const std::string first_key = block_.first_key();
  if (first_key.size() > UINT32_MAX) return Status::Unsupported("a key of 4 GiB or more");
  if (index_block_.count() == 0) {
    // A new index block starts with this data block: its top record.
    std::string record;
    coding::PutFixed<uint64_t>(&record, index_size_);
    coding::PutFixed<uint64_t>(&record, blocks_size_);
    coding::PutFixed<uint32_t>(&record, static_cast<uint32_t>(first_key.size()));
    record.append(first_key);
    STOKER_RETURN_IF_ERROR(top_->Append(record));
  }
  const std::string bytes = block_.Take();
  std::string size;
  varint::Put(&size, bytes.size());
  index_block_.Add(first_key, size);
  blocks_size_ += bytes.size();
  return emit_(bytes);
}

Status KeyedTableWriter::EndIndexBlock() {
  if (index_block_.count() == 0) return Status::OK();
  const std::string bytes = index_block_.Take();
  index_size_ += bytes.size();
  return index_->Append(bytes);
}

Status KeyedTableWriter::Finish() {
  STOKER_RETURN_IF_ERROR(EndBlock());
  STOKER_RETURN_IF_ERROR(CreateSpools());
  STOKER_RETURN_IF_ERROR(EndIndexBlock());
  std::string end;  // the final top record: where both sections end
  coding::PutFixed<uint64_t>(&end, index_size_);
  coding::PutFixed<uint64_t>(&end, blocks_size_);
  STOKER_RETURN_IF_ERROR(top_->Append(end));
  STOKER_RETURN_IF_ERROR(index_->Seal());
  return top_->Seal();
}

Status KeyedTableWriter::WriteIndex(SegmentFileWriter& out, uint32_t index_kind,
                                    uint32_t top_kind) {
  if (!top_) return Status::Internal("KeyedTableWriter::WriteIndex before Finish");
  STOKER_RETURN_IF_ERROR(out.Section(index_kind, *index_));
  return out.Section(top_kind, *top_);
}
// NOLINTEND(bugprone-unchecked-optional-access)

KeyedTableWriter KeyedTableWriter::Into(SegmentFileWriter& out, uint32_t blocks_kind) {
  out.Begin(blocks_kind);
  return KeyedTableWriter([&out](std::string_view b) { return out.Append(b); });
}

Status KeyedTableWriter::FinishInto(SegmentFileWriter& out, uint32_t index_kind,
                                    uint32_t top_kind) {
  STOKER_RETURN_IF_ERROR(Finish());
  out.End();
  return WriteIndex(out, index_kind, top_kind);
}

// ---- ChunkTableWriter

Status ChunkTableWriter::Add(const ChunkInfo& chunk, uint64_t first_location, uint32_t samples) {
  if (count_ == 0) out_.Begin(kSegChunks);
  coding::PutFixed<uint64_t>(&group_, chunk.id);
  coding::PutFixed<uint64_t>(&group_, chunk.file_size);
  coding::PutFixed<uint32_t>(&group_, chunk.data_crc32c);
  coding::PutFixed<uint32_t>(&group_, ChunkRecordCount(chunk));
  coding::PutFixed<uint64_t>(&group_, first_location);
  coding::PutFixed<uint32_t>(&group_, samples);
  coding::PutFixed<uint32_t>(&group_, 0);
  return ++count_ % kBlockEntries == 0 ? EndGroup() : Status::OK();
}

Status ChunkTableWriter::EndGroup() {
  if (group_.empty()) return Status::OK();
  coding::PutFixed<uint32_t>(&group_, crc32c::Value(group_));
  const Status s = out_.AppendGroup(group_);
  group_.clear();
  return s;
}

Status ChunkTableWriter::Finish() {
  if (count_ == 0) out_.Begin(kSegChunks);
  STOKER_RETURN_IF_ERROR(EndGroup());
  out_.End();
  return Status::OK();
}

// ---- LocationsWriter

Status LocationsWriter::Add(const SegmentLocation& l) {
  if (count_ == 0) out_.Begin(kSegLocations);
  if (count_ % kBlockEntries == 0) {
    STOKER_RETURN_IF_ERROR(IndexEntry());
    coding::PutFixed<uint64_t>(&block_, l.offset);
    varint::Put(&block_, l.chunk);
  }
  varint::Put(&block_, l.position);
  varint::Put(&block_, l.length);
  coding::PutFixed<uint32_t>(&block_, l.crc32c);
  varint::Put(&block_, static_cast<uint64_t>(int64_t{l.label} + 1));
  if (grouped_) {
    varint::Put(&block_, l.sample);
    varint::Put(&block_, l.sample_files);
  }
  ++count_;
  if (count_ % kBlockEntries == 0 || count_ == files_) {
    coding::PutFixed<uint32_t>(&block_, crc32c::Value(block_));
    size_ += block_.size();
    STOKER_RETURN_IF_ERROR(out_.Append(block_));
    block_.clear();
  }
  return Status::OK();
}

// index_ exists from the first IndexEntry on (Finish runs one): the check cannot see that.
// NOLINTBEGIN(bugprone-unchecked-optional-access)
Status LocationsWriter::Finish() {
  if (count_ != files_) return Status::Internal("locations written do not match the files");
  if (count_ == 0) out_.Begin(kSegLocations);
  out_.End();
  STOKER_RETURN_IF_ERROR(IndexEntry());  // the end of the last block
  // A group that holds only the end (carried over from a full group) adds nothing.
  if (group_entries_ > 1) {
    coding::PutFixed<uint32_t>(&group_, crc32c::Value(group_));
    STOKER_RETURN_IF_ERROR(index_->Append(group_));
  }
  STOKER_RETURN_IF_ERROR(index_->Seal());
  return out_.Section(kSegLocationIndex, *index_);
}
// NOLINTEND(bugprone-unchecked-optional-access)

Status LocationsWriter::IndexEntry() {
  if (!index_) {
    STOKER_ASSIGN_OR_RETURN(index_, Spool::Create(temp_dir_));
  }
  coding::PutFixed<uint64_t>(&group_, size_);
  if (++group_entries_ == kBlockEntries + 1) {
    // A full group: its last entry (where the next block starts) also opens the next group.
    coding::PutFixed<uint32_t>(&group_, crc32c::Value(group_));
    STOKER_RETURN_IF_ERROR(index_->Append(group_));
    group_.clear();
    coding::PutFixed<uint64_t>(&group_, size_);
    group_entries_ = 1;
  }
  return Status::OK();
}

// ---- KeyRanksWriter

Status KeyRanksWriter::Add(uint64_t rank) {
  if (count_ == 0) out_.Begin(kSegKeyRanks);
  if (KeyRankWidth(files_) == 4) {
    coding::PutFixed<uint32_t>(&block_, static_cast<uint32_t>(rank));
  } else {
    coding::PutFixed<uint64_t>(&block_, rank);
  }
  ++count_;
  if (count_ % kBlockEntries == 0 || count_ == files_) {
    coding::PutFixed<uint32_t>(&block_, crc32c::Value(block_));
    STOKER_RETURN_IF_ERROR(out_.Append(block_));
    block_.clear();
  }
  return Status::OK();
}

Status KeyRanksWriter::Finish() {
  if (count_ != files_) return Status::Internal("key ranks written do not match the files");
  if (count_ == 0) out_.Begin(kSegKeyRanks);
  out_.End();
  return Status::OK();
}

// ---- Directories

void AddToDirTable(DirTable& dirs, std::string_view path, uint64_t rank) {
  std::string_view dir = DirOf(path);
  auto [it, added] = dirs.try_emplace(std::string(dir));
  if (it->second.count++ == 0) it->second.first = rank;
  while (added && !dir.empty()) {
    dir = DirOf(dir);
    added = dirs.try_emplace(std::string(dir)).second;
  }
}

Status WriteDirTable(SegmentFileWriter& out, const DirTable& dirs) {
  if (dirs.empty() || !dirs.begin()->first.empty()) {
    return Status::Internal("a directory table without the root");
  }
  KeyedTableWriter table = KeyedTableWriter::Into(out, kSegDirs);
  std::string value;
  for (const auto& [path, files] : dirs) {
    value.clear();
    varint::Put(&value, files.first);
    varint::Put(&value, files.count);
    STOKER_RETURN_IF_ERROR(table.Add(path, value));
  }
  return table.FinishInto(out, kSegDirIndex, kSegDirKeys);
}

void PutBigEndian64(std::string* out, uint64_t v) {
  for (int b = 0; b < 8; ++b) out->push_back(static_cast<char>(v >> (56 - 8 * b)));
}

uint64_t GetBigEndian64(std::string_view in) {
  uint64_t v = 0;
  for (int b = 0; b < 8; ++b) v = (v << 8) | static_cast<uint8_t>(in[b]);
  return v;
}

}  // namespace stoker::format
