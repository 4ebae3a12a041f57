// Constants of the stoker wire protocol (docs/protocol.md) and the path rule both sides apply.
// Header-only values; thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <string_view>

#include "stoker/status.h"

namespace stoker::net {

inline constexpr uint16_t kProtocolVersion = 1;
inline constexpr uint32_t kFrameMagic = 0x464B5453;  // "STKF" little-endian
inline constexpr size_t kHeaderSize = 24;
inline constexpr size_t kNonceSize = 32;
inline constexpr size_t kProofSize = 32;  // HMAC-SHA256
inline constexpr size_t kMinSecretBytes = 16;

// The largest READ a client may ask for, and the frame limits that follow from it.
inline constexpr uint32_t kMaxReadLength = 16u << 20;
inline constexpr uint32_t kMaxAnswerFrame = kMaxReadLength + 64;
// Requests carry at most two u16-length strings and 12 bytes of numbers, so the server refuses
// anything bigger: a peer cannot make it buffer 16 MiB per connection with junk requests.
inline constexpr uint32_t kMaxRequestFrame = 2 * (2 + 65535) + 64;
// WRITE requests (servers started with --writable) carry up to this many bytes, so that frame
// type alone may be larger; the server counts its buffer against its memory limit.
inline constexpr uint32_t kMaxWriteLength = 4u << 20;
inline constexpr uint32_t kMaxWriteRequestFrame = kMaxWriteLength + kMaxRequestFrame;
inline constexpr uint32_t kMaxHandshakeFrame = 256;
// Requests a client keeps outstanding on one connection (the server answers in order).
inline constexpr int kMaxInFlightPerConnection = 16;

enum class MessageType : uint8_t {
  kHello = 1,
  kChallenge = 2,
  kAuth = 3,
  kWelcome = 4,
  kStat = 16,
  kStatOk = 17,
  kRead = 18,
  kData = 19,
  kList = 20,
  kListOk = 21,
  kWrite = 22,   // bytes into an upload (a temporary file beside the target)
  kDone = 23,    // the answer to WRITE, FINISH and REMOVE
  kFinish = 24,  // an upload becomes its target: created, replaced, or created exclusively
  kRename = 25,
  kRemove = 26,
  kError = 31,
  // Feeders (`stoker feed`, docs/protocol.md "Feeders"): a slice of a trainer's plan, made.
  kMake = 40,
  kMade = 41,
  kJoin = 42,    // a trainer's first request: the version of the code that makes its images
  kJoined = 43,  // the feeder's: the same, or ERROR Unsupported naming both
};

std::string_view MessageTypeName(MessageType type);

// How FINISH ends an upload (docs/protocol.md, "Writes").
enum class FinishMode : uint8_t {
  kReplace = 0,    // the target is created or replaced (rename)
  kExclusive = 1,  // the target is created unless it exists (link): the versions' CAS
  kAbort = 2,      // the upload is dropped
};

// A dataset-relative path as the protocol allows it: not empty (unless `allow_root`), no
// leading '/', no empty, "." or ".." components, no NUL. InvalidArgument naming the path
// otherwise. The server applies it to every request; the client checks before sending.
Status ValidatePath(std::string_view path, bool allow_root);

}  // namespace stoker::net
