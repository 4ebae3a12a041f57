// See feeder.h.
#include "feed/feeder.h"

#include <fmt/format.h>

#include <list>
#include <map>
#include <mutex>
#include <utility>

#include "common/option_table.h"
#include "decode/maker_version.h"
#include "decode/transform_option_table.h"
#include "loader/image_pipeline.h"
#include "net/payload.h"
#include "net/protocol.h"
#include "server/server.h"
#include "stoker/dataset.h"
#include "stoker/storage.h"

namespace stoker::feed {
struct Feeder::State {
  explicit State(FeederOptions o)
      : options(std::move(o)),
        maker_version(options.maker_version.empty() ? std::string(decode::MakerVersion())
                                                    : options.maker_version) {}

  const FeederOptions options;
  const std::string maker_version;
  FeederCounters counters;
  std::atomic<uint64_t> bytes_in_flight{0};
  std::unique_ptr<server::Server> server;

  std::mutex datasets_mu;
  std::map<std::string, std::shared_ptr<const Dataset>> datasets;  // by URI '\0' version
  std::list<std::string> opened;  // the keys, oldest first (the first closed when full)

  Result<std::shared_ptr<const Dataset>> OpenDataset(const std::string& uri, uint64_t version) {
    const std::string key = uri + '\0' + std::to_string(version);
    {
      const std::lock_guard lock(datasets_mu);
      if (auto it = datasets.find(key); it != datasets.end()) return it->second;
    }
    // Opened outside the lock: a slow store must not hold up slices of open datasets.
    DatasetOpenOptions o;
    o.read_locations = false;  // a slice reads the locations of its own samples' chunks
    o.version = version;
    StorageOptions so;
    so.secret = options.secret;
    so.node_socket = options.node_socket;
    STOKER_ASSIGN_OR_RETURN(std::shared_ptr<Storage> storage, OpenStorage(uri, so));
    STOKER_ASSIGN_OR_RETURN(std::unique_ptr<Dataset> opened_now, Dataset::Open(storage, o));
    std::shared_ptr<const Dataset> ds = std::move(opened_now);
    const std::lock_guard lock(datasets_mu);
    if (auto [it, added] = datasets.emplace(key, ds); !added) return it->second;
    opened.push_back(key);
    if (opened.size() > options.max_datasets) {
      datasets.erase(opened.front());  // slices still making it hold their own reference
      opened.pop_front();
    }
    return ds;
  }

  // Holds `bytes` of the memory limit, reserved by the caller, until destroyed.
  struct Lease {
    std::atomic<uint64_t>& held;
    uint64_t bytes;
    ~Lease() { held.fetch_sub(bytes); }
  };

  // The MADE payload of a slice.
  Result<std::string> MakeSlice(const SliceRequest& q) {
    loader::ImagePipelineOptions o;
    STOKER_RETURN_IF_ERROR(
        ParseOptionsText(decode::TransformOptionTable(), q.transform, o.transform)
            .WithContext("MAKE's transform options"));
    SliceAnswer answer;
    answer.sample_bytes = static_cast<uint32_t>(o.transform.output.sample_bytes());
    if (q.samples.empty()) return EncodeSliceAnswer(answer, {});
    const uint64_t pixels = uint64_t{answer.sample_bytes} * q.samples.size();
    if (pixels + kMadeBytesPerSample * q.samples.size() > net::kMaxAnswerFrame) {
      return Err(Status::InvalidArgument(fmt::format(
          "a slice of {} images of {} bytes does not fit one answer (16 MiB): send smaller "
          "slices",
          q.samples.size(), answer.sample_bytes)));
    }
    // The pipeline's batch and the answer's copy of it.
    const uint64_t held = 2 * pixels;
    if (bytes_in_flight.fetch_add(held) + held > options.memory_limit) {
      bytes_in_flight.fetch_sub(held);
      counters.refused.fetch_add(1);
      return Err(Status::ResourceExhausted(
          fmt::format("this feeder is making slices up to its --memory-limit ({} bytes)",
                      options.memory_limit)));
    }
    const Lease lease{bytes_in_flight, held};
    STOKER_ASSIGN_OR_RETURN(std::shared_ptr<const Dataset> ds, OpenDataset(q.uri, q.version));
    o.batch_size = static_cast<uint32_t>(q.samples.size());
    o.threads = options.threads;
    o.prefetch_batches = 1;
    o.seed = q.seed;
    o.epoch = q.epoch;
    // Every sample is answered; the trainer applies its own on_error to those that failed.
    o.on_error = loader::ErrorPolicy::kSkip;
    o.image_member = q.image_member;
    o.label_member = q.label_member;
    STOKER_ASSIGN_OR_RETURN(auto pipe, loader::ImagePipeline::Start(std::move(ds), q.samples, o));
    STOKER_ASSIGN_OR_RETURN(std::optional<loader::ImageBatch> batch, pipe->Next());
    if (!batch || batch->consumed != q.samples.size()) {
      return Err(Status::Internal("the image pipeline did not make the whole slice"));
    }
    std::map<uint64_t, std::pair<SampleOutcome, const loader::SampleError*>> left_out;
    for (const auto& e : batch->errors) left_out[e.position] = {SampleOutcome::kFailed, &e};
    for (const auto& e : batch->not_images) left_out[e.position] = {SampleOutcome::kNotImage, &e};
    answer.samples.resize(q.samples.size());
    uint32_t image = 0;
    for (uint64_t pos = 0; pos < q.samples.size(); ++pos) {
      MadeSample& s = answer.samples[pos];
      if (auto it = left_out.find(pos); it != left_out.end()) {
        s.outcome = it->second.first;
        s.message = it->second.second->status.ToString();
        counters.failed_samples.fetch_add(1);
        continue;
      }
      s.label = batch->labels[image++];
    }
    // The made images lie in the batch in order: the answer's pixels, copied once, into it.
    const std::string_view made(reinterpret_cast<const char*>(batch->images.get()),
                                size_t{image} * answer.sample_bytes);
    counters.slices.fetch_add(1);
    counters.samples.fetch_add(q.samples.size());
    counters.pixel_bytes.fetch_add(made.size());
    return EncodeSliceAnswer(answer, made);
  }

