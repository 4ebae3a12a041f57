// The server's counters, rendered in the Prometheus text format for GET /metrics.
// Thread-safe: relaxed atomics, bumped from every connection thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "net/protocol.h"
#include "stoker/status.h"

namespace stoker::server {

class ServerMetrics {
 public:
  // Request kinds with their own counters; anything else counts as "other".
  enum Kind { kStat, kRead, kList, kOther, kKindCount };
  static Kind KindOf(net::MessageType type);

  std::atomic<int64_t> connections_open{0};
  std::atomic<uint64_t> connections_accepted{0};
  std::atomic<uint64_t> connections_rejected{
      0};                                  // over --max-connections, or no thread could be started
  std::atomic<uint64_t> auth_failures{0};  // spoke the protocol, wrong secret
  std::atomic<uint64_t> handshake_failures{0};  // anything else before WELCOME
  std::atomic<uint64_t> protocol_errors{0};     // bad frames, slow frames: connection dropped
  std::atomic<uint64_t> idle_closed{0};         // idle authenticated connections closed
  std::atomic<uint64_t> memory_waits{0};        // answers that waited for room in the budget
  std::atomic<uint64_t> memory_peak{0};         // most answer-buffer bytes held at once

  void CountRequest(Kind kind, uint64_t answer_bytes);
  void CountError(StatusCode code);
  uint64_t requests(Kind kind) const { return requests_[kind].load(); }
  uint64_t errors(StatusCode code) const { return errors_[static_cast<size_t>(code)].load(); }

  std::string RenderPrometheus() const;

 private:
  std::array<std::atomic<uint64_t>, kKindCount> requests_{};
  std::array<std::atomic<uint64_t>, kKindCount> bytes_{};
  std::array<std::atomic<uint64_t>, static_cast<size_t>(StatusCode::kCancelled) + 1> errors_{};
};

}  // namespace stoker::server
