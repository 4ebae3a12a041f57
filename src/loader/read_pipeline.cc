#include "loader/read_pipeline.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "common/crc32c.h"
#include "common/trace.h"
#include "dataset/version_view.h"
#include "format/chunk.h"
#include "loader/rank_metadata.h"
#include "loader/sampler.h"

namespace stoker::loader {
namespace {

// One file of one plan position, as it lies in a chunk.
struct Extent {
  uint64_t position;
  uint32_t slot_file;  // index within the sample's files
  uint32_t file;
  uint32_t chunk;
  uint64_t offset;
  uint64_t length;
  uint32_t crc32c;
};

struct Range {
  uint32_t chunk;
  uint64_t offset = 0, length = 0;
  std::vector<Extent> extents;
};

// The plan position of the first sample a range serves.
uint64_t FirstPosition(const Range& r) {
  uint64_t first = ~uint64_t{0};
  for (const Extent& e : r.extents) first = std::min<uint64_t>(first, e.position);
  return first;
}

// Sorts a segment's extents by place and merges neighbours into ranges. Reading through holes
// costs budget like payload, so at most `hole_allowance` hole bytes are read in all: otherwise a
// sparse segment (full mode) could need more than the whole budget at once, and the scheduler
// would wait for memory that only delivering this very segment can free.
std::vector<Range> Coalesce(std::vector<Extent> extents, const ReadPipelineOptions& o,
                            uint64_t hole_allowance) {
  std::sort(extents.begin(), extents.end(), [](const Extent& a, const Extent& b) {
    return std::tie(a.chunk, a.offset) < std::tie(b.chunk, b.offset);
  });
  std::vector<Range> ranges;
  for (const Extent& e : extents) {
    if (!ranges.empty()) {
      Range& r = ranges.back();
      const uint64_t end = r.offset + r.length;
      const uint64_t new_end = std::max(end, e.offset + e.length);
      const uint64_t hole = e.offset > end ? e.offset - end : 0;
      if (r.chunk == e.chunk && hole <= o.max_gap_bytes && hole <= hole_allowance &&
          new_end - r.offset <= o.max_range_bytes) {
        hole_allowance -= hole;
        r.length = new_end - r.offset;
        r.extents.push_back(e);
        continue;
      }
    }
    ranges.push_back({e.chunk, e.offset, e.length, {e}});
  }
  return ranges;
}

// Consecutive plan positions [first, end) that the scheduler reads together, with their files.
struct PlanSegment {
  uint64_t first = 0, end = 0;
  std::vector<Extent> extents;
  uint64_t bytes = 0;  // the files' lengths, in all
  bool reads = false;  // some position of it is read (not all skipped: options.gated)
};

}  // namespace

struct ReadPipeline::State {
  std::shared_ptr<const Dataset> dataset;
  std::vector<uint32_t> plan;
  std::optional<PlanLocations> locations;  // set by Start
  ReadPipelineOptions options;
  std::unique_ptr<IoEngine> engine;

  std::mutex mu;
  std::condition_variable cv;
  struct Slot {
    SampleData data;
    uint32_t pending = 0;  // files not yet read
  };
  std::map<uint64_t, Slot> slots;  // scheduled and not yet delivered
  uint64_t next_to_deliver = 0;
  uint64_t bytes_held = 0;
  uint64_t ranges_in_flight = 0;
  // Positions below admitted_end are decided; skipped[p] (options.gated) marks those not read.
  // Bytes, not vector<bool>: the scheduler reads decided ones while Admit writes later ones.
  uint64_t admitted_end = 0;
  std::vector<uint8_t> skipped;
  bool scheduler_waiting_for_budget = false;
  uint64_t scheduler_waiting_bytes = 0;  // the length of the range it waits to admit
  bool stop = false;
  ReadPipelineStats stats;
  std::weak_ptr<State> self_weak;  // for range buffers, which may outlive the pipeline
  std::thread scheduler;

