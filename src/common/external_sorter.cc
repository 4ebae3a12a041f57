#include "common/external_sorter.h"

#include <algorithm>
#include <queue>
#include <span>

namespace stoker {

ExternalSorter::ExternalSorter(SortOptions options, Less less)
    : options_(std::move(options)), less_(std::move(less)) {}

Status ExternalSorter::Add(std::string_view record) {
  if (merged_) return Status::Internal("ExternalSorter::Add after Merge");
  if (record.size() > UINT32_MAX) return Status::InvalidArgument("a sort record over 4 GiB");
  if (!reserved_) {
    reserved_ = true;
    // The whole budget at once, split between record bytes and their (offset, size) items:
    // memory never grows past it by a container's doubling, and reserved pages that are
    // never written cost nothing, so a small sort stays small.
    arena_.reserve(options_.memory_bytes / 4 * 3);
    items_.reserve(std::max<uint64_t>(16, options_.memory_bytes / 4 / sizeof(items_[0])));
  }
  if (arena_.size() + record.size() > arena_.capacity() || items_.size() == items_.capacity()) {
    STOKER_RETURN_IF_ERROR(Spill());
  }
  items_.emplace_back(arena_.size(), static_cast<uint32_t>(record.size()));
  arena_.append(record);  // a record larger than the arena gets an arena of its own size
  ++records_;
  return Status::OK();
}

void ExternalSorter::Release() {
  reserved_ = false;
  arena_.clear();
  arena_.shrink_to_fit();
  items_.clear();
  items_.shrink_to_fit();
}

void ExternalSorter::SortBuffer() {
  const auto view = [this](const std::pair<uint64_t, uint32_t>& item) {
    return std::string_view(arena_).substr(item.first, item.second);
  };
  std::sort(items_.begin(), items_.end(),
            [&](const auto& x, const auto& y) { return less_(view(x), view(y)); });
}

Status ExternalSorter::Spill() {
  if (items_.empty()) return Status::OK();
  STOKER_ASSIGN_OR_RETURN(Spool run, Spool::Create(options_.temp_dir));
  SortBuffer();
  for (const auto& [offset, size] : items_) {
    STOKER_RETURN_IF_ERROR(run.AppendRecord(std::string_view(arena_).substr(offset, size)));
  }
  STOKER_RETURN_IF_ERROR(run.Seal());
  runs_.push_back(std::move(run));
  arena_.clear();  // capacity kept: the next run fills the same memory
  items_.clear();
  return Status::OK();
}

Status ExternalSorter::Merge(const std::function<Status(std::string_view)>& fn) {
  if (merged_) return Status::Internal("ExternalSorter::Merge twice");
  merged_ = true;
  if (runs_.empty()) {
    // Everything fit in memory: no file touched.
    SortBuffer();
    for (const auto& [offset, size] : items_) {
      STOKER_RETURN_IF_ERROR(fn(std::string_view(arena_).substr(offset, size)));
    }
    Release();
    return Status::OK();
  }
  STOKER_RETURN_IF_ERROR(Spill());
  Release();  // the merge's read buffers take the budget now
  // Too many runs for a read buffer of kMinMergeBuffer each within the budget: merge groups of
  // them into longer runs first, as often as needed, so memory stays the budget at any size.
  const size_t fan_in = std::max<size_t>(2, options_.memory_bytes / kMinMergeBuffer);
  while (runs_.size() > fan_in) {
    std::vector<Spool> longer;
    for (size_t first = 0; first < runs_.size(); first += fan_in) {
      const size_t end = std::min(runs_.size(), first + fan_in);
      if (end - first == 1) {
        longer.push_back(std::move(runs_[first]));
        continue;
      }
      STOKER_ASSIGN_OR_RETURN(Spool run, Spool::Create(options_.temp_dir));
      STOKER_RETURN_IF_ERROR(MergeRuns(std::span<Spool>(runs_.data() + first, end - first),
                                       [&run](std::string_view r) { return run.AppendRecord(r); }));
      STOKER_RETURN_IF_ERROR(run.Seal());
      longer.push_back(std::move(run));
    }
    runs_ = std::move(longer);
  }
  STOKER_RETURN_IF_ERROR(MergeRuns(runs_, fn));
  runs_.clear();
  return Status::OK();
}

Status ExternalSorter::MergeRuns(std::span<Spool> runs,
                                 const std::function<Status(std::string_view)>& fn) const {
  // Read buffers share the budget; past 1 MiB a bigger one saves nothing.
  const uint64_t buffer =
      std::clamp<uint64_t>(options_.memory_bytes / runs.size(), kMinMergeBuffer, 1 << 20);
  // Each run's reader and its current record (a view into that reader's buffer, valid until
  // the reader moves on).
  struct Head {
    Spool::Reader reader;
    std::string_view record;
  };
  std::vector<Head> heads;
  heads.reserve(runs.size());
  for (const Spool& run : runs) heads.push_back({Spool::Reader(run, buffer), {}});
  // Reads the next record of run i into heads[i].record; false at its end.
  const auto next = [&](size_t i) -> Result<bool> {
    STOKER_ASSIGN_OR_RETURN(auto record, heads[i].reader.NextRecord());
    if (!record) return false;
    heads[i].record = *record;
    return true;
  };
  const auto later = [&](size_t a, size_t b) { return less_(heads[b].record, heads[a].record); };
  std::priority_queue<size_t, std::vector<size_t>, decltype(later)> queue(later);
  for (size_t i = 0; i < heads.size(); ++i) {
    STOKER_ASSIGN_OR_RETURN(const bool has, next(i));
    if (has) queue.push(i);
  }
  while (!queue.empty()) {
    const size_t i = queue.top();
    queue.pop();
    STOKER_RETURN_IF_ERROR(fn(heads[i].record));
    STOKER_ASSIGN_OR_RETURN(const bool has, next(i));
    if (has) queue.push(i);
  }
  return Status::OK();
}

}  // namespace stoker
