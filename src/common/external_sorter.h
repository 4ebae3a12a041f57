// Sorts records (byte strings) in bounded memory: records collect in memory up to a budget,
// are then sorted and written to a spool as one sorted run, and Merge() merges the runs. This
// is what lets `stoker pack` sort the metadata of any number of files in the same memory.
// Thread-safety: none; one owner.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/spool.h"
#include "stoker/status.h"

namespace stoker {

struct SortOptions {
  std::string temp_dir = DefaultSpoolDir();
  // Memory for the records of one run (3/4 their bytes, 1/4 an index of 16 bytes per record),
  // spilled to a spool when full; the merge then reads each run through a buffer of
  // budget / runs (64 KiB to 1 MiB). More runs than budget / 64 KiB (1024 with the default,
  // ~50 GB of records) are first merged in groups into longer runs, so the merge's buffers stay
  // within the budget at any size. A pack's metadata sort has two sorters alive at once.
  uint64_t memory_bytes = 64ull << 20;
};

class ExternalSorter {
 public:
  // `less` orders records; equal records come out adjacent, in no particular order.
  using Less = std::function<bool(std::string_view, std::string_view)>;
  ExternalSorter(SortOptions options, Less less);

  Status Add(std::string_view record);
  // Calls `fn` with every record in order; once. A record's view is valid during the call.
  Status Merge(const std::function<Status(std::string_view)>& fn);

  uint64_t records() const { return records_; }
  size_t runs() const { return runs_.size(); }  // spilled so far

 private:
  static constexpr uint64_t kMinMergeBuffer = 64 << 10;
  Status Spill();
  // Merges `runs` (at most budget / kMinMergeBuffer) into `fn`, in order.
  Status MergeRuns(std::span<Spool> runs, const std::function<Status(std::string_view)>& fn) const;
  void Release();     // gives the in-memory run's memory back
  void SortBuffer();  // orders items_ by their records

  SortOptions options_;
  Less less_;
  std::string arena_;                                 // records in memory, back to back
  std::vector<std::pair<uint64_t, uint32_t>> items_;  // offset and size in arena_
  std::vector<Spool> runs_;                           // each: varint size + record, sorted
  uint64_t records_ = 0;
  bool reserved_ = false;  // the budget is reserved (not the same as a non-zero capacity)
  bool merged_ = false;
};

}  // namespace stoker