  void Schedule();
  // Waits until position `next` is decided (options.gated); the end of the decided positions,
  // or 0 if the pipeline is stopping.
  uint64_t WaitForAdmission(uint64_t next);
  // The segment that starts at plan position `first`, ending by `limit`: see Schedule.
  PlanSegment NextSegment(uint64_t first, uint64_t limit, uint64_t segment_bytes) const;
  // Whether position p is read (not skipped). Called for decided positions only.
  bool Reads(uint64_t p) const { return skipped.empty() || skipped[p] == 0; }
  // Moves next_to_deliver past decided positions that are skipped (with mu held).
  void SkipUnread() {
    while (next_to_deliver < admitted_end && !Reads(next_to_deliver)) ++next_to_deliver;
  }
  // A slot for each of the segment's samples; false if the pipeline is stopping.
  bool AddSlots(const PlanSegment& segment);
  // Waits until the budget admits `length` more bytes (or nothing is held) and counts them as
  // held; false if the pipeline is stopping.
  bool AdmitRange(uint64_t length);
  // Opens the range's chunk and submits its read; an unreadable range completes at once.
  void SubmitRange(Range range, const std::weak_ptr<State>& weak);
  // Takes the I/O path's reference to `buffer` and drops it before the range stops counting as
  // in flight, so Next() never sees a finished range whose bytes still look held.
  void Complete(const Range& range, std::shared_ptr<std::byte[]> buffer, const Status& status);
  // Marks the range's bytes as no longer held (runs when the last sample using them is gone).
  static void Release(const std::weak_ptr<State>& weak, uint64_t bytes);
};

void ReadPipeline::State::Release(const std::weak_ptr<State>& weak, uint64_t bytes) {
  if (auto self = weak.lock()) {
    {
      std::lock_guard lock(self->mu);
      self->bytes_held -= bytes;
    }
    self->cv.notify_all();
  }
}

void ReadPipeline::State::Schedule() {
  const uint64_t segment_bytes = options.segment_bytes
                                     ? std::min(options.segment_bytes, options.memory_budget_bytes)
                                     : std::max<uint64_t>(1, options.memory_budget_bytes / 2);
  uint64_t next = 0;
  std::weak_ptr<State> weak;
  {
    std::lock_guard lock(mu);
    weak = self_weak;
  }
  while (next < plan.size()) {
    const uint64_t limit = WaitForAdmission(next);
    if (limit == 0) return;
    PlanSegment segment = NextSegment(next, limit, segment_bytes);
    next = segment.end;
    if (!segment.reads) continue;  // skipped positions only
    if (!AddSlots(segment)) return;
    // The segment's reads (payload + holes) must fit in the budget together: see Coalesce.
    const uint64_t holes = options.memory_budget_bytes > segment.bytes
                               ? options.memory_budget_bytes - segment.bytes
                               : 0;
    // Ranges are formed in (chunk, offset) order, but submitted in the order the consumer needs
    // them (by their earliest sample): the first samples of a segment, of a pass, of an epoch
    // arrive after their own reads, not after the whole segment's.
    std::vector<Range> ranges = Coalesce(std::move(segment.extents), options, holes);
    std::stable_sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
      return FirstPosition(a) < FirstPosition(b);
    });
    for (Range& range : ranges) {
      if (!AdmitRange(range.length)) return;
      SubmitRange(std::move(range), weak);
    }
  }
}

uint64_t ReadPipeline::State::WaitForAdmission(uint64_t next) {
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return stop || admitted_end > next; });
  return stop ? 0 : admitted_end;
}

PlanSegment ReadPipeline::State::NextSegment(uint64_t first, uint64_t limit,
                                             uint64_t segment_bytes) const {
  // NOLINTNEXTLINE(bugprone-unchecked-optional-access): Start sets it before any thread runs
  const PlanLocations& snap = *locations;
  // One segment: consecutive plan positions worth up to segment_bytes (at least one sample).
  // All of a segment's reads must fit in the budget together (see Coalesce), so a sample that
  // would take the segment past segment_bytes starts the next one.
  PlanSegment segment;
  segment.first = first;
  uint64_t next = first;
  while (next < limit) {
    if (!Reads(next)) {
      ++next;
      continue;
    }
    const auto [file0, count] = snap.SampleFiles(plan[next]);
    uint64_t sample_bytes = 0;
    for (uint64_t k = 0; k < count; ++k) sample_bytes += snap.file(file0 + k).length;
    if (segment.reads && segment.bytes + sample_bytes > segment_bytes) break;
    segment.reads = true;
    for (uint32_t k = 0; k < count; ++k) {
      const dataset::FileLocation r = snap.file(file0 + k);
      // 32-bit file numbers: Start checked the dataset's counts (PrepareToLoad).
      segment.extents.push_back(
          {next, k, static_cast<uint32_t>(file0 + k), r.chunk, r.offset, r.length, r.crc32c});
      segment.bytes += r.length;
    }
    ++next;
  }
  segment.end = next;
  return segment;
}

