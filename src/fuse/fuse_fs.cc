#define FUSE_USE_VERSION 312  // fuse_loop_cfg_*; libfuse 3.14 is what Debian 12 ships
#include "fuse/fuse_fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>

#include "common/log.h"
#include "dataset/version_view.h"
#include "fuse/inode_table.h"
#include "fuse/open_file.h"
#include "fuse/shutdown_signals.h"

namespace stoker::fuse {
namespace {

// How long the kernel may trust names, attributes and negative lookups: a dataset version is
// immutable, so "as long as it likes" (a year).
constexpr double kCacheSeconds = 365.0 * 24 * 3600;
// The largest request the kernel may send: libfuse 3.14 derives max_pages from max_write, and
// its buffers hold 256 pages, so 1 MiB is the most it can take.
constexpr unsigned kMaxRequest = 1u << 20;
// Readahead and async reads the kernel keeps in flight (its default is 12).
constexpr unsigned kMaxBackground = 64;

// fi->fh holds a heap-allocated shared_ptr to the open file. A read takes its own reference
// while it replies: the kernel sends RELEASE once the last request on the file has completed,
// which for readahead can be while fuse_reply_buf's writev is still returning on another thread
// (the bytes are copied by then, but the buffer must not go away under the call).
using Handle = std::shared_ptr<OpenFile>;
// NOLINTNEXTLINE(performance-no-int-to-ptr): libfuse gives the file system an integer to own
Handle* HandleOf(const fuse_file_info* fi) { return reinterpret_cast<Handle*>(fi->fh); }

// Everything the callbacks need, reached through fuse_req_userdata().
struct Fs {
  const Dataset& dataset;
  InodeTable inodes;
  uint64_t buffer_limit;
  // Handles not yet released: RELEASE is sent asynchronously, so a file closed just before the
  // unmount may never get one; Serve frees what is left.
  std::mutex mu;
  std::unordered_set<Handle*> open;  // guarded by mu
};

Fs& FsOf(fuse_req_t req) { return *static_cast<Fs*>(fuse_req_userdata(req)); }

void LogError(const Status& status) { log::Error("mount", status.ToString()); }

Result<fuse_entry_param> EntryOf(const Fs& fs, uint64_t ino) {
  fuse_entry_param e{};
  e.ino = ino;
  e.generation = 1;  // inode numbers are never reused within a mount
  STOKER_RETURN_IF_ERROR(fs.inodes.Attr(ino, &e.attr));
  e.attr_timeout = kCacheSeconds;
  e.entry_timeout = kCacheSeconds;
  return e;
}

// The metadata could not be read (an I/O error, or a damaged segment): logged, and EIO.
void ReplyError(fuse_req_t req, const Status& status) {
  LogError(status);
  fuse_reply_err(req, status.IsNotFound() ? ENOENT : EIO);
}

// --- Session ------------------------------------------------------------------------------

void OnInit(void* /*userdata*/, fuse_conn_info* conn) {
  conn->max_write = kMaxRequest;  // libfuse sets max_pages from this: 1 MiB reads
  conn->max_background = std::max(conn->max_background, kMaxBackground);
  conn->congestion_threshold = conn->max_background * 3 / 4;
  // The data never changes: no invalidating the page cache when attributes are refreshed.
  conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;
  if (conn->capable & FUSE_CAP_ASYNC_READ) conn->want |= FUSE_CAP_ASYNC_READ;
  if (conn->capable & FUSE_CAP_PARALLEL_DIROPS) conn->want |= FUSE_CAP_PARALLEL_DIROPS;
  // READDIRPLUS (+ _AUTO) stay as libfuse enables them: the kernel picks plain readdir or
  // readdirplus (names with attributes, saving a lookup per file) by how the listing is used.
}

// --- Names and attributes -----------------------------------------------------------------

void OnLookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  const Fs& fs = FsOf(req);
  if (!fs.inodes.IsDir(parent)) {
    fuse_reply_err(req, fs.inodes.IsFile(parent) ? ENOTDIR : ENOENT);
    return;
  }
  auto ino = fs.inodes.Lookup(parent, name);
  if (!ino) return ReplyError(req, ino.error());
  if (const std::optional<uint64_t>& found = *ino) {
    auto e = EntryOf(fs, *found);
    if (!e) return ReplyError(req, e.error());
    fuse_reply_entry(req, &*e);
    return;
  }
  // A negative entry (ino 0) with a timeout: the kernel caches "no such file" too.
  fuse_entry_param e{};
  e.entry_timeout = kCacheSeconds;
  fuse_reply_entry(req, &e);
}

void OnGetattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* /*fi*/) {
  struct stat st;
  if (Status s = FsOf(req).inodes.Attr(ino, &st); !s.ok()) return ReplyError(req, s);
  fuse_reply_attr(req, &st, kCacheSeconds);
}

