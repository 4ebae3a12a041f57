// Directory trees as a pack source: walk and validate everything first (so a bad file fails the
// pack before any chunk is written), then read files on a small thread pool, delivering them in
// path order within a bounded read-ahead window.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "common/external_sorter.h"
#include "common/hash.h"
#include "common/spool.h"
#include "common/varint.h"
#include "dataset/source.h"
#include "format/snapshot_builder.h"

namespace stoker::dataset {
namespace {

namespace fs = std::filesystem;

struct PlannedFile {
  std::string path;      // relative
  std::string absolute;  // what to open (symbolic links resolved)
  uint64_t size;
  // What the walk saw there: the read must find the same file, unchanged (an inode number may
  // be reused at once by a file created in place of a deleted one; its change time is not).
  uint64_t device = 0, inode = 0, ctime_ns = 0;
};

// A planned file as the sorter holds it: u64 big-endian order key (0 in path order: then the
// path decides), then varint-prefixed path and absolute path, then varint size, device, inode,
// change time.
std::string EncodePlanned(uint64_t order_key, const PlannedFile& f) {
  std::string r;
  for (int b = 7; b >= 0; --b) r.push_back(static_cast<char>(order_key >> (8 * b)));
  varint::Put(&r, f.path.size());
  r.append(f.path);
  varint::Put(&r, f.absolute.size());
  r.append(f.absolute);
  varint::Put(&r, f.size);
  varint::Put(&r, f.device);
  varint::Put(&r, f.inode);
  varint::Put(&r, f.ctime_ns);
  return r;
}

// The order key and path of a record (records are this file's own: well formed).
std::pair<std::string_view, std::string_view> PlannedOrder(std::string_view r) {
  std::string_view rest = r.substr(8);
  const uint64_t n = varint::GetOwn(&rest);
  return {r.substr(0, 8), rest.substr(0, n)};
}

PlannedFile DecodePlanned(std::string_view r) {
  r.remove_prefix(8);
  PlannedFile f;
  const uint64_t path = varint::GetOwn(&r);
  f.path = r.substr(0, path);
  r.remove_prefix(path);
  const uint64_t absolute = varint::GetOwn(&r);
  f.absolute = r.substr(0, absolute);
  r.remove_prefix(absolute);
  f.size = varint::GetOwn(&r);
  f.device = varint::GetOwn(&r);
  f.inode = varint::GetOwn(&r);
  f.ctime_ns = varint::GetOwn(&r);
  return f;
}

uint64_t ChangeTimeNs(const struct stat& st) {
  return static_cast<uint64_t>(st.st_ctim.tv_sec) * 1'000'000'000 +
         static_cast<uint64_t>(st.st_ctim.tv_nsec);
}

std::string FileTypeName(mode_t mode) {
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

Result<std::string> RealPath(const std::string& path) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf) == nullptr)
    return Err(Status::FromErrno(errno, "resolve " + path));
  return std::string(buf);
}

// Depth-first walk handing each regular file to `out`, leaving out (and counting) what `exclude`
// names; errors name the offending path.
Status Walk(const std::string& root_real, const std::string& dir_abs, const std::string& dir_rel,
            const ExcludeFilter& exclude, LeftOutNames& excluded,
            const std::function<Status(const PlannedFile&)>& out) {
  std::error_code ec;
  fs::directory_iterator it(dir_abs, ec);
  if (ec) return Status::FromErrno(ec.value(), "list " + dir_abs);
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) return Status::FromErrno(ec.value(), "list " + dir_abs);
    const std::string name = it->path().filename().string();
    const std::string abs = dir_abs + "/" + name;
    const std::string rel = dir_rel.empty() ? name : dir_rel + "/" + name;
    if (exclude.Excludes(rel)) {  // before lstat: litter may be anything, even a broken link
      excluded.Add(rel);
      continue;
    }
    struct stat st;
    if (::lstat(abs.c_str(), &st) != 0) return Status::FromErrno(errno, "stat " + abs);
    std::string target = abs;
    if (S_ISLNK(st.st_mode)) {
      auto real = RealPath(abs);
      if (!real) return Status::InvalidArgument(fmt::format("dangling symlink: {}", abs));
      if (!real->starts_with(root_real + "/")) {
        return Status::InvalidArgument(
            fmt::format("symlink escapes the source tree: {} -> {}", abs, *real));
      }
      if (::stat(real->c_str(), &st) != 0) return Status::FromErrno(errno, "stat " + *real);
      if (S_ISDIR(st.st_mode)) {
        return Status::InvalidArgument(
            fmt::format("symlink to a directory (not followed, to avoid cycles): {}", abs));
      }
      target = *real;
    }
    if (S_ISDIR(st.st_mode)) {
      STOKER_RETURN_IF_ERROR(Walk(root_real, abs, rel, exclude, excluded, out));
    } else if (S_ISREG(st.st_mode)) {
      if (Status s = format::ValidateRelativePath(rel); !s.ok()) return s.WithContext(abs);
      STOKER_RETURN_IF_ERROR(
          out({rel, target, static_cast<uint64_t>(st.st_size), static_cast<uint64_t>(st.st_dev),
               static_cast<uint64_t>(st.st_ino), ChangeTimeNs(st)}));
    } else {
      return Status::InvalidArgument(
          fmt::format("{} is {}; only regular files can be packed", abs, FileTypeName(st.st_mode)));
    }
  }
  return Status::OK();
}