bool ReadPipeline::State::AddSlots(const PlanSegment& segment) {
  // NOLINTNEXTLINE(bugprone-unchecked-optional-access): Start sets it before any thread runs
  const PlanLocations& snap = *locations;
  std::lock_guard lock(mu);
  if (stop) return false;
  for (uint64_t p = segment.first; p < segment.end; ++p) {
    if (!Reads(p)) continue;
    Slot& slot = slots[p];
    slot.data.position = p;
    slot.data.sample = plan[p];
    slot.data.label = snap.label(plan[p]);
    const auto [file0, count] = snap.SampleFiles(plan[p]);
    slot.pending = count;
    slot.data.files.resize(count);
  }
  return true;
}

bool ReadPipeline::State::AdmitRange(uint64_t length) {
  std::unique_lock lock(mu);
  scheduler_waiting_for_budget = true;
  scheduler_waiting_bytes = length;
  cv.notify_all();
  cv.wait(lock, [&] {
    return stop || bytes_held == 0 || bytes_held + length <= options.memory_budget_bytes;
  });
  scheduler_waiting_for_budget = false;
  if (stop) return false;
  bytes_held += length;
  stats.peak_bytes_held = std::max(stats.peak_bytes_held, bytes_held);
  ++ranges_in_flight;
  return true;
}

void ReadPipeline::State::SubmitRange(Range range, const std::weak_ptr<State>& weak) {
  const uint64_t length = range.length;
  // The chunk is opened (its real size checked against the metadata's) before the buffer
  // is allocated: a length the metadata alone states never sizes an allocation.
  auto file = dataset->ChunkFile(range.chunk);
  const bool readable = file && range.offset + length <= (*file)->Size();
  // The buffer gives its bytes back to the budget when the last sample using it is gone.
  std::shared_ptr<std::byte[]> buffer(readable ? new std::byte[length] : nullptr,
                                      [weak, length](std::byte* p) {
                                        delete[] p;
                                        Release(weak, length);
                                      });
  if (!readable) {
    Complete(
        range, std::move(buffer),
        file ? Status::Corruption(fmt::format("{}: bytes {}..{} are past its end ({})",
                                              dataset::ViewOf(*dataset).ChunkName(range.chunk),
                                              range.offset, range.offset + length, (*file)->Size()))
             : file.error());
    return;
  }
  auto shared_range = std::make_shared<Range>(std::move(range));
  const uint64_t trace_id = trace::Enabled() ? trace::NextId() : 0;
  if (trace_id != 0) trace::AsyncBegin("read", "read", trace_id, trace::NowNs());
  engine->Submit({std::move(*file), shared_range->offset,
                  std::span<std::byte>(buffer.get(), length),
                  [this, shared_range, buffer, trace_id](const Status& s) mutable {
                    if (trace_id != 0) trace::AsyncEnd("read", "read", trace_id, trace::NowNs());
                    Complete(*shared_range, std::move(buffer), s);
                  }});
}

