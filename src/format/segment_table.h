// A keyed block table of a segment (docs/format.md §3.3, §3.6): files, directories or
// attributes as sorted, prefix-compressed keys in CRC-checked blocks. Format 2 holds every
// block's offset and first key in memory from open; format 3 holds only the top index (one
// record per 65,536 entries) and reads an index block (one entry per data block) when a lookup
// needs it. Internal to segment.cc.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "format/parsed_cache.h"
#include "format/segment.h"

namespace stoker::format {

struct Segment::Table {
  struct Entry {
    std::string key;
    std::string value;
  };
  // Where a data block lies in the blocks section, and its first key.
  struct BlockRef {
    uint64_t offset = 0, size = 0;
    std::string first_key;
  };

  Table(const Segment* segment, uint32_t blocks_kind, uint32_t index_kind, uint64_t entries);

  // Format 2: the index records and the first keys, whole.
  Status LoadFlat(const std::string& index, const std::string& keys, uint32_t keys_kind);
  // Format 3: the top index, whole.
  Status LoadTop(const std::string& top, uint32_t top_kind);

  uint64_t block_count() const { return blocks_; }
  // The table's smallest key (entries > 0).
  const std::string& first_key() const;

  Result<BlockRef> Ref(uint64_t b) const;
  // `keep`: into the segment's block cache (lookups); whole-table scans pass false.
  Result<std::vector<Entry>> Block(uint64_t b, bool keep = true) const;
  // Entry i of block b, decoding only the entries up to it, with the order checks of Block().
  Result<Entry> EntryAt(uint64_t b, uint64_t i) const;
  // The block that would hold `key`: the last whose first key is <= key.
  Result<std::optional<uint64_t>> BlockFor(std::string_view key) const;
  // (rank, entry) of `key`; nullopt if absent.
  Result<std::optional<std::pair<uint64_t, Entry>>> Find(std::string_view key) const;
  // Calls fn for each entry from the first key >= `from` while it returns true.
  Status Scan(std::string_view from, const std::function<bool(const Entry&)>& fn,
              bool keep = true) const;
  // Reads and checks every index block and data block (`stoker verify`).
  Status CheckEveryBlock() const;

 private:
  using Refs = std::vector<BlockRef>;
  // Format 3: index block j's records of data blocks [jB, ...).
  Result<std::shared_ptr<const Refs>> IndexBlock(uint64_t j) const;
  // The first key of data block b + 1, if there is one: a block's keys must stay below it.
  Result<std::optional<std::string>> NextFirstKey(uint64_t b) const;
  Status Malformed(uint64_t b) const;

  const Segment* segment_;
  const uint32_t blocks_kind_, index_kind_;
  const uint64_t entries_, blocks_;
  bool two_level_ = false;
  Refs flat_;  // format 2: every block
  struct Top {
    uint64_t index_offset = 0, data_offset = 0;
    std::string first_key;
  };
  std::vector<Top> top_;  // format 3: one per index block, then the ends (no key)
  mutable ParsedCache<Refs> index_blocks_{1024};
};

}  // namespace stoker::format
