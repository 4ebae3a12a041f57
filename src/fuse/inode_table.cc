#include "fuse/inode_table.h"

#include <cstring>
#include <string>

#include <fmt/format.h>

#include "dataset/version_view.h"
#include "stoker/dataset.h"

namespace stoker::fuse {
namespace {

// st_blksize: the I/O size tools like cp and Python's io pick for their buffers. 1 MiB is also
// the largest read request the mount asks the kernel for (max_pages = 256).
constexpr blksize_t kPreferredIoSize = 1 << 20;

std::string Join(std::string_view dir, std::string_view name) {
  std::string path;
  path.reserve(dir.size() + 1 + name.size());
  if (!dir.empty()) path.append(dir).push_back('/');
  path.append(name);
  return path;
}

}  // namespace

InodeTable::InodeTable(const Dataset& dataset, uid_t uid, gid_t gid)
    : dataset_(dataset),
      files_(dataset.file_count()),
      uid_(uid),
      gid_(gid),
      mtime_(static_cast<int64_t>(dataset::ViewOf(dataset).record().created_unix_seconds)) {
  Register("", kRootInode);
}

uint64_t InodeTable::Register(std::string path, uint64_t parent) const {
  auto [it, added] = dir_inodes_.try_emplace(path, dirs_.size() + 1);
  if (added) dirs_.push_back({std::move(path), parent, nullptr});
  return it->second;
}

bool InodeTable::IsDir(uint64_t ino) const {
  std::lock_guard lock(mu_);
  return ino >= 1 && ino <= dirs_.size();
}

uint64_t InodeTable::inode_count() const {
  std::lock_guard lock(mu_);
  return dirs_.size() + files_;
}

Result<std::optional<uint64_t>> InodeTable::Lookup(uint64_t parent, std::string_view name) const {
  if (!IsDir(parent) || name.empty() || name.find('/') != std::string_view::npos) {
    return std::optional<uint64_t>();
  }
  std::string dir;
  {
    std::lock_guard lock(mu_);
    if (name == ".") return std::optional<uint64_t>(parent);
    if (name == "..") return std::optional<uint64_t>(dirs_[parent - 1].parent);
    dir = dirs_[parent - 1].path;
  }
  std::string path = Join(dir, name);
  auto file = dataset_.Find(path);
  if (file) return std::optional<uint64_t>(FileInode(*file));
  if (!file.error().IsNotFound()) return Err(file.error());
  STOKER_ASSIGN_OR_RETURN(const bool is_dir, dataset_.IsDir(path));
  if (!is_dir) return std::optional<uint64_t>();
  std::lock_guard lock(mu_);
  return std::optional<uint64_t>(Register(std::move(path), parent));
}

Result<std::shared_ptr<const InodeTable::Listing>> InodeTable::Entries(uint64_t dir_ino) const {
  std::string path;
  uint64_t parent = kRootInode;
  {
    std::lock_guard lock(mu_);
    if (dir_ino == 0 || dir_ino > dirs_.size()) {
      return Err(Status::NotFound(fmt::format("no directory with inode {}", dir_ino)));
    }
    const Dir& d = dirs_[dir_ino - 1];
    if (d.listing) return d.listing;
    path = d.path;
    parent = d.parent;
  }
  // Read without the lock (it may read segment blocks); two threads may both read it, the
  // first to finish is kept.
  STOKER_ASSIGN_OR_RETURN(auto entries, dataset_.List(path));
  auto listing = std::make_shared<Listing>();
  listing->reserve(entries.size() + 2);
  listing->push_back({".", dir_ino, true});
  listing->push_back({"..", parent, true});
  std::lock_guard lock(mu_);
  for (DirEntry& e : entries) {
    const uint64_t ino = e.is_dir ? Register(Join(path, e.name), dir_ino) : FileInode(e.index);
    listing->push_back({std::move(e.name), ino, e.is_dir});
  }
  Dir& d = dirs_[dir_ino - 1];
  if (!d.listing) d.listing = std::move(listing);
  return d.listing;
}

Status InodeTable::Attr(uint64_t ino, struct stat* st) const {
  std::memset(st, 0, sizeof(*st));
  if (IsDir(ino)) {
    STOKER_ASSIGN_OR_RETURN(auto listing, Entries(ino));
    nlink_t subdirs = 0;
    for (const Entry& e : *listing) subdirs += e.is_dir;
    st->st_mode = S_IFDIR | 0555;
    st->st_nlink = subdirs;  // 2 + subdirectories: the listing holds "." and ".." too
  } else if (IsFile(ino)) {
    const uint64_t size = dataset::ViewOf(dataset_).file(FileIndex(ino)).length;
    st->st_mode = S_IFREG | 0444;
    st->st_nlink = 1;
    st->st_size = static_cast<off_t>(size);
    st->st_blocks = static_cast<blkcnt_t>((size + 511) / 512);
  } else {
    return Status::NotFound(fmt::format("no inode {}", ino));
  }
  st->st_ino = ino;
  st->st_uid = uid_;
  st->st_gid = gid_;
  st->st_blksize = kPreferredIoSize;
  st->st_atim.tv_sec = st->st_mtim.tv_sec = st->st_ctim.tv_sec = mtime_;
  return Status::OK();
}

std::string InodeTable::Path(uint64_t ino) const {
  if (IsFile(ino)) return dataset_.FilePath(FileIndex(ino));
  std::lock_guard lock(mu_);
  if (ino >= 1 && ino <= dirs_.size()) return dirs_[ino - 1].path;
  return "<inode " + std::to_string(ino) + ">";
}

}  // namespace stoker::fuse