void OnStatfs(fuse_req_t req, fuse_ino_t /*ino*/) {
  const Fs& fs = FsOf(req);
  struct statvfs st{};
  st.f_bsize = st.f_frsize = 4096;
  st.f_blocks = (dataset::ViewOf(fs.dataset).total_bytes() + 4095) / 4096;
  st.f_files = fs.inodes.inode_count();
  st.f_namemax = 255;
  fuse_reply_statfs(req, &st);  // nothing free: a dataset version is read-only
}

// --- Directories --------------------------------------------------------------------------

void OnOpendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  const Fs& fs = FsOf(req);
  if (!fs.inodes.IsDir(ino)) {
    fuse_reply_err(req, fs.inodes.IsFile(ino) ? ENOTDIR : ENOENT);
    return;
  }
  fi->cache_readdir = 1;  // the kernel may keep listings, and keep them across opens
  fi->keep_cache = 1;
  fuse_reply_open(req, fi);
}

// readdir and readdirplus: entry k of the directory has offset k + 1, so a listing continues at
// any offset in O(1) (the listing is read once and kept: InodeTable::Entries).
void ReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset, bool plus) {
  const Fs& fs = FsOf(req);
  if (!fs.inodes.IsDir(ino)) {
    fuse_reply_err(req, ENOTDIR);
    return;
  }
  std::vector<char> buf(size);
  size_t used = 0;
  auto listing = fs.inodes.Entries(ino);
  if (!listing) return ReplyError(req, listing.error());
  const uint64_t count = (*listing)->size();
  for (uint64_t k = offset < 0 ? 0 : static_cast<uint64_t>(offset); k < count; ++k) {
    const InodeTable::Entry& entry = (**listing)[k];
    const char* name = entry.name.c_str();
    const auto next = static_cast<off_t>(k + 1);
    size_t n;
    if (plus) {
      auto e = EntryOf(fs, entry.ino);
      if (!e) return ReplyError(req, e.error());
      n = fuse_add_direntry_plus(req, buf.data() + used, size - used, name, &*e, next);
    } else {
      struct stat st{};
      st.st_ino = entry.ino;
      st.st_mode = entry.is_dir ? S_IFDIR : S_IFREG;
      n = fuse_add_direntry(req, buf.data() + used, size - used, name, &st, next);
    }
    if (n > size - used) break;  // did not fit: the next readdir starts at offset k
    used += n;
  }
  fuse_reply_buf(req, buf.data(), used);
}

void OnReaddir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* /*fi*/) {
  ReadDir(req, ino, size, off, false);
}

void OnReaddirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* /*fi*/) {
  ReadDir(req, ino, size, off, true);
}

void OnReleasedir(fuse_req_t req, fuse_ino_t /*ino*/, fuse_file_info* /*fi*/) {
  fuse_reply_err(req, 0);
}

// --- Files --------------------------------------------------------------------------------

void OnOpen(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Fs& fs = FsOf(req);
  if (!fs.inodes.IsFile(ino)) {
    fuse_reply_err(req, fs.inodes.IsDir(ino) ? EISDIR : ENOENT);
    return;
  }
  // The mount is read-only ("ro"), so the kernel already refuses writes with EROFS; this is
  // for the case it ever does not.
  if ((fi->flags & O_ACCMODE) != O_RDONLY) {
    fuse_reply_err(req, EROFS);
    return;
  }
  auto* handle =
      new Handle(std::make_shared<OpenFile>(fs.dataset, fs.inodes.FileIndex(ino), fs.buffer_limit));
  fi->fh = reinterpret_cast<uint64_t>(handle);
  fi->keep_cache = 1;  // pages cached by earlier opens stay valid: the bytes never change
  fi->noflush = 1;     // nothing to flush on close
  {
    std::lock_guard lock(fs.mu);
    fs.open.insert(handle);
  }
  if (fuse_reply_open(req, fi) != 0) {  // interrupted: release will not come
    std::lock_guard lock(fs.mu);
    fs.open.erase(handle);
    delete handle;
  }
}

