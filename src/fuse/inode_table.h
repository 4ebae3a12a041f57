// The inodes of a mounted dataset (`stoker mount`, docs/mount.md): every answer comes from the
// memory-mapped snapshot, so lookups, attributes and listings do no I/O and keep no state.
//
// Inode numbers are derived from the snapshot's own indices, never allocated:
//
//   1                              the root (FUSE_ROOT_ID), snapshot directory 0
//   d + 1                          directory d   (1 .. dir_count)
//   1 + dir_count + f              file f        (dir_count + 1 .. dir_count + file_count)
//
// Directories are numbered breadth-first with the root first and files by (directory, name)
// (docs/format.md §3), so the numbers are dense and stable for a dataset version: the kernel
// may forget an inode and look it up again, and gets the same number. Nothing needs reference
// counting, so FUSE's forget is a no-op.
//
// Thread-safety: immutable after construction; every method may be called concurrently.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace stoker {
class Dataset;
namespace format {
class Snapshot;
}
}  // namespace stoker

namespace stoker::fuse {

class InodeTable {
 public:
  static constexpr uint64_t kRootInode = 1;

  // `dataset` must outlive the table. uid/gid own every inode; the dataset version's creation
  // time is every inode's mtime, ctime and atime.
  InodeTable(const Dataset& dataset, uid_t uid, gid_t gid);

  bool IsDir(uint64_t ino) const { return ino >= 1 && ino <= dirs_; }
  bool IsFile(uint64_t ino) const { return ino > dirs_ && ino <= dirs_ + files_; }
  uint64_t DirInode(uint32_t dir) const { return uint64_t{dir} + 1; }
  uint64_t FileInode(uint32_t file) const { return 1 + uint64_t{dirs_} + file; }
  // Only for inodes that pass IsDir / IsFile.
  uint32_t DirIndex(uint64_t ino) const { return static_cast<uint32_t>(ino - 1); }
  uint32_t FileIndex(uint64_t ino) const { return static_cast<uint32_t>(ino - 1 - dirs_); }
  uint64_t inode_count() const { return uint64_t{dirs_} + files_; }

  // The inode of `name` inside directory inode `parent`; nullopt if there is no such entry
  // (or `parent` is not a directory).
  std::optional<uint64_t> Lookup(uint64_t parent, std::string_view name) const;

  // Fills `st` for `ino`: directories 0555, files 0444 (read-only). False if `ino` is unknown.
  bool Attr(uint64_t ino, struct stat* st) const;

  // A directory's entries, in readdir order: ".", "..", then subdirectories, then files (each
  // by name, as the snapshot stores them). Entry k's readdir offset is k + 1.
  struct Entry {
    std::string_view name;
    uint64_t ino = 0;
    bool is_dir = false;
  };
  uint64_t EntryCount(uint64_t dir_ino) const;             // dir_ino must pass IsDir
  Entry EntryAt(uint64_t dir_ino, uint64_t k) const;       // k < EntryCount(dir_ino)

  // The dataset-relative path of an inode ("" for the root), for log lines.
  std::string Path(uint64_t ino) const;

 private:
  const format::Snapshot& snap_;
  uint32_t dirs_ = 0, files_ = 0;
  uid_t uid_;
  gid_t gid_;
  int64_t mtime_ = 0;
};

}  // namespace stoker::fuse