// A planned file's bytes, read front to back from an open descriptor: all of a small file at
// once, or a large one by the packer itself.
class FileStream final : public ItemStream {
 public:
  FileStream(int fd, std::string name) : fd_(fd), name_(std::move(name)) {}
  ~FileStream() override { ::close(fd_); }
  Status ReadExactly(std::span<std::byte> dst) override {
    while (!dst.empty()) {
      const ssize_t n = ::read(fd_, dst.data(), dst.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Status::FromErrno(errno, "read " + name_);
      if (n == 0) return Status::IOError(fmt::format("{} shrank while being packed", name_));
      dst = dst.subspan(static_cast<size_t>(n));
    }
    return Status::OK();
  }

 private:
  const int fd_;
  const std::string name_;
};

// Opens a planned file, refusing one that is no longer the regular file the walk saw: a file
// swapped for a symbolic link (which could lead out of the tree: a leak) or for a FIFO (a hang)
// or another file, or one of another size (memory never follows a size that changed after the
// plan). O_NOFOLLOW refuses a link in place of the file, O_NONBLOCK keeps a FIFO from blocking
// the open, and the device and inode must be the walk's.
Result<std::unique_ptr<FileStream>> OpenPlanned(
    const PlannedFile& f, const std::function<void(const std::string&)>& hook) {
  if (hook) hook(f.absolute);
  const int fd =
      ::open(f.absolute.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
  if (fd < 0 && errno == ELOOP) {
    return Err(Status::InvalidArgument(f.absolute + " became a symbolic link while being packed"));
  }
  if (fd < 0) return Err(Status::FromErrno(errno, "open " + f.absolute));
  auto stream = std::make_unique<FileStream>(fd, f.absolute);
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return Err(Status::InvalidArgument(f.absolute + " is no longer a regular file"));
  }
  if (static_cast<uint64_t>(st.st_dev) != f.device || static_cast<uint64_t>(st.st_ino) != f.inode ||
      ChangeTimeNs(st) != f.ctime_ns) {
    return Err(Status::InvalidArgument(
        f.absolute + " was replaced or changed while being packed (not the file the walk saw)"));
  }
  if (static_cast<uint64_t>(st.st_size) != f.size) {
    return Err(Status::InvalidArgument(f.absolute + " changed size while being packed"));
  }
  return stream;
}

// A planned file's item: its bytes, or, past kStreamedItemBytes, a stream of them.
Result<SourceItem> ReadItem(const PlannedFile& f,
                            const std::function<void(const std::string&)>& hook) {
  STOKER_ASSIGN_OR_RETURN(auto stream, OpenPlanned(f, hook));
  if (f.size > kStreamedItemBytes) return SourceItem{{}, {}, std::move(stream), f.size};
  std::vector<std::byte> bytes(static_cast<size_t>(f.size));
  STOKER_RETURN_IF_ERROR(stream->ReadExactly(bytes));
  return SourceItem{{}, std::move(bytes), nullptr, 0};
}

// What a file takes of the read-ahead window: its bytes, or, streamed, as much as the largest
// file held in memory (it holds an open file, and no more of them may wait than the window
// allows).
uint64_t WindowBytes(const PlannedFile& f) { return std::min(f.size, kStreamedItemBytes); }

// Reads the planned files (a spool in storage order) on a few threads, ahead of the packer by
// at most the read-ahead window, and delivers them in order.
class DirectorySource final : public PackSource {
 public:
  DirectorySource(Spool plan, uint64_t count, uint64_t total_bytes, DirectorySourceOptions options,
                  LeftOut left_out)
      : plan_(std::move(plan)),
        reader_(plan_, 1 << 20),
        count_(count),
        total_bytes_(total_bytes),
        options_(std::move(options)),
        left_out_(std::move(left_out)) {
    const int threads = options_.threads > 0
                            ? options_.threads
                            : static_cast<int>(std::max(2u, std::thread::hardware_concurrency()));
    for (int t = 0; t < threads; ++t) workers_.emplace_back([this] { WorkerLoop(); });
  }
  ~DirectorySource() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
  }

