#include "format/segment_table.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/byte_cursor.h"
#include "common/coding.h"
#include "format/segment_layout.h"

namespace stoker::format {
namespace {

uint64_t BlocksFor(uint64_t entries) { return (entries + kBlockEntries - 1) / kBlockEntries; }

// The `count` entries of a keyed block (§3.3), keys strictly increasing from `first_key`;
// nullopt if the bytes say anything else.
std::optional<std::vector<Segment::Table::Entry>> DecodeBlock(std::string_view bytes,
                                                              uint64_t count,
                                                              std::string_view first_key) {
  std::vector<Segment::Table::Entry> out(count);
  ByteCursor c{bytes};
  for (uint64_t i = 0; i < count && c.ok; ++i) {
    const uint64_t shared = c.Varint(), unshared = c.Varint();
    const std::string_view suffix = c.Bytes(unshared);
    const uint64_t value_size = c.Varint();
    const std::string_view value = c.Bytes(value_size);
    if (!c.ok || (i == 0 ? shared != 0 : shared > out[i - 1].key.size()) ||
        shared + suffix.size() > kMaxKeyBytes) {
      return std::nullopt;
    }
    if (i > 0) out[i].key.assign(out[i - 1].key, 0, shared);
    out[i].key.append(suffix);
    out[i].value.assign(value);
    if (i == 0 ? out[0].key != first_key : out[i].key <= out[i - 1].key) return std::nullopt;
  }
  if (!c.ok || !c.in.empty() || count == 0) return std::nullopt;
  return out;
}

}  // namespace

Segment::Table::Table(const Segment* segment, uint32_t blocks_kind, uint32_t index_kind,
                      uint64_t entries)
    : segment_(segment),
      blocks_kind_(blocks_kind),
      index_kind_(index_kind),
      entries_(entries),
      blocks_(BlocksFor(entries)) {}

Status Segment::Table::LoadFlat(const std::string& index, const std::string& keys,
                                uint32_t keys_kind) {
  if (index.size() != kIndexRecordSize * (blocks_ + 1)) {
    return segment_->Corrupt(
        fmt::format("section {} has {} bytes for {} blocks", index_kind_, index.size(), blocks_));
  }
  const uint64_t blocks_size = segment_->sections_[blocks_kind_].size;
  uint64_t key_end = 0, previous = 0;
  for (uint64_t b = 0; b <= blocks_; ++b) {
    const char* r = index.data() + kIndexRecordSize * b;
    const auto offset = coding::DecodeFixed<uint64_t>(r);
    const auto key_offset = coding::DecodeFixed<uint32_t>(r + 8);
    const auto key_size = coding::DecodeFixed<uint32_t>(r + 12);
    const bool last = b == blocks_;
    if ((b == 0 ? offset != 0 : offset <= previous) || offset > blocks_size ||
        (last && offset != blocks_size) || key_offset != key_end ||
        uint64_t{key_offset} + key_size > keys.size() || (last && key_size != 0)) {
      return segment_->Corrupt(fmt::format("index section {}: bad record {}", index_kind_, b));
    }
    if (b > 0) flat_.back().size = offset - previous;
    previous = offset;
    key_end = key_offset + key_size;
    if (!last) {
      flat_.push_back({offset, 0, keys.substr(key_offset, key_size)});
      if (b > 0 && flat_[b].first_key <= flat_[b - 1].first_key) {
        return segment_->Corrupt(fmt::format("index section {}: keys out of order", index_kind_));
      }
    }
  }
  if (key_end != keys.size()) {
    return segment_->Corrupt(fmt::format("section {}: stray bytes", keys_kind));
  }
  return Status::OK();
}

Status Segment::Table::LoadTop(const std::string& top, uint32_t top_kind) {
  two_level_ = true;
  const uint64_t index_blocks = BlocksFor(blocks_);
  Status bad = segment_->Corrupt(fmt::format("top index section {} is malformed", top_kind));
  ByteCursor c{top};
  for (uint64_t j = 0; j <= index_blocks && c.ok; ++j) {
    Top t;
    t.index_offset = c.Fixed<uint64_t>();
    t.data_offset = c.Fixed<uint64_t>();
    if (j < index_blocks) t.first_key.assign(c.Bytes(c.Fixed<uint32_t>()));
    if (!c.ok) return bad;
    if (j == 0 ? t.index_offset != 0 || t.data_offset != 0
               : t.index_offset <= top_.back().index_offset ||
                     t.data_offset <= top_.back().data_offset ||
                     (j < index_blocks && t.first_key <= top_.back().first_key)) {
      return bad;
    }
    top_.push_back(std::move(t));
  }
  if (!c.ok || !c.in.empty() || top_.back().index_offset != segment_->sections_[index_kind_].size ||
      top_.back().data_offset != segment_->sections_[blocks_kind_].size) {
    return bad;
  }
  return Status::OK();
}

const std::string& Segment::Table::first_key() const {
  return two_level_ ? top_.front().first_key : flat_.front().first_key;
}

Status Segment::Table::Malformed(uint64_t b) const {
  return segment_->Corrupt(fmt::format("block {} of section {} is malformed", b, blocks_kind_));
}

Result<std::shared_ptr<const Segment::Table::Refs>> Segment::Table::IndexBlock(uint64_t j) const {
  return index_blocks_.Get(j, [&]() -> Result<Refs> {
    const Top &at = top_[j], &next = top_[j + 1];
    // Not into the block cache: the parsed index block is cached (index_blocks_).
    STOKER_ASSIGN_OR_RETURN(
        std::string bytes,
        segment_->ReadBlockBytes(index_kind_, at.index_offset, next.index_offset - at.index_offset,
                                 /*keep=*/false));
    const uint64_t count = std::min(kBlockEntries, blocks_ - j * kBlockEntries);
    auto entries = DecodeBlock(bytes, count, at.first_key);
    const Status bad =
        segment_->Corrupt(fmt::format("block {} of index section {} is malformed", j, index_kind_));
    if (!entries) return Err(bad);
    // Each entry's value is its data block's size; the blocks tile the data between this
    // index block's first data block and the next one's.
    Refs refs(count);
    uint64_t offset = at.data_offset;
    for (uint64_t i = 0; i < count; ++i) {
      std::string_view value = (*entries)[i].value;
      const auto size = varint::Get(&value);
      if (!size || !value.empty() || *size < 4 || *size > next.data_offset - offset) {
        return Err(bad);
      }
      refs[i] = {offset, *size, std::move((*entries)[i].key)};
      offset += *size;
    }
    if (offset != next.data_offset ||
        (j + 2 < top_.size() && refs.back().first_key >= next.first_key)) {
      return Err(bad);
    }
    return refs;
  });
}

Result<Segment::Table::BlockRef> Segment::Table::Ref(uint64_t b) const {
  if (!two_level_) return flat_[b];
  STOKER_ASSIGN_OR_RETURN(auto refs, IndexBlock(b / kBlockEntries));
  return (*refs)[b % kBlockEntries];
}

Result<std::optional<std::string>> Segment::Table::NextFirstKey(uint64_t b) const {
  if (b + 1 >= blocks_) return std::optional<std::string>();
  // In format 3 the first key of the block that starts an index block is in the top index.
  if (two_level_ && (b + 1) % kBlockEntries == 0) {
    return std::optional<std::string>(top_[(b + 1) / kBlockEntries].first_key);
  }
  STOKER_ASSIGN_OR_RETURN(BlockRef next, Ref(b + 1));
  return std::optional<std::string>(std::move(next.first_key));
}

Result<std::vector<Segment::Table::Entry>> Segment::Table::Block(uint64_t b, bool keep) const {
  STOKER_ASSIGN_OR_RETURN(const BlockRef ref, Ref(b));
  STOKER_ASSIGN_OR_RETURN(std::string bytes,
                          segment_->ReadBlockBytes(blocks_kind_, ref.offset, ref.size, keep));
  const uint64_t count = std::min(kBlockEntries, entries_ - b * kBlockEntries);
  auto out = DecodeBlock(bytes, count, ref.first_key);
  if (!out) return Err(Malformed(b));
  STOKER_ASSIGN_OR_RETURN(const auto next, NextFirstKey(b));
  if (next && out->back().key >= *next) {
    return Err(segment_->Corrupt(
        fmt::format("block {} of section {} overlaps the next", b, blocks_kind_)));
  }
  return std::move(*out);
}

Result<Segment::Table::Entry> Segment::Table::EntryAt(uint64_t b, uint64_t i) const {
  STOKER_ASSIGN_OR_RETURN(const BlockRef ref, Ref(b));
  STOKER_ASSIGN_OR_RETURN(std::string bytes,
                          segment_->ReadBlockBytes(blocks_kind_, ref.offset, ref.size));
  ByteCursor c{bytes};
  Entry e;
  for (uint64_t k = 0; k <= i && c.ok; ++k) {
    const uint64_t shared = c.Varint(), unshared = c.Varint();
    const std::string_view suffix = c.Bytes(unshared);
    const uint64_t value_size = c.Varint();
    const std::string_view value = c.Bytes(value_size);
    // Keys must rise here as in Block(): the new key shares `shared` bytes with the one before,
    // so it is the greater iff its suffix is above the rest of that one.
    if (!c.ok ||
        (k == 0 ? shared != 0
                : shared > e.key.size() || suffix <= std::string_view(e.key).substr(shared))) {
      c.ok = false;
      break;
    }
    e.key.resize(shared);
    e.key.append(suffix);
    if (k == i) e.value.assign(value);
  }
  if (!c.ok || (i == 0 && e.key != ref.first_key)) return Err(Malformed(b));
  // And stay below the next block's first key: otherwise a lookup by this key (Find) would land
  // in another block and another entry than the one read here.
  STOKER_ASSIGN_OR_RETURN(const auto next, NextFirstKey(b));
  if (next && e.key >= *next) {
    return Err(segment_->Corrupt(
        fmt::format("block {} of section {} overlaps the next", b, blocks_kind_)));
  }
  return e;
}

Result<std::optional<uint64_t>> Segment::Table::BlockFor(std::string_view key) const {
  const auto last_at_or_before = [&](const auto& items,
                                     const auto& key_of) -> std::optional<uint64_t> {
    auto it = std::upper_bound(items.begin(), items.end(), key,
                               [&](std::string_view k, const auto& x) { return k < key_of(x); });
    if (it == items.begin()) return std::nullopt;
    return static_cast<uint64_t>(it - items.begin() - 1);
  };
  if (!two_level_) {
    return last_at_or_before(flat_,
                             [](const BlockRef& r) -> const std::string& { return r.first_key; });
  }
  if (blocks_ == 0) return std::optional<uint64_t>();
  // The top's last record holds no key: search the index blocks' records only.
  const std::span<const Top> tops(top_.data(), top_.size() - 1);
  const auto j =
      last_at_or_before(tops, [](const Top& t) -> const std::string& { return t.first_key; });
  if (!j) return std::optional<uint64_t>();
  STOKER_ASSIGN_OR_RETURN(auto refs, IndexBlock(*j));
  const auto i =
      last_at_or_before(*refs, [](const BlockRef& r) -> const std::string& { return r.first_key; });
  return std::optional<uint64_t>(*j * kBlockEntries + i.value_or(0));
}

Result<std::optional<std::pair<uint64_t, Segment::Table::Entry>>> Segment::Table::Find(
    std::string_view key) const {
  using Found = std::optional<std::pair<uint64_t, Entry>>;
  STOKER_ASSIGN_OR_RETURN(const auto b, BlockFor(key));
  if (!b) return Found();
  STOKER_ASSIGN_OR_RETURN(auto block, Block(*b));
  auto it = std::lower_bound(block.begin(), block.end(), key,
                             [](const Entry& e, std::string_view k) { return e.key < k; });
  if (it == block.end() || it->key != key) return Found();
  const uint64_t at = *b * kBlockEntries + static_cast<uint64_t>(it - block.begin());
  return Found(std::pair(at, std::move(*it)));
}

Status Segment::Table::Scan(std::string_view from, const std::function<bool(const Entry&)>& fn,
                            bool keep) const {
  STOKER_ASSIGN_OR_RETURN(const auto start, BlockFor(from));
  for (uint64_t b = start.value_or(0); b < blocks_; ++b) {
    STOKER_ASSIGN_OR_RETURN(auto block, Block(b, keep));
    for (const Entry& e : block) {
      if (e.key < from) continue;
      if (!fn(e)) return Status::OK();
    }
  }
  return Status::OK();
}

Status Segment::Table::CheckEveryBlock() const {
  for (uint64_t b = 0; b < blocks_; ++b) {
    if (auto block = Block(b, false); !block) return block.error();
  }
  return Status::OK();
}

}  // namespace stoker::format