void OnRead(fuse_req_t req, fuse_ino_t /*ino*/, size_t size, off_t offset, fuse_file_info* fi) {
  const Handle file = *HandleOf(fi);
  thread_local std::vector<std::byte> scratch;  // for large files, read in place
  bool first_report = false;
  auto bytes =
      file->Read(static_cast<uint64_t>(std::max<off_t>(offset, 0)), size, scratch, &first_report);
  if (!bytes) {
    // The status names the file (its dataset path) and, for a CRC mismatch, the chunk.
    if (first_report) LogError(bytes.error());
    fuse_reply_err(req, EIO);
    return;
  }
  fuse_reply_buf(req, reinterpret_cast<const char*>(bytes->data()), bytes->size());
}

void OnRelease(fuse_req_t req, fuse_ino_t /*ino*/, fuse_file_info* fi) {
  Fs& fs = FsOf(req);
  {
    std::lock_guard lock(fs.mu);
    fs.open.erase(HandleOf(fi));
  }
  delete HandleOf(fi);
  fuse_reply_err(req, 0);
}

fuse_lowlevel_ops Operations() {
  fuse_lowlevel_ops ops{};
  ops.init = OnInit;
  ops.lookup = OnLookup;
  ops.getattr = OnGetattr;
  ops.statfs = OnStatfs;
  ops.opendir = OnOpendir;
  ops.readdir = OnReaddir;
  ops.readdirplus = OnReaddirplus;
  ops.releasedir = OnReleasedir;
  ops.open = OnOpen;
  ops.read = OnRead;
  ops.release = OnRelease;
  // forget: inode numbers are static (nothing to count); libfuse answers it for us.
  // No xattr, flush, access: ENOSYS, which the kernel remembers (access is checked by the
  // kernel from the modes, with default_permissions).
  return ops;
}

// --- Mounting -----------------------------------------------------------------------------

Status CheckFuseDevice() {
  if (access("/dev/fuse", F_OK) == 0) return Status::OK();
  return Status::Unsupported(fmt::format(
      "FUSE is not available here: /dev/fuse: {} (needs a kernel with FUSE and the fuse3 "
      "package; in a container, pass the device: --device /dev/fuse --cap-add SYS_ADMIN)",
      std::strerror(errno)));
}

Status CheckMountpoint(const std::string& mountpoint, bool allow_non_empty) {
  struct stat st;
  if (stat(mountpoint.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOTCONN) {
      return Status::InvalidArgument(
          fmt::format("mountpoint {}: {} (a FUSE mount whose process died? unmount it with "
                      "`fusermount3 -u {}`)",
                      mountpoint, std::strerror(err), mountpoint));
    }
    return Status::InvalidArgument(
        fmt::format("mountpoint {}: {}", mountpoint, std::strerror(err)));
  }
  if (!S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument(fmt::format("mountpoint {}: not a directory", mountpoint));
  }
  if (allow_non_empty) return Status::OK();
  // Something is mounted there already (a stoker mount still running?): say so, not "not empty".
  struct stat parent;
  if (::stat((mountpoint + "/..").c_str(), &parent) == 0 && parent.st_dev != st.st_dev) {
    return Status::AlreadyExists(
        fmt::format("mountpoint {} is already a mount point (another stoker mount, or another file "
                    "system); unmount it first: fusermount3 -u {}",
                    mountpoint, mountpoint));
  }
  DIR* dir = opendir(mountpoint.c_str());
  if (dir == nullptr) {
    return Status::InvalidArgument(
        fmt::format("mountpoint {}: {}", mountpoint, std::strerror(errno)));
  }
  bool empty = true;
  while (const dirent* d = readdir(dir)) {
    if (std::strcmp(d->d_name, ".") != 0 && std::strcmp(d->d_name, "..") != 0) {
      empty = false;
      break;
    }
  }
  closedir(dir);
  if (!empty) {
    return Status::InvalidArgument(fmt::format(
        "mountpoint {} is not empty (mounting would hide its contents; --allow-non-empty to "
        "do it anyway)",
        mountpoint));
  }
  return Status::OK();
}