  // JOIN: the trainer's maker version must be this feeder's (decision 0013: the same bytes).
  server::HandlerReply Join(std::string_view payload) const {
    server::HandlerReply reply;
    net::PayloadReader r(payload);
    auto theirs = r.String();
    if (!theirs || !r.ExpectEnd().ok()) {
      reply.error = Status::InvalidArgument("a malformed JOIN");
      reply.malformed = true;
      return reply;
    }
    if (*theirs != maker_version) {
      reply.error = Status::Unsupported(
          fmt::format("this feeder makes images with {}, the trainer with {}: run the same build "
                      "on both",
                      maker_version, *theirs));
      return reply;
    }
    net::PayloadWriter w;
    w.String(maker_version);
    reply.type = net::MessageType::kJoined;
    reply.payload = std::move(w.data());
    return reply;
  }

  server::HandlerReply Make(std::string_view payload) {
    server::HandlerReply reply;
    Result<SliceRequest> request = DecodeSliceRequest(payload);
    if (!request) {
      reply.error = request.error();
      reply.malformed = true;
      return reply;
    }
    Result<std::string> made = MakeSlice(*request);
    if (!made) {
      reply.error = made.error();
      return reply;
    }
    reply.type = net::MessageType::kMade;
    reply.payload = *std::move(made);
    return reply;
  }

  std::string Metrics() const {
    return fmt::format(
        "# HELP stoker_feed_slices_total Slices made for trainers.\n"
        "# TYPE stoker_feed_slices_total counter\nstoker_feed_slices_total {}\n"
        "# HELP stoker_feed_samples_total Samples of the slices made (failed ones included).\n"
        "# TYPE stoker_feed_samples_total counter\nstoker_feed_samples_total {}\n"
        "# HELP stoker_feed_failed_samples_total Samples that could not be made.\n"
        "# TYPE stoker_feed_failed_samples_total counter\nstoker_feed_failed_samples_total {}\n"
        "# HELP stoker_feed_refused_total Slices refused at the memory limit.\n"
        "# TYPE stoker_feed_refused_total counter\nstoker_feed_refused_total {}\n"
        "# HELP stoker_feed_pixel_bytes_total Image bytes sent to trainers.\n"
        "# TYPE stoker_feed_pixel_bytes_total counter\nstoker_feed_pixel_bytes_total {}\n",
        counters.slices.load(), counters.samples.load(), counters.failed_samples.load(),
        counters.refused.load(), counters.pixel_bytes.load());
  }
};

Result<std::unique_ptr<Feeder>> Feeder::Start(FeederOptions options) {
  auto state = std::make_shared<State>(std::move(options));
  server::ServerOptions o;
  o.host = state->options.host;
  o.port = state->options.port;
  o.secret = state->options.secret;
  o.metrics_port = state->options.metrics_port;
  // The state outlives the server: ~Feeder shuts the server down before letting go of it.
  State* raw = state.get();
  o.handlers[net::MessageType::kMake] = [raw](std::string_view payload) {
    return raw->Make(payload);
  };
  o.handlers[net::MessageType::kJoin] = [raw](std::string_view payload) {
    return raw->Join(payload);
  };
  o.extra_metrics = [raw] {
    return raw->Metrics() + (raw->options.extra_metrics ? raw->options.extra_metrics() : "");
  };
  STOKER_ASSIGN_OR_RETURN(state->server, server::Server::Start(std::move(o)));
  return std::unique_ptr<Feeder>(new Feeder(std::move(state)));
}

Feeder::Feeder(std::shared_ptr<State> state) : state_(std::move(state)) {}

Feeder::~Feeder() { Shutdown(); }

uint16_t Feeder::port() const { return state_->server->port(); }

int Feeder::metrics_port() const { return state_->server->metrics_port(); }

const FeederCounters& Feeder::counters() const { return state_->counters; }

void Feeder::Shutdown() {
  if (state_->server) state_->server->Shutdown();
}

}  // namespace stoker::feed
