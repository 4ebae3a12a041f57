#include "server/metrics.h"

#include <fmt/format.h>

namespace stoker::server {

ServerMetrics::Kind ServerMetrics::KindOf(net::MessageType type) {
  switch (type) {
    case net::MessageType::kStat:
      return kStat;
    case net::MessageType::kRead:
      return kRead;
    case net::MessageType::kList:
      return kList;
    default:
      return kOther;
  }
}

void ServerMetrics::CountRequest(Kind kind, uint64_t answer_bytes) {
  requests_[kind].fetch_add(1, std::memory_order_relaxed);
  bytes_[kind].fetch_add(answer_bytes, std::memory_order_relaxed);
}

void ServerMetrics::CountError(StatusCode code) {
  const auto i = static_cast<size_t>(code);
  if (i < errors_.size()) errors_[i].fetch_add(1, std::memory_order_relaxed);
}

std::string ServerMetrics::RenderPrometheus() const {
  std::string out;
  auto metric = [&](std::string_view name, std::string_view type, std::string_view help) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  };
  metric("stoker_serve_connections_open", "gauge", "Connections currently open.");
  out += fmt::format("stoker_serve_connections_open {}\n", connections_open.load());
  metric("stoker_serve_connections_accepted_total", "counter", "Connections accepted.");
  out += fmt::format("stoker_serve_connections_accepted_total {}\n", connections_accepted.load());
  metric("stoker_serve_connections_rejected_total", "counter",
         "Connections refused because --max-connections were open.");
  out += fmt::format("stoker_serve_connections_rejected_total {}\n", connections_rejected.load());
  metric("stoker_serve_auth_failures_total", "counter",
         "Handshakes with a wrong secret (a wrong proof, or a hang-up after the challenge).");
  out += fmt::format("stoker_serve_auth_failures_total {}\n", auth_failures.load());
  metric("stoker_serve_handshake_failures_total", "counter",
         "Connections dropped before authentication for other reasons.");
  out += fmt::format("stoker_serve_handshake_failures_total {}\n", handshake_failures.load());
  metric("stoker_serve_protocol_errors_total", "counter",
         "Connections dropped for a malformed, oversized or too slow frame.");
  out += fmt::format("stoker_serve_protocol_errors_total {}\n", protocol_errors.load());
  metric("stoker_serve_idle_closed_total", "counter", "Idle connections closed.");
  out += fmt::format("stoker_serve_idle_closed_total {}\n", idle_closed.load());
  metric("stoker_serve_memory_waits_total", "counter",
         "Answers that waited for room under --memory-limit.");
  out += fmt::format("stoker_serve_memory_waits_total {}\n", memory_waits.load());
  metric("stoker_serve_memory_peak_bytes", "gauge", "Most answer-buffer bytes held at once.");
  out += fmt::format("stoker_serve_memory_peak_bytes {}\n", memory_peak.load());

  static constexpr std::string_view kKindNames[kKindCount] = {"STAT", "READ", "LIST", "other"};
  metric("stoker_serve_requests_total", "counter", "Requests answered, by type.");
  for (int k = 0; k < kKindCount; ++k) {
    out += fmt::format("stoker_serve_requests_total{{type=\"{}\"}} {}\n", kKindNames[k],
                       requests_[k].load());
  }
  metric("stoker_serve_answer_bytes_total", "counter", "Answer payload bytes sent, by type.");
  for (int k = 0; k < kKindCount; ++k) {
    out += fmt::format("stoker_serve_answer_bytes_total{{type=\"{}\"}} {}\n", kKindNames[k],
                       bytes_[k].load());
  }
  metric("stoker_serve_errors_total", "counter", "ERROR answers, by status code.");
  for (size_t c = 1; c < errors_.size(); ++c) {
    out += fmt::format("stoker_serve_errors_total{{code=\"{}\"}} {}\n",
                       StatusCodeName(static_cast<StatusCode>(c)), errors_[c].load());
  }
  return out;
}

}  // namespace stoker::server