// fuse_opt splits option lists at commas; a backslash escapes one.
std::string EscapeOption(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == ',' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

// Releases what Serve set up, in reverse order, however it returns.
struct Session {
  fuse_session* se = nullptr;
  bool signals = false, mounted = false;
  ~Session() {
    if (mounted) fuse_session_unmount(se);
    if (signals) fuse_remove_signal_handlers(se);
    if (se != nullptr) fuse_session_destroy(se);
  }
};

}  // namespace

Status Serve(const Dataset& dataset, const std::string& mountpoint, const MountOptions& options) {
  STOKER_RETURN_IF_ERROR(CheckFuseDevice());
  STOKER_RETURN_IF_ERROR(CheckMountpoint(mountpoint, options.allow_non_empty));

  // Read-only at the VFS ("ro": writes fail with EROFS before reaching us); the kernel checks
  // permissions from the modes; "fuse.stoker" in /proc/mounts.
  std::vector<std::string> args_text = {
      "stoker", "-o",
      "ro,default_permissions,subtype=stoker,fsname=" +
          EscapeOption(options.source.empty() ? "stoker" : options.source)};
  if (options.allow_other) args_text.insert(args_text.end(), {"-o", "allow_other"});
  for (const std::string& o : options.fuse_options) args_text.insert(args_text.end(), {"-o", o});
  std::vector<char*> argv;
  argv.reserve(args_text.size());
  for (std::string& a : args_text) argv.push_back(a.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());

  Fs fs{dataset, InodeTable(dataset, getuid(), getgid()), options.buffer_limit, {}, {}};
  struct FreeUnreleased {
    Fs& fs;
    ~FreeUnreleased() {
      for (Handle* h : fs.open) delete h;
    }
  } free_unreleased{fs};  // runs after the session is gone (declared before it)
  const fuse_lowlevel_ops ops = Operations();
  Session session;
  session.se = fuse_session_new(&args, &ops, sizeof(ops), &fs);
  fuse_opt_free_args(&args);
  if (session.se == nullptr) {
    return Status::InvalidArgument("bad FUSE options (libfuse says why above)");
  }
  if (fuse_set_signal_handlers(session.se) != 0) {
    return Status::Internal("cannot install the SIGINT/SIGTERM/SIGHUP handlers");
  }
  session.signals = true;
  if (fuse_session_mount(session.se, mountpoint.c_str()) != 0) {
    return Status::IOError(fmt::format(
        "cannot mount at {} (libfuse says why above; mounting needs root or the setuid "
        "fusermount3 from the fuse3 package, and --allow-other needs user_allow_other in "
        "/etc/fuse.conf)",
        mountpoint));
  }
  session.mounted = true;
  if (options.on_mounted) options.on_mounted();

  // Worker threads: up to `threads` requests at once, and as many kept when idle (creating a
  // thread per burst would cost more than the requests).
  fuse_loop_config* config = fuse_loop_cfg_create();
  fuse_loop_cfg_set_max_threads(config, std::max(1u, options.threads));
  fuse_loop_cfg_set_idle_threads(config, std::max(1u, options.threads));
  fuse_loop_cfg_set_clone_fd(config, 0);
  int rc = 0;
  {
    // SIGINT/SIGTERM/SIGHUP end the loop promptly (shutdown_signals.h): from here on they reach
    // a thread of ours, not libfuse's handlers.
    ShutdownSignals shutdown(session.se, mountpoint);
    // Returns 0 when unmounted from outside or ended by a signal.
    rc = fuse_session_loop_mt(session.se, config);
    fuse_loop_cfg_destroy(config);
    // Before the signal thread stops: its lookup may wait for an answer the ended loop will
    // never give, and the unmount aborts it.
    fuse_session_unmount(session.se);
    session.mounted = false;
  }
  if (rc < 0) return Status::IOError(fmt::format("FUSE session failed: {}", std::strerror(-rc)));
  return Status::OK();
}

}  // namespace stoker::fuse
