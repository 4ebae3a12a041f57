// Trainer <-> node daemon on one machine: a unix SOCK_SEQPACKET socket (one message per request
// and per reply, so no framing is needed), with chunk bytes passed as memfd descriptors
// (SCM_RIGHTS), never as socket payload: possibly still filling, with marks of what is verified
// (node_client/cached_chunk.h). docs/cache.md, "Trainer <-> daemon".
//
// Requests (payload codecs of src/net/payload.h):
//   HELLO  u8 1 | bytes manifest    the trainer's newest version record: the daemon refuses another
//   dataset GET    u8 2 | u64 chunk id      a chunk file's bytes PLAN   u8 3 | u8 first | u32 n | n
//   × (u64 chunk id, u32 in use until)
//                                   the trainer's chunks in first-use order, each with the entry
//                                   until which it stays in use (PlannedFile in storage.h);
//                                   `first` starts a new plan (a new epoch), otherwise the
//                                   entries extend it
// Every request gets one reply: u8 StatusCode | string message, then for an OK HELLO a string
// (the job id), for an OK GET a u64 size and the descriptor.
//
// Functions here are stateless; a socket is used by one thread at a time.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "net/socket.h"
#include "stoker/status.h"

namespace stoker::node {

// The environment variable that points trainers at their node's daemon socket.
inline constexpr const char* kNodeSocketEnv = "STOKER_NODE";

enum class TrainerRequest : uint8_t { kHello = 1, kGet = 2, kPlan = 3 };

// The largest message either side sends or accepts (a PLAN piece of kPlanIdsPerMessage ids).
inline constexpr size_t kMaxTrainerMessage = 128 * 1024;
inline constexpr size_t kPlanIdsPerMessage = 8192;

// Sends one message, with `pass_fd` (>= 0) attached as SCM_RIGHTS.
Status SendMessage(net::Socket& socket, std::string_view message, int pass_fd,
                   net::Deadline deadline);
// Receives one message (at most kMaxTrainerMessage bytes). A descriptor that came with it is
// stored in *received_fd (the caller owns it), otherwise -1. Unavailable on EOF; Cancelled
// once `cancel_fd` (>= 0) is readable.
Result<std::string> ReceiveMessage(net::Socket& socket, int* received_fd, net::Deadline deadline,
                                   int cancel_fd = -1);

// Connects to the daemon's socket (Unavailable if nobody listens there). Non-blocking, like
// every net::Socket.
Result<net::Socket> ConnectUnix(const std::string& path);

}  // namespace stoker::node