void ReadPipeline::State::Complete(const Range& range, std::shared_ptr<std::byte[]> buffer,
                                   const Status& status) {
  const auto& snap = dataset::ViewOf(*dataset);
  trace::Span span("crc", "read");
  // Check CRCs outside the lock: this is the expensive part and runs on I/O threads.
  std::vector<Status> results(range.extents.size());
  for (size_t i = 0; i < range.extents.size(); ++i) {
    const Extent& e = range.extents[i];
    if (!status.ok()) {
      results[i] = status.WithContext(fmt::format("reading {}", dataset->FilePath(e.file)));
      continue;
    }
    results[i] = format::CheckPayload(
        e.crc32c, std::span<const std::byte>(buffer.get() + (e.offset - range.offset), e.length),
        [&] {
          return format::PayloadNames{dataset->FilePath(e.file),
                                      dataset->storage().Describe(snap.ChunkName(e.chunk))};
        });
  }
  {
    std::lock_guard lock(mu);
    ++stats.ranges;
    if (status.ok()) stats.bytes_read += range.length;
    for (size_t i = 0; i < range.extents.size(); ++i) {
      const Extent& e = range.extents[i];
      Slot& slot = slots[e.position];
      slot.data.files[e.slot_file] = {
          e.file, std::span<const std::byte>(buffer.get() + (e.offset - range.offset), e.length)};
      if (slot.data.keepalive.empty() || slot.data.keepalive.back().get() != buffer.get()) {
        slot.data.keepalive.push_back(std::shared_ptr<const void>(buffer, buffer.get()));
      }
      if (!results[i].ok() && slot.data.status.ok()) slot.data.status = std::move(results[i]);
      --slot.pending;
    }
  }
  buffer.reset();  // outside mu: if the samples are gone already, this releases the bytes
  {
    std::lock_guard lock(mu);
    --ranges_in_flight;
  }
  cv.notify_all();
}

Status ReadPipelineOptions::Validate() const {
  if (memory_budget_bytes == 0) return Status::InvalidArgument("memory budget must be positive");
  if (max_range_bytes == 0) return Status::InvalidArgument("max range size must be positive");
  if (io_depth == 0 || io_depth > 1024) return Status::InvalidArgument("io depth must be 1..1024");
  return Status::OK();
}

ReadPipeline::ReadPipeline(std::shared_ptr<State> state) : state_(std::move(state)) {}

namespace {

// Tells the storage which chunk files this plan reads, in first-use order, and until when each
// is in use, so that a cache behind it (the node daemon) can prefetch and evict by the future
// rather than the past.
void AdviseChunkOrder(const Dataset& dataset, const std::vector<uint32_t>& plan,
                      const PlanLocations& locations) {
  const dataset::VersionView& snap = dataset::ViewOf(dataset);
  std::vector<int64_t> entry_of(snap.chunk_count(), -1);
  std::vector<PlannedFile> order;
  for (uint32_t sample : plan) {
    const auto [file0, count] = locations.SampleFiles(sample);
    for (uint64_t k = 0; k < count; ++k) {
      const uint32_t chunk = locations.file(file0 + k).chunk;
      if (entry_of[chunk] < 0) {
        entry_of[chunk] = static_cast<int64_t>(order.size());
        auto ref = snap.chunk(chunk);
        if (!ref) return;  // only advice: the read itself reports the damaged record
        order.push_back({format::ChunkPath(ref->id), 0});
      }
      // Read again now: in use at least until the newest chunk first read so far.
      order[static_cast<size_t>(entry_of[chunk])].in_use_until =
          static_cast<uint32_t>(order.size() - 1);
    }
  }
  dataset.storage().AdviseReadOrder(order);
}

}  // namespace

Result<std::unique_ptr<ReadPipeline>> ReadPipeline::Start(std::shared_ptr<const Dataset> dataset,
                                                          std::vector<uint32_t> plan,
                                                          const ReadPipelineOptions& options) {
  STOKER_RETURN_IF_ERROR(options.Validate());
  STOKER_RETURN_IF_ERROR(CheckLoadable(*dataset));
  for (uint32_t s : plan) {
    if (s >= dataset->sample_count()) {
      return Err(Status::InvalidArgument(
          fmt::format("plan names sample {} of {}", s, dataset->sample_count())));
    }
  }
  STOKER_ASSIGN_OR_RETURN(PlanLocations locations, PlanLocations::For(*dataset, plan));
  AdviseChunkOrder(*dataset, plan, locations);
  auto state = std::make_shared<State>();
  state->locations = std::move(locations);
  state->dataset = std::move(dataset);
  state->plan = std::move(plan);
  state->options = options;
  if (options.gated) {
    state->skipped.assign(state->plan.size(), 0);
  } else {
    state->admitted_end = state->plan.size();
  }
  STOKER_ASSIGN_OR_RETURN(state->engine, CreateIoEngine(options.engine, options.io_depth));
  state->self_weak = state;
  state->scheduler = std::thread([raw = state.get()] { raw->Schedule(); });
  return std::unique_ptr<ReadPipeline>(new ReadPipeline(std::move(state)));
}

