// `stoker mount`: a read-only FUSE view of a packed dataset (docs/mount.md). Every program that
// reads files by path (torchvision's ImageFolder, cp, tar, diff) sees the original tree, with
// every file's bytes checked against its CRC32C on the way.
//
// libfuse 3's low-level API: the kernel asks by inode number; a file's inode number is its
// index in the dataset (fuse/inode_table.h). Lookups read a block or two of the metadata
// segments, a directory's listing is read once and kept, and file attributes come from the
// locations read when the dataset was opened. File bytes are read on the first read
// of an open file (fuse/open_file.h). Attributes, names and data stay in the kernel's caches
// for as long as it likes: a dataset version never changes.
//
// Thread-safety: Serve blocks its caller; the file system runs on libfuse's worker threads.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "stoker/dataset.h"
#include "stoker/status.h"

namespace stoker::fuse {

struct MountOptions {
  // What `df` and /proc/mounts show as the source (fsname), e.g. the dataset URI.
  std::string source;
  // libfuse worker threads: requests served at once (each may wait on storage).
  unsigned threads = 16;
  // Let other users (not just the one who mounted) read the mount. A normal user needs
  // `user_allow_other` in /etc/fuse.conf for this.
  bool allow_other = false;
  // Mount over a directory that has entries (hiding them while mounted).
  bool allow_non_empty = false;
  // Files up to this size are read into one buffer per open file; larger ones are checked by
  // streaming and then read in place (see fuse/open_file.h).
  uint64_t buffer_limit = uint64_t{64} << 20;
  // More libfuse / mount options, each as for `-o` (e.g. "debug", "max_read=131072").
  std::vector<std::string> fuse_options;
  // Called once the mount is in place, before the first request is served.
  std::function<void()> on_mounted;
};

// Mounts `dataset` read-only at `mountpoint` and serves it until the mount is unmounted
// (`fusermount3 -u`, `umount`) or the process gets SIGINT, SIGTERM or SIGHUP; then unmounts.
// Errors: Unsupported when FUSE is unavailable here (no /dev/fuse), InvalidArgument for a bad
// mountpoint or option, IOError when the mount itself fails (libfuse prints why on stderr).
Status Serve(const Dataset& dataset, const std::string& mountpoint, const MountOptions& options);

}  // namespace stoker::fuse
