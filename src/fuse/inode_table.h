// The inodes of a mounted dataset (`stoker mount`, docs/mount.md), answered from the dataset
// version's metadata.
//
//   1                      the root (FUSE_ROOT_ID)
//   2 .. 2^32 - 1          directories, numbered in the order the kernel first meets them
//   2^32 + f               file f (its index in the dataset)
//
// A file's number is its index, which a version never changes; a directory keeps its number
// for the life of the mount (format 2 gives directories no index, so they are registered by
// path on first lookup or listing). The kernel may forget an inode and look it up again and gets
// the same number, so FUSE's forget needs no reference counting.
//
// A directory's listing is read from the segments once and kept (it never changes).
// Thread-safety: every method may be called concurrently.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "stoker/status.h"

namespace stoker {
class Dataset;
}  // namespace stoker

namespace stoker::fuse {

class InodeTable {
 public:
  static constexpr uint64_t kRootInode = 1;
  static constexpr uint64_t kFileInodeBase = 1ull << 32;

  // `dataset` must outlive the table and have its locations read (the default open). uid/gid
  // own every inode; the dataset version's creation time is every inode's mtime.
  InodeTable(const Dataset& dataset, uid_t uid, gid_t gid);

  bool IsDir(uint64_t ino) const;
  bool IsFile(uint64_t ino) const { return ino >= kFileInodeBase && ino - kFileInodeBase < files_; }
  uint64_t FileInode(uint64_t file) const { return kFileInodeBase + file; }
  // Only for inodes that pass IsFile.
  uint64_t FileIndex(uint64_t ino) const { return ino - kFileInodeBase; }
  uint64_t inode_count() const;  // directories met so far + files

  // The inode of `name` inside directory inode `parent`; nullopt if there is no such entry
  // (or `parent` is not a directory); an error if the metadata cannot be read.
  Result<std::optional<uint64_t>> Lookup(uint64_t parent, std::string_view name) const;

  // Fills `st` for `ino`: directories 0555, files 0444 (read-only). NotFound if `ino` is unknown.
  Status Attr(uint64_t ino, struct stat* st) const;

  // A directory's entries, in readdir order: ".", "..", then subdirectories, then files (each
  // by name). Entry k's readdir offset is k + 1.
  struct Entry {
    std::string name;
    uint64_t ino = 0;
    bool is_dir = false;
  };
  using Listing = std::vector<Entry>;
  Result<std::shared_ptr<const Listing>> Entries(uint64_t dir_ino) const;  // IsDir(dir_ino)

  // The dataset-relative path of an inode ("" for the root), for log lines.
  std::string Path(uint64_t ino) const;

 private:
  struct Dir {
    std::string path;
    uint64_t parent = kRootInode;
    std::shared_ptr<const Listing> listing;  // read on first use
  };
  uint64_t Register(std::string path, uint64_t parent) const;  // caller holds mu_

  const Dataset& dataset_;
  uint64_t files_ = 0;
  uid_t uid_;
  gid_t gid_;
  int64_t mtime_ = 0;
  mutable std::mutex mu_;
  mutable std::vector<Dir> dirs_;  // inode - 1
  mutable std::unordered_map<std::string, uint64_t> dir_inodes_;
};

}  // namespace stoker::fuse
