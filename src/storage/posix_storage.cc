#include "storage/posix_storage.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "common/unique_id.h"

namespace stoker::storage {
namespace {

// Retries on EINTR; any other short transfer is reported by the callers.
Status PreadFully(int fd, uint64_t offset, std::span<std::byte> dst, const std::string& name) {
  size_t done = 0;
  while (done < dst.size()) {
    const ssize_t n =
        ::pread(fd, dst.data() + done, dst.size() - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "read " + name);
    }
    if (n == 0) {
      return Status::IOError("short read of " + name + ": wanted " + std::to_string(dst.size()) +
                             " bytes at offset " + std::to_string(offset) + ", got " +
                             std::to_string(done));
    }
    done += static_cast<size_t>(n);
  }
  return Status::OK();
}

class PosixFile final : public RandomAccessFile {
 public:
  PosixFile(int fd, uint64_t size, std::string name)
      : fd_(fd), size_(size), name_(std::move(name)) {}
  ~PosixFile() override { ::close(fd_); }
  uint64_t Size() const override { return size_; }
  int NativeFd() const override { return fd_; }
  Status ReadAt(uint64_t offset, std::span<std::byte> dst) const override {
    if (offset > size_ || dst.size() > size_ - offset) {
      return Status::IOError("read past the end of " + name_ + " (" + std::to_string(size_) +
                             " bytes): offset " + std::to_string(offset) + ", length " +
                             std::to_string(dst.size()));
    }
    return PreadFully(fd_, offset, dst, name_);
  }

 private:
  const int fd_;
  const uint64_t size_;
  const std::string name_;
};

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(int fd, std::string name) : fd_(fd), name_(std::move(name)) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }
  Status Append(std::span<const std::byte> data) override {
    size_t done = 0;
    while (done < data.size()) {
      const ssize_t n = ::write(fd_, data.data() + done, data.size() - done);
      if (n < 0) {
        if (errno == EINTR) continue;
        return Status::FromErrno(errno, "write " + name_);
      }
      done += static_cast<size_t>(n);
    }
    return Status::OK();
  }
  Status Sync() override {
    if (::fdatasync(fd_) != 0) return Status::FromErrno(errno, "fsync " + name_);
    return Status::OK();
  }
  Status Close() override {
    const int fd = fd_;
    fd_ = -1;
    if (fd >= 0 && ::close(fd) != 0) return Status::FromErrno(errno, "close " + name_);
    return Status::OK();
  }

 private:
  int fd_;
  const std::string name_;
};

class MappedFile final : public FileBytes {
 public:
  MappedFile(void* base, size_t size) : base_(base), size_(size) {}
  ~MappedFile() override {
    if (size_ > 0) ::munmap(base_, size_);
  }
  std::span<const std::byte> bytes() const override {
    return {static_cast<const std::byte*>(base_), size_};
  }

 private:
  void* const base_;
  const size_t size_;
};

// Opens `full` read-only: (descriptor, size). The caller owns the descriptor.
Result<std::pair<int, uint64_t>> OpenForReading(const std::string& full) {
  const int fd = ::open(full.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Err(Status::FromErrno(errno, "open " + full));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return Err(Status::FromErrno(err, "stat " + full));
  }
  return std::pair<int, uint64_t>(fd, static_cast<uint64_t>(st.st_size));
}

class PosixStorage final : public Storage {
 public:
  explicit PosixStorage(std::string root) : root_(std::move(root)) {}

  Result<std::unique_ptr<RandomAccessFile>> OpenRead(std::string_view path) override {
    const std::string full = Describe(path);
    STOKER_ASSIGN_OR_RETURN(const auto opened, OpenForReading(full));
    return std::make_unique<PosixFile>(opened.first, opened.second, full);
  }