  Result<std::optional<SourceItem>> Next() override {
    if (delivered_ == count_) return std::optional<SourceItem>();
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return ready_.contains(delivered_); });
    auto node = ready_.extract(delivered_);
    Read& read = node.mapped();
    window_used_ -= read.window_bytes;
    consumed_ += read.size;
    ++delivered_;
    lock.unlock();
    cv_.notify_all();
    if (!read.item) return Err(read.item.error());
    return std::optional<SourceItem>(std::move(*read.item));
  }
  uint64_t total_items() const override { return count_; }
  uint64_t total_bytes() const override { return total_bytes_; }
  uint64_t consumed_bytes() const override { return consumed_; }
  bool permuted() const override { return options_.shuffle_seed.has_value(); }
  LeftOut left_out() const override { return left_out_; }

 private:
  struct Read {
    Result<SourceItem> item;
    uint64_t size = 0, window_bytes = 0;
  };

  // The next planned file, read from the plan once (under mu_).
  Result<PlannedFile*> Peek() {
    if (!next_) {
      STOKER_ASSIGN_OR_RETURN(auto record, reader_.NextRecord());
      if (!record) return Err(Status::Internal("the plan of files ended early"));
      next_ = DecodePlanned(*record);
    }
    return &*next_;
  }

  void WorkerLoop() {
    std::unique_lock lock(mu_);
    while (true) {
      // Issue the next file once it fits in the window (always issue the one being waited for).
      cv_.wait(lock, [&] {
        if (stop_) return true;
        if (issued_ == count_) return false;
        auto next = Peek();
        return !next || issued_ == delivered_ ||
               window_used_ + WindowBytes(**next) <= options_.window_bytes;
      });
      if (stop_) return;
      const size_t index = issued_++;
      auto next = Peek();
      if (!next) {
        ready_.emplace(index, Read{Err(next.error())});
        cv_.notify_all();
        continue;
      }
      PlannedFile file = std::move(**next);
      next_.reset();
      const uint64_t window = WindowBytes(file);
      window_used_ += window;
      lock.unlock();
      Read read{ReadItem(file, options_.before_open), file.size, window};
      if (read.item) read.item->path = std::move(file.path);
      lock.lock();
      ready_.emplace(index, std::move(read));
      cv_.notify_all();
    }
  }

  Spool plan_;
  Spool::Reader reader_;  // guarded by mu_
  const uint64_t count_, total_bytes_;
  const DirectorySourceOptions options_;
  const LeftOut left_out_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<PlannedFile> next_;    // guarded by mu_
  std::map<size_t, Read> ready_;       // guarded by mu_
  size_t issued_ = 0, delivered_ = 0;  // guarded by mu_
  uint64_t window_used_ = 0;           // guarded by mu_
  uint64_t consumed_ = 0;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace

Result<DirectoryLayout> ParseDirectoryLayout(std::string_view name) {
  if (name == "auto") return DirectoryLayout::kAuto;
  if (name == "tree") return DirectoryLayout::kTree;
  if (name == "webdataset") return DirectoryLayout::kWebDataset;
  return Err(
      Status::InvalidArgument(fmt::format("layout '{}': expected auto, tree or webdataset", name)));
}

