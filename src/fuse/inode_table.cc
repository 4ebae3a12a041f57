#include "fuse/inode_table.h"

#include <cstring>
#include <string>

#include "format/snapshot.h"
#include "stoker/dataset.h"

namespace stoker::fuse {
namespace {

// st_blksize: the I/O size tools like cp and Python's io pick for their buffers. 1 MiB is also
// the largest read request the mount asks the kernel for (max_pages = 256).
constexpr blksize_t kPreferredIoSize = 1 << 20;

}  // namespace

InodeTable::InodeTable(const Dataset& dataset, uid_t uid, gid_t gid)
    : snap_(dataset.snapshot()),
      dirs_(snap_.dir_count()),
      files_(snap_.file_count()),
      uid_(uid),
      gid_(gid),
      mtime_(static_cast<int64_t>(snap_.created_unix_seconds())) {}

std::optional<uint64_t> InodeTable::Lookup(uint64_t parent, std::string_view name) const {
  if (!IsDir(parent) || name.empty() || name.find('/') != std::string_view::npos) {
    return std::nullopt;
  }
  if (name == ".") return parent;
  if (name == "..") {
    const uint32_t up = snap_.dir(DirIndex(parent)).parent;
    return up == format::kNoParent ? kRootInode : DirInode(up);
  }
  // The snapshot's path hash tables: two O(1) probes, no scan of the directory.
  const std::string_view dir_path = snap_.dir_path(DirIndex(parent));
  std::string path;
  path.reserve(dir_path.size() + 1 + name.size());
  if (!dir_path.empty()) path.append(dir_path).push_back('/');
  path.append(name);
  if (auto f = snap_.FindFile(path)) return FileInode(*f);
  if (auto d = snap_.FindDir(path)) return DirInode(*d);
  return std::nullopt;
}

bool InodeTable::Attr(uint64_t ino, struct stat* st) const {
  std::memset(st, 0, sizeof(*st));
  if (IsDir(ino)) {
    st->st_mode = S_IFDIR | 0555;
    st->st_nlink = 2 + snap_.dir(DirIndex(ino)).child_count;  // ".", its entry, children's ".."
  } else if (IsFile(ino)) {
    const uint64_t size = snap_.file(FileIndex(ino)).length;
    st->st_mode = S_IFREG | 0444;
    st->st_nlink = 1;
    st->st_size = static_cast<off_t>(size);
    st->st_blocks = static_cast<blkcnt_t>((size + 511) / 512);
  } else {
    return false;
  }
  st->st_ino = ino;
  st->st_uid = uid_;
  st->st_gid = gid_;
  st->st_blksize = kPreferredIoSize;
  st->st_atim.tv_sec = st->st_mtim.tv_sec = st->st_ctim.tv_sec = mtime_;
  return true;
}

uint64_t InodeTable::EntryCount(uint64_t dir_ino) const {
  const format::DirRecord r = snap_.dir(DirIndex(dir_ino));
  return 2 + uint64_t{r.child_count} + r.file_count;
}

InodeTable::Entry InodeTable::EntryAt(uint64_t dir_ino, uint64_t k) const {
  const format::DirRecord r = snap_.dir(DirIndex(dir_ino));
  if (k == 0) return {".", dir_ino, true};
  if (k == 1) return {"..", r.parent == format::kNoParent ? kRootInode : DirInode(r.parent), true};
  k -= 2;
  if (k < r.child_count) {
    const auto d = static_cast<uint32_t>(r.first_child + k);
    return {snap_.dir_name(d), DirInode(d), true};
  }
  const auto f = static_cast<uint32_t>(r.first_file + (k - r.child_count));
  return {snap_.file_name(f), FileInode(f), false};
}

std::string InodeTable::Path(uint64_t ino) const {
  if (IsDir(ino)) return std::string(snap_.dir_path(DirIndex(ino)));
  if (IsFile(ino)) return snap_.FilePath(FileIndex(ino));
  return "<inode " + std::to_string(ino) + ">";
}

}  // namespace stoker::fuse
