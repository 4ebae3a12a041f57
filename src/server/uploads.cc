#include "server/uploads.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>

#include <fmt/format.h>

#include "storage/posix_storage.h"

namespace stoker::server {
namespace {

std::string UploadName(std::string_view path, uint64_t upload) {
  return fmt::format("{}.tmp-{:016x}", path, upload);
}

// The directory that holds `path` inside `dir` (created with `create`), refusing any component
// that is a symbolic link or not a directory.
Result<std::string> ParentOf(const std::string& dir, std::string_view path, bool create) {
  std::string at = dir;
  size_t start = 0;
  for (size_t slash = path.find('/'); slash != std::string_view::npos;
       start = slash + 1, slash = path.find('/', start)) {
    at += '/';
    at += path.substr(start, slash - start);
    if (create && ::mkdir(at.c_str(), 0755) != 0 && errno != EEXIST) {
      return Err(Status::FromErrno(errno, "mkdir " + at));
    }
    struct stat st{};
    if (::lstat(at.c_str(), &st) != 0) return Err(Status::FromErrno(errno, "stat " + at));
    if (S_ISLNK(st.st_mode) || !S_ISDIR(st.st_mode)) {
      return Err(Status::PermissionDenied(std::string(path) +
                                          ": a component is a symbolic link or not a directory"));
    }
  }
  return at;
}

// Opens an upload for writing (never through a symbolic link).
Result<int> OpenUpload(const std::string& full) {
  const int fd = ::open(full.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return Err(Status::FromErrno(errno, "open " + full));
  return fd;
}

}  // namespace

Status CheckWritablePath(std::string_view path) {
  static constexpr std::array<std::string_view, 5> kDirs = {"chunks/", "segments/", "versions/",
                                                            "parts/", "gc/"};
  for (std::string_view d : kDirs) {
    if (path.starts_with(d) && path.size() > d.size()) return Status::OK();
  }
  return Status::PermissionDenied(std::string(path) +
                                  ": only chunks/, segments/, versions/, parts/ and gc/ of a "
                                  "dataset may be written");
}

// ParentOf for its checks (and, with `create`, its directories) when the path is not needed.
Status CheckParentOf(const std::string& dir, std::string_view path, bool create) {
  auto parent = ParentOf(dir, path, create);
  return parent ? Status::OK() : parent.error();
}

Status WriteUpload(const std::string& dir, std::string_view path, uint64_t upload, uint64_t offset,
                   std::string_view bytes) {
  STOKER_RETURN_IF_ERROR(CheckParentOf(dir, path, /*create=*/true));
  const std::string full = dir + '/' + UploadName(path, upload);
  STOKER_ASSIGN_OR_RETURN(const int fd, OpenUpload(full));
  Status st;
  for (size_t done = 0; done < bytes.size();) {
    const ssize_t n =
        ::pwrite(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      st = Status::FromErrno(errno, "write " + full);
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0 && st.ok()) st = Status::FromErrno(errno, "close " + full);
  return st;
}

Status FinishUpload(const std::string& dir, std::string_view path, uint64_t upload, uint64_t size,
                    net::FinishMode mode) {
  const bool create = mode != net::FinishMode::kAbort && size == 0;  // an empty file: no WRITE
  STOKER_ASSIGN_OR_RETURN(const std::string parent, ParentOf(dir, path, create));
  const std::string tmp = dir + '/' + UploadName(path, upload);
  const std::string target = dir + '/' + std::string(path);
  if (mode == net::FinishMode::kAbort) {
    if (::unlink(tmp.c_str()) != 0 && errno != ENOENT)
      return Status::FromErrno(errno, "remove " + tmp);
    return Status::OK();
  }
  if (create) {
    STOKER_ASSIGN_OR_RETURN(const int fd, OpenUpload(tmp));
    ::close(fd);
  }
  struct stat st{};
  if (::lstat(tmp.c_str(), &st) != 0) {
    struct stat done{};
    if (errno == ENOENT && ::lstat(target.c_str(), &done) == 0 && S_ISREG(done.st_mode) &&
        static_cast<uint64_t>(done.st_size) == size) {
      // Finished already (this is a retry): the target is there.
      return mode == net::FinishMode::kExclusive ? Status::AlreadyExists(target + " exists already")
                                                 : Status::OK();
    }
    return Status::NotFound(fmt::format("{}: no upload {:016x} to finish", path, upload));
  }
  if (!S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) != size) {
    return Status::InvalidArgument(fmt::format("{}: upload of {} bytes holds {}", path, size,
                                               static_cast<uint64_t>(st.st_size)));
  }
  STOKER_RETURN_IF_ERROR(storage::FsyncFile(tmp));
  if (mode == net::FinishMode::kExclusive) {
    const int rc = ::link(tmp.c_str(), target.c_str());
    const int err = errno;
    (void)::unlink(tmp.c_str());
    if (rc != 0) {
      return err == EEXIST ? Status::AlreadyExists(target + " exists already")
                           : Status::FromErrno(err, "link " + target);
    }
  } else if (::rename(tmp.c_str(), target.c_str()) != 0) {
    return Status::FromErrno(errno, "rename " + tmp);
  }
  return storage::FsyncDirectory(parent);
}

Status RemoveFile(const std::string& dir, std::string_view path) {
  STOKER_RETURN_IF_ERROR(CheckParentOf(dir, path, /*create=*/false));
  const std::string target = dir + '/' + std::string(path);
  if (::unlink(target.c_str()) != 0) return Status::FromErrno(errno, "remove " + target);
  return Status::OK();
}

Status RenameFile(const std::string& dir, std::string_view from, std::string_view to) {
  STOKER_RETURN_IF_ERROR(CheckParentOf(dir, from, /*create=*/false));
  STOKER_ASSIGN_OR_RETURN(const std::string to_parent, ParentOf(dir, to, /*create=*/true));
  const std::string source = dir + '/' + std::string(from);
  if (::rename(source.c_str(), (dir + '/' + std::string(to)).c_str()) != 0) {
    return Status::FromErrno(errno, "rename " + source);
  }
  return storage::FsyncDirectory(to_parent);
}

}  // namespace stoker::server
