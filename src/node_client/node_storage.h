// The trainer's side of the node daemon: a Storage that wraps the dataset's store and gets chunk
// files from the node daemon on this machine (trainer_protocol.h) when one answers, and from the
// store itself when none does, is starting, or has died. Everything else (version records,
// segments, listings) always comes from the store.
//
// Chunks arrive as sealed memfds, mapped read-only: a read is a memcpy from shared memory. The
// last few mappings are kept (the read pipeline reads a chunk in several ranges). A daemon that
// fails is left alone for a second, then tried again, so a restarted daemon is picked up without
// the trainer noticing anything but speed. Bytes from either path are checked by the reader
// (every sample's CRC32C), as always.
//
// Thread-safety: like every Storage.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "stoker/storage.h"

namespace stoker::node {

struct NodeStorageStats {
  uint64_t node_reads = 0;     // ReadAt calls answered from the daemon's shared memory
  uint64_t store_reads = 0;    // ReadAt calls that went to the store (no daemon, or it failed)
  uint64_t node_failures = 0;  // daemon requests that failed (connection or daemon error)
};

std::shared_ptr<Storage> NewNodeStorage(std::shared_ptr<Storage> store, std::string socket_path);
// Counters of a storage made by NewNodeStorage; nullopt for any other storage.
std::optional<NodeStorageStats> GetNodeStorageStats(const Storage& storage);

}  // namespace stoker::node
