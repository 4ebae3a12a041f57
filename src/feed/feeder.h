// `stoker feed`: a daemon that lends this machine's CPUs to a training job. It answers MAKE
// requests (feed_client/slice.h; docs/protocol.md, "Feeders") by reading the slice's samples and
// running the trainer's own image pipeline over them, so what it sends back is byte for byte
// what the trainer would have made (decision 0013).
//
// Connections, the handshake (the job's secret), frame checks, limits and /metrics are
// server::Server's; a feeder exports no dataset. Datasets are opened by (URI, version) on first
// use and kept open.
//
// Thread-safety: Start/Shutdown from any thread; counters() at any time.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "feed_client/slice.h"
#include "stoker/status.h"

namespace stoker::feed {

struct FeederOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;     // 0: an ephemeral port (Feeder::port())
  std::string secret;    // the job's (at least 16 bytes)
  uint32_t threads = 0;  // decode threads per slice; 0: the CPUs this process may use
  // The images of the slices being made, all connections together, stay below this; a slice
  // that would go over is refused with ResourceExhausted (the trainer makes it itself).
  uint64_t memory_limit = uint64_t{1} << 30;
  int metrics_port = -1;     // -1: none; 0: ephemeral
  size_t max_datasets = 16;  // datasets kept open (by URI and version)
  // Datasets are opened with `secret` (a stoker:// store shares the job's, as `stoker node`'s
  // does) and read through this job-cache daemon's socket (docs/cache.md). Unset: $STOKER_NODE.
  std::optional<std::string> node_socket;
  // What this feeder makes images with; a trainer of another build is refused when it joins.
  // Empty: decode::MakerVersion() (tests set another).
  std::string maker_version;
  // More Prometheus text for /metrics (`stoker feed` adds its job-cache daemon's counters).
  std::function<std::string()> extra_metrics;
};

struct FeederCounters {
  std::atomic<uint64_t> slices{0}, samples{0}, failed_samples{0}, refused{0}, pixel_bytes{0};
};

class Feeder {
 public:
  static Result<std::unique_ptr<Feeder>> Start(FeederOptions options);
  ~Feeder();  // Shutdown()

  uint16_t port() const;
  int metrics_port() const;
  const FeederCounters& counters() const;
  void Shutdown();  // graceful: the slices being made are answered first

  struct State;

 private:
  explicit Feeder(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

}  // namespace stoker::feed