ReadPipeline::~ReadPipeline() {
  {
    std::lock_guard lock(state_->mu);
    state_->stop = true;
  }
  state_->cv.notify_all();
  state_->scheduler.join();
  state_->engine.reset();  // waits for reads in flight; their callbacks still see the state
  // Buffers of undelivered samples go back now, destroyed outside mu: their deleters take mu.
  std::map<uint64_t, State::Slot> undelivered;
  std::lock_guard lock(state_->mu);
  undelivered.swap(state_->slots);
}

Result<std::optional<SampleData>> ReadPipeline::Next() {
  State& s = *state_;
  std::unique_lock lock(s.mu);
  s.SkipUnread();
  if (s.next_to_deliver == s.plan.size()) return std::optional<SampleData>();
  auto ready = [&] {
    s.SkipUnread();  // positions decided while waiting may be skipped ones
    if (s.next_to_deliver == s.plan.size()) return true;
    auto it = s.slots.find(s.next_to_deliver);
    return it != s.slots.end() && it->second.pending == 0;
  };
  if (!ready()) {
    ++s.stats.consumer_waits;
    const auto start = std::chrono::steady_clock::now();
    bool stuck = false;
    s.cv.wait(lock, [&] {
      // Nothing is in flight and the scheduler waits for memory to read the rest of this
      // sample's segment: the budget is held by samples the consumer has not released (a
      // segment is at most half the budget), so waiting longer would wait forever.
      // (The budget must really be short: bytes released a moment ago may not have woken the
      // scheduler yet.)
      // A consumer whose samples are released elsewhere is never stuck: they come back.
      stuck = !s.options.samples_released_elsewhere && s.scheduler_waiting_for_budget &&
              s.ranges_in_flight == 0 && s.bytes_held != 0 &&
              s.bytes_held + s.scheduler_waiting_bytes > s.options.memory_budget_bytes;
      return ready() || stuck;
    });
    s.stats.consumer_wait_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (stuck && !ready()) {
      return Err(Status::ResourceExhausted(fmt::format(
          "read pipeline: the memory budget ({} bytes) is used up by samples still held by the "
          "consumer; release them or raise the budget",
          s.options.memory_budget_bytes)));
    }
  }
  if (s.next_to_deliver == s.plan.size()) return std::optional<SampleData>();
  auto node = s.slots.extract(s.next_to_deliver);
  ++s.next_to_deliver;
  ++s.stats.samples;
  for (const auto& f : node.mapped().data.files) s.stats.payload_bytes += f.bytes.size();
  return std::optional<SampleData>(std::move(node.mapped().data));
}

Status ReadPipeline::Admit(uint64_t first, uint64_t end, bool read) {
  State& s = *state_;
  {
    std::lock_guard lock(s.mu);
    if (!s.options.gated || first != s.admitted_end || end < first || end > s.plan.size()) {
      return Status::Internal(
          fmt::format("read pipeline: positions {}..{} admitted where {} is next of {}{}", first,
                      end, s.admitted_end, s.plan.size(), s.options.gated ? "" : " (not gated)"));
    }
    if (!read) std::fill(s.skipped.begin() + first, s.skipped.begin() + end, uint8_t{1});
    s.admitted_end = end;
  }
  s.cv.notify_all();
  return Status::OK();
}

ReadPipelineStats ReadPipeline::stats() const {
  std::lock_guard lock(state_->mu);
  return state_->stats;
}

std::string_view ReadPipeline::engine_name() const { return state_->engine->name(); }

}  // namespace stoker::loader
