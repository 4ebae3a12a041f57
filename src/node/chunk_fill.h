// One chunk's fill, from one source after another, handed on as it is verified (cut-through).
//
// A fill first takes the chunk file's header and tail (index + footer) and checks them
// (format::ChunkStreamCheck), which lets readers have the tail at once, then the data in order,
// piece by piece: after each piece the entries now complete are checked and the chunk's
// verified mark moves over them, so readers (trainers, peers) get verified bytes while the rest
// is still coming (two pieces are in flight at a time). A source that fails or sends a bad entry
// leaves what was verified; the next source goes on from there.
//
// Thread-safety: one fill, one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>

#include "format/chunk.h"
#include "node_client/cached_chunk.h"
#include "stoker/status.h"

namespace stoker::node {

class ChunkFill {
 public:
  // Reads bytes [offset, offset + dst.size()) of the chunk file from a source; two calls may
  // run at once (for different ranges).
  using ReadFn = std::function<Status(uint64_t offset, std::span<std::byte> dst)>;

  ChunkFill(CachedChunk& out, const format::ChunkInfo& info, std::string name);

  // Takes what is still missing from `source` (described as `source_name` in errors), in
  // pieces of `piece` bytes. OK once the whole chunk is there and verified; the source's read
  // error, or Corruption for what it sent, otherwise (the fill keeps what was verified).
  Status From(const ReadFn& source, const std::string& source_name, uint64_t piece);

  bool done() const;

 private:
  CachedChunk& out_;
  const format::ChunkInfo info_;
  const std::string name_;
  std::optional<format::ChunkStreamCheck> check_;
  uint64_t verified_ = 0;  // the prefix handed on; reading goes on from here
};

}  // namespace stoker::node
