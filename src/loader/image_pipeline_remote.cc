// The image pipeline's feeders (options.feeders; decision 0013; see image_pipeline.h): each
// credit of each feeder is a thread with its own connection that takes slices, sends them, and
// places the answer. A slice slower than its hedge deadline is offered again (another feeder or
// the local path makes it too) while this one goes on waiting: the first maker to finish claims
// the slice and writes its slots, the other's rows are dropped. A feeder silent past the hard
// deadline, or failing, is given up on for now: warned about once, tried again after a back-off.
#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "common/log.h"
#include "common/trace.h"
#include "decode/maker_version.h"
#include "decode/output.h"
#include "loader/image_pipeline_state.h"

namespace stoker::loader {
namespace {

using State = ImagePipeline::State;
using Clock = State::Clock;

std::chrono::milliseconds Millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

}  // namespace

feed::SliceRequest ImagePipeline::State::RequestFor(const Slice& slice) const {
  const Source& source = sources[slice.source];
  feed::SliceRequest q;
  q.uri = source.uri;
  q.version = source.dataset->version();
  q.seed = SourceSeed(options.seed, slice.source);
  q.epoch = options.epoch;
  q.transform = wire_transform;
  q.image_member = options.image_member;
  q.label_member = options.label_member;
  const auto first = source.plan.begin() + static_cast<ptrdiff_t>(slice.source_first);
  q.samples.assign(first, first + slice.count);
  return q;
}

Status ImagePipeline::State::CheckAnswer(const feed::SliceAnswer& answer,
                                         const std::string& peer) const {
  const decode::OutputSpec& out = options.transform.output;
  const size_t wire_bytes = size_t{out.width} * out.height * 3;
  if (answer.sample_bytes != wire_bytes) {
    return Status::Corruption(
        fmt::format("{}: images of {} bytes where {} ({}x{} uint8) were asked", peer,
                    answer.sample_bytes, wire_bytes, out.width, out.height));
  }
  return Status::OK();
}

bool ImagePipeline::State::RowsAsOnTheWire() const {
  const decode::OutputSpec& out = options.transform.output;
  return out.dtype == decode::DType::kUint8 && out.layout == decode::Layout::kNHWC;
}

void ImagePipeline::State::Place(const Slice& slice, const feed::SliceAnswer& answer) {
  const decode::OutputSpec& out = options.transform.output;
  const size_t wire_bytes = size_t{out.width} * out.height * 3;
  const bool as_is = RowsAsOnTheWire();
  const auto* pixels = reinterpret_cast<const uint8_t*>(answer.pixels().data());
  for (uint32_t i = 0; i < slice.count; ++i) {
    const uint32_t slot = slice.slot + i;
    slice.batch->labels[slot] = answer.samples[i].label;
    if (answer.pixels_placed) continue;
    std::byte* dst = slice.batch->buffer.get() + size_t{slot} * sample_bytes;
    const uint8_t* src = pixels + size_t{i} * wire_bytes;
    if (as_is) {
      std::memcpy(dst, src, wire_bytes);
    } else {  // the flip is in the pixels already: normalize and lay out as the transform would
      decode::WriteSample({src, out.width, out.height, size_t{out.width} * 3}, false, out, dst);
    }
  }
}

ImagePipeline::State::Deadlines ImagePipeline::State::DeadlinesFor(const FeederLink& link) const {
  const FeederPoolOptions& fo = options.feeders;
  if (link.slice_seconds > 0) {
    const double hedge = std::max(fo.min_deadline_seconds, 4 * link.slice_seconds);
    return {hedge, std::max(fo.give_up_seconds, 8 * hedge)};
  }
  // Its first slice (it opens the dataset): hedged at the slowest pace any feeder has shown.
  double slowest = 0;
  for (const FeederLink& other : links) slowest = std::max(slowest, other.slice_seconds);
  const double hedge =
      slowest > 0 ? std::max(fo.min_deadline_seconds, 4 * slowest) : fo.first_deadline_seconds / 6;
  return {hedge, fo.first_deadline_seconds};
}

Result<feed::SliceAnswer> ImagePipeline::State::Ask(feed::FeederConnection& connection,
                                                    const Slice& slice, Deadlines deadlines,
                                                    bool& placing) {
  const Clock::time_point start = Clock::now();
  STOKER_RETURN_IF_ERROR(connection.Send(RequestFor(slice), Millis(deadlines.give_up)));
  Status waited = connection.WaitForAnswer(Millis(deadlines.hedge));
  if (waited.IsTimeout()) {
    {
      std::lock_guard lock(mu);
      if (!slice.claim->taken()) {
        Requeue(slice);  // a copy: whoever finishes first claims it
        ++stats.hedged_slices;
      }
    }
    SlicesChanged();
    waited = connection.WaitForAnswer(Millis(deadlines.give_up - SecondsSince(start)));
  }
  STOKER_RETURN_IF_ERROR(waited);
  // The answer is arriving. Rows kept as they come are read into the batch itself (no copy of
  // megabytes a second on the trainer's CPU), once this feeder holds the slots.
  std::span<std::byte> into;
  if (RowsAsOnTheWire()) {
    std::lock_guard lock(mu);
    if (!slice.claim->taken()) {
      slice.claim->placing = placing = true;
      into = {slice.batch->buffer.get() + size_t{slice.slot} * sample_bytes,
              size_t{slice.count} * sample_bytes};
    }
  }
  return connection.Receive(Millis(std::max(1.0, deadlines.give_up - SecondsSince(start))), into);
}

void ImagePipeline::State::Feed(size_t feeder) {
  trace::NameThread("stoker feeder");
  const FeederPoolOptions& fo = options.feeders;
  const std::string peer = links[feeder].address.ToString();
  std::unique_ptr<feed::FeederConnection> connection;
  double backoff = 0.1;
  // Waits before trying this feeder again (doubling, up to 5 s), or until there is no more work
  // for feeders.
  const auto pause = [&] {
    std::unique_lock lock(mu);
    slice_cv.wait_for(lock, std::chrono::duration<double>(backoff),
                      [&] { return stopping || (slicing_done && !FeederWork()); });
    backoff = std::min(backoff * 2, 5.0);
  };
  // Reports the feeder's failure once, until it answers again. A slice sent before it last
  // answered again fails late (a connection cut with the link): old news, not reported.
  const auto report = [&](const Status& why, std::optional<uint64_t> sent_recoveries) {
    std::lock_guard lock(mu);
    FeederLink& link = links[feeder];
    if (sent_recoveries && *sent_recoveries != link.recoveries) return;
    link.stats.reachable = false;
    if (link.warned) return;
    link.warned = true;
    ++link.warnings;
    log::Warning("loader", fmt::format("feeder {} failed ({}): its slices are made here or by "
                                       "other feeders until it answers again",
                                       peer, why.ToString()));
  };
  for (;;) {
    {
      std::lock_guard lock(mu);
      if (stopping || (slicing_done && !FeederWork())) return;
    }
    if (!connection) {
      auto connected = feed::FeederConnection::Connect(
          links[feeder].address.host, links[feeder].address.port, fo.secret, decode::MakerVersion(),
          Millis(fo.connect_timeout_seconds));
      if (!connected) {
        report(connected.error(), std::nullopt);
        pause();
        continue;
      }
      connection = *std::move(connected);
    }
    std::optional<Slice> slice;
    Deadlines deadlines;
    uint64_t sent_after = 0;       // the link's warnings when this slice was sent
    uint64_t sent_recoveries = 0;  // and the times it had answered again
    {
      std::unique_lock lock(mu);
      slice_cv.wait(lock, [&] { return stopping || FeederWork() || slicing_done; });
      if (stopping) return;
      slice = TakeSlice(/*for_feeder=*/true, /*take_open=*/true);
      if (!slice) continue;  // the end, or a fatal error: checked at the top
      remote_claims.push_back(slice->claim);
      slice->batch->remote += slice->count;
      ++links[feeder].stats.in_flight;
      deadlines = DeadlinesFor(links[feeder]);
      sent_after = links[feeder].warnings;
      sent_recoveries = links[feeder].recoveries;
      making.push_back(connection.get());
    }
    SlicesChanged();
    const uint64_t trace_start = trace::Enabled() ? trace::NowNs() : 0;
    const Clock::time_point start = Clock::now();
    bool placing = false;
    Result<feed::SliceAnswer> answer = Ask(*connection, *slice, deadlines, placing);
    // A sample the feeder could not make is made here, so that the error (or the skip) is this
    // trainer's own, exactly as without feeders: the feeder did nothing wrong.
    const bool sample_failed = answer && feed::MadeCount(*answer) != answer->samples.size();
    Status status = answer ? CheckAnswer(*answer, peer) : answer.error();
    const double took = SecondsSince(start);
    if (trace_start != 0) {
      trace::Complete("feeder slice", "feeders", trace_start, trace::NowNs(),
                      fmt::format("\"feeder\": \"{}\", \"samples\": {}", peer, slice->count));
    }
    bool mine = false, retry_later = false;
    {
      std::lock_guard lock(mu);
      std::erase(making, connection.get());  // before it may go: StopFeeders cancels these
      if (stopping) return;                  // the pipeline cancelled the slice
      FeederLink& link = links[feeder];
      remote_claims.erase(std::ranges::find(remote_claims, slice->claim));
      slice->batch->remote -= slice->count;
      --link.stats.in_flight;
      if (status.ok()) {
        link.slice_seconds =
            link.slice_seconds == 0 ? took : 0.75 * link.slice_seconds + 0.25 * took;
        link.stats.reachable = true;
        // Only a slice sent since the warning shows the feeder back (one sent before may still
        // come in after its failure).
        if (link.warned && sent_after == link.warnings) {
          log::Info("loader", fmt::format("feeder {} answers again", peer));
          link.warned = false;
          ++link.recoveries;
        }
        backoff = 0.1;
      } else {
        ++link.stats.failures;
        retry_later = true;
      }
      // Receiving into the slots held them; whether this answer keeps them is decided as any.
      if (placing) slice->claim->placing = false;
      if (slice->claim->taken()) {
        if (status.ok()) ++link.stats.late;  // a copy was made first: these rows are not used
      } else if (status.ok() && !sample_failed) {
        slice->claim->claimed = mine = true;
      } else {
        slice->local_only = sample_failed;
        Requeue(*slice);
      }
    }
    if (mine) {
      Place(*slice, *answer);  // the claim makes these slots this thread's alone
      std::lock_guard lock(mu);
      FeederLink& link = links[feeder];
      ++link.stats.slices;
      link.stats.samples += slice->count;
      link.stats.pixel_bytes += uint64_t{slice->count} * answer->sample_bytes;
      link.stats.seconds += took;
      slice->batch->remaining -= slice->count;
      if (slice->batch->remaining == 0) batch_cv.notify_all();
    }
    SlicesChanged();
    if (retry_later) {
      report(status, sent_recoveries);
      // A whole ERROR answer (the feeder is full, or cannot open the dataset) leaves the
      // connection usable; anything else leaves it mid-frame or still owing an answer.
      if (!connection->in_step()) connection.reset();
      pause();
    }
  }
}

void ImagePipeline::State::StopFeeders() {
  {
    std::lock_guard lock(mu);
    for (feed::FeederConnection* connection : making) connection->Cancel();
  }
  slice_cv.notify_all();
  for (std::thread& t : feeder_threads) t.join();
}

}  // namespace stoker::loader