  Result<std::unique_ptr<WritableFile>> Create(std::string_view path) override {
    const std::string full = Describe(path);
    const int fd = ::open(full.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return Err(Status::FromErrno(errno, "create " + full));
    return std::make_unique<PosixWritableFile>(fd, full);
  }

  Result<std::shared_ptr<const FileBytes>> Map(std::string_view path) override {
    const std::string full = Describe(path);
    STOKER_ASSIGN_OR_RETURN(const auto opened, OpenForReading(full));
    const int fd = opened.first;
    const size_t size = static_cast<size_t>(opened.second);
    void* base = nullptr;
    if (size > 0) {
      // MAP_POPULATE: the snapshot is checksummed right after mapping, so fault it in at once.
      base = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
      if (base == MAP_FAILED) {
        const int err = errno;
        ::close(fd);
        return Err(Status::FromErrno(err, "mmap " + full));
      }
    }
    ::close(fd);
    return std::make_shared<MappedFile>(base, size);
  }

  Status Rename(std::string_view from, std::string_view to) override {
    const std::string a = Describe(from), b = Describe(to);
    if (::rename(a.c_str(), b.c_str()) != 0) return Status::FromErrno(errno, "rename " + a);
    return Status::OK();
  }

  // Write a private temporary file, make it durable, then link(2) it to `path`: link never
  // replaces an existing name (EEXIST), on local file systems, NFS and CephFS alike.
  Status CreateExclusive(std::string_view path, std::span<const std::byte> bytes) override {
    const std::string full = Describe(path);
    const std::string tmp = fmt::format("{}.tmp-{:016x}", full, UniqueId());
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return Status::FromErrno(errno, "create " + tmp);
    PosixWritableFile file(fd, tmp);
    Status st = file.Append(bytes);
    if (st.ok()) st = file.Sync();
    if (st.ok()) st = file.Close();
    if (st.ok() && ::link(tmp.c_str(), full.c_str()) != 0) {
      st = errno == EEXIST ? Status::AlreadyExists(full + " exists already")
                           : Status::FromErrno(errno, "link " + full);
    }
    (void)::unlink(tmp.c_str());
    if (!st.ok()) return st;
    const auto slash = path.rfind('/');
    return SyncDir(slash == std::string_view::npos ? std::string_view() : path.substr(0, slash));
  }

  Status Remove(std::string_view path) override {
    const std::string full = Describe(path);
    if (::unlink(full.c_str()) != 0) return Status::FromErrno(errno, "remove " + full);
    return Status::OK();
  }

  Status CreateDirs(std::string_view path) override {
    std::error_code ec;
    std::filesystem::create_directories(Describe(path), ec);
    if (ec) return Status::FromErrno(ec.value(), "mkdir " + Describe(path));
    return Status::OK();
  }

  Status SyncDir(std::string_view path) override { return FsyncDirectory(Describe(path)); }

  Result<std::vector<std::string>> List(std::string_view path) override {
    const std::string full = Describe(path);
    DIR* dir = ::opendir(full.c_str());
    if (dir == nullptr) return Err(Status::FromErrno(errno, "list " + full));
    std::vector<std::string> names;
    while (const dirent* e = ::readdir(dir)) {
      const std::string_view name = e->d_name;
      if (name != "." && name != "..") names.emplace_back(name);
    }
    ::closedir(dir);
    std::sort(names.begin(), names.end());
    return names;
  }

  Result<bool> Exists(std::string_view path) override {
    struct stat st;
    const std::string full = Describe(path);
    if (::stat(full.c_str(), &st) == 0) return true;
    if (errno == ENOENT) return false;
    return Err(Status::FromErrno(errno, "stat " + full));
  }

  std::string Describe(std::string_view path) const override {
    if (path.empty()) return root_;
    return root_ + "/" + std::string(path);
  }

 private:
  const std::string root_;
};

}  // namespace

namespace {

Status OpenAndFsync(const std::string& path, int flags, std::string_view what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | flags);
  if (fd < 0) return Status::FromErrno(errno, fmt::format("open {}{}", what, path));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return Status::FromErrno(err, fmt::format("fsync {}{}", what, path));
  return Status::OK();
}

}  // namespace

Status FsyncFile(const std::string& path) { return OpenAndFsync(path, O_NOFOLLOW, ""); }
Status FsyncDirectory(const std::string& path) {
  return OpenAndFsync(path, O_DIRECTORY, "directory ");
}

std::shared_ptr<Storage> NewPosixStorage(std::string root) {
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  return std::make_shared<PosixStorage>(std::move(root));
}

}  // namespace stoker::storage
