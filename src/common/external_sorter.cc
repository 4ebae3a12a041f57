#include "common/external_sorter.h"

#include <algorithm>
#include <queue>

#include "common/varint.h"

namespace stoker {

ExternalSorter::ExternalSorter(SortOptions options, Less less)
    : options_(std::move(options)), less_(std::move(less)) {}

Status ExternalSorter::Add(std::string_view record) {
  if (merged_) return Status::Internal("ExternalSorter::Add after Merge");
  if (record.size() > UINT32_MAX) return Status::InvalidArgument("a sort record over 4 GiB");
  items_.emplace_back(arena_.size(), static_cast<uint32_t>(record.size()));
  arena_.append(record);
  ++records_;
  const uint64_t held = arena_.size() + items_.size() * sizeof(items_[0]);
  return held >= options_.memory_bytes ? Spill() : Status::OK();
}

std::vector<std::pair<uint64_t, uint32_t>> ExternalSorter::SortedBuffer() const {
  auto items = items_;
  const auto view = [this](const std::pair<uint64_t, uint32_t>& item) {
    return std::string_view(arena_).substr(item.first, item.second);
  };
  std::sort(items.begin(), items.end(),
            [&](const auto& a, const auto& b) { return less_(view(a), view(b)); });
  return items;
}

Status ExternalSorter::Spill() {
  if (items_.empty()) return Status::OK();
  STOKER_ASSIGN_OR_RETURN(Spool run, Spool::Create(options_.temp_dir));
  std::string framed;
  for (const auto& [offset, size] : SortedBuffer()) {
    framed.clear();
    varint::Put(&framed, size);
    framed.append(arena_, offset, size);
    STOKER_RETURN_IF_ERROR(run.Append(framed));
  }
  STOKER_RETURN_IF_ERROR(run.Flush());
  runs_.push_back(std::move(run));
  arena_.clear();
  arena_.shrink_to_fit();  // the budget bounds what is held, not what was once reserved
  items_.clear();
  items_.shrink_to_fit();
  return Status::OK();
}

Status ExternalSorter::Merge(const std::function<Status(std::string_view)>& fn) {
  if (merged_) return Status::Internal("ExternalSorter::Merge twice");
  merged_ = true;
  if (runs_.empty()) {
    // Everything fit in memory: no file touched.
    for (const auto& [offset, size] : SortedBuffer()) {
      STOKER_RETURN_IF_ERROR(fn(std::string_view(arena_).substr(offset, size)));
    }
    return Status::OK();
  }
  STOKER_RETURN_IF_ERROR(Spill());
  const uint64_t buffer = std::max<uint64_t>(64 << 10, options_.memory_bytes / runs_.size());
  struct Head {
    Spool::Reader reader;
    std::string record;
  };
  std::vector<Head> heads;
  heads.reserve(runs_.size());
  for (const Spool& run : runs_) heads.push_back({Spool::Reader(run, buffer), {}});
  // Reads the next record of run i into heads[i].record; false at its end.
  const auto next = [&](size_t i) -> Result<bool> {
    Spool::Reader& r = heads[i].reader;
    if (r.at_end()) return false;
    STOKER_ASSIGN_OR_RETURN(std::string_view head, r.Peek(varint::kMaxBytes));
    std::string_view rest = head;
    const auto size = varint::Get(&rest);
    if (!size) return Err(Status::Internal("a sort run is damaged"));
    r.Skip(head.size() - rest.size());
    STOKER_ASSIGN_OR_RETURN(std::string_view bytes, r.Peek(*size));
    if (bytes.size() != *size) return Err(Status::Internal("a sort run ended early"));
    heads[i].record.assign(bytes);
    r.Skip(*size);
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
  runs_.clear();
  return Status::OK();
}

}  // namespace stoker