Result<std::unique_ptr<PackSource>> OpenDirectorySource(const std::string& root,
                                                        const DirectorySourceOptions& options,
                                                        bool* group_samples) {
  STOKER_ASSIGN_OR_RETURN(const std::string root_real, RealPath(root));
  struct stat st;
  if (::stat(root_real.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Err(Status::InvalidArgument(fmt::format("not a directory: {}", root)));
  }
  // A dataset is not a source: packing it would pack its chunks and segments as files.
  if (IsDirectory(root_real + "/versions") &&
      (IsDirectory(root_real + "/chunks") || IsDirectory(root_real + "/segments"))) {
    return Err(Status::InvalidArgument(fmt::format(
        "{} is a stoker dataset, not a tree of files: pack the original files, or add to it "
        "with `stoker pack SRC {} --append`",
        root, root)));
  }
  // The plan — every file, in the order it will be stored — is sorted on disk: path order, or
  // a permutation seeded by shuffle_seed (files ordered by a hash of seed and sample key, then
  // path: the same layout everywhere, in bounded memory, and a WebDataset sample's files
  // together, as the packer groups only neighbours).
  ExternalSorter plan(options.sort, [](std::string_view a, std::string_view b) {
    return PlannedOrder(a) < PlannedOrder(b);
  });
  uint64_t count = 0, total_bytes = 0, cls_members = 0, in_dirs = 0, top_bytes = 0;
  LeftOut left_out;
  const ExcludeFilter exclude(options.exclude);
  STOKER_RETURN_IF_ERROR(
      Walk(root_real, root_real, "", exclude, left_out.excluded, [&](const PlannedFile& f) {
        ++count;
        total_bytes += f.size;
        if (f.path.find('/') == std::string::npos) {
          top_bytes += f.size;
        } else {
          ++in_dirs;
        }
        const std::string_view sample = format::SampleKeyOf(f.path);
        if (f.path.ends_with(".cls")) ++cls_members;  // what gives a label (packer.cc)
        const uint64_t key = options.shuffle_seed
                                 ? Hash64(fmt::format("{:016x}/{}", *options.shuffle_seed, sample))
                                 : 0;
        return plan.Add(EncodePlanned(key, f));
      }));
  const bool grouped = options.layout == DirectoryLayout::kWebDataset ||
                       (options.layout == DirectoryLayout::kAuto && cls_members > 0);
  if (group_samples != nullptr) *group_samples = grouped;
  // A tree labelled by its class directories leaves out the files beside them (a README.txt at
  // the top must not cost every sample its label); a tree without class directories packs its
  // files unlabelled.
  const bool leave_out_top = options.labels_from_dirs && !grouped && in_dirs > 0;
  STOKER_ASSIGN_OR_RETURN(Spool spool, Spool::Create(options.sort.temp_dir));
  STOKER_RETURN_IF_ERROR(plan.Merge([&](std::string_view r) {
    if (leave_out_top) {
      const std::string_view path = PlannedOrder(r).second;
      if (path.find('/') == std::string_view::npos) {
        left_out.outside_classes.Add(path);
        return Status::OK();
      }
    }
    return spool.AppendRecord(r);
  }));
  STOKER_RETURN_IF_ERROR(spool.Seal());
  if (leave_out_top) {
    count -= left_out.outside_classes.count;
    total_bytes -= top_bytes;
  }
  if (count == 0) {
    const std::string line = LeftOutLine(left_out);
    return Err(Status::InvalidArgument(
        fmt::format("{} holds no files to pack{}", root, line.empty() ? "" : " (" + line + ")")));
  }
  return std::make_unique<DirectorySource>(std::move(spool), count, total_bytes, options,
                                           std::move(left_out));
}

Status CheckPackSources(const std::vector<std::string>& sources, DirectoryLayout layout) {
  if (sources.empty()) return Status::InvalidArgument("no source given");
  if (sources.size() == 1 && IsDirectory(sources[0])) return Status::OK();
  if (layout == DirectoryLayout::kTree) {
    return Status::InvalidArgument(
        "tar shards always pack as WebDataset samples; the tree layout is for a directory");
  }
  for (const auto& s : sources) {
    if (IsDirectory(s)) {
      return Status::InvalidArgument(fmt::format(
          "give one directory, or any number of tar files, not several directories or both "
          "({} is a directory)",
          s));
    }
  }
  return Status::OK();
}

Result<std::unique_ptr<PackSource>> OpenPackSource(const std::vector<std::string>& sources,
                                                   const DirectorySourceOptions& options,
                                                   bool* group_samples) {
  STOKER_RETURN_IF_ERROR(CheckPackSources(sources, options.layout));
  *group_samples = !(sources.size() == 1 && IsDirectory(sources[0]));
  if (!*group_samples) return OpenDirectorySource(sources[0], options, group_samples);
  return OpenTarSource(sources, options.exclude);
}

}  // namespace stoker::dataset
