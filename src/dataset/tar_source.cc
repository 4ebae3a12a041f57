// Tar shards (WebDataset layout) as a pack source, read with libarchive so every tar dialect
// (ustar, pax, GNU long names) and compression it knows works.
#include <archive.h>
#include <archive_entry.h>

#include <filesystem>

#include <fmt/format.h>

#include "dataset/source.h"
#include "format/snapshot_builder.h"

namespace stoker::dataset {
namespace {

std::string MemberTypeName(mode_t type) {
  switch (type) {
    case AE_IFLNK:
      return "a symlink";
    case AE_IFCHR:
      return "a character device";
    case AE_IFBLK:
      return "a block device";
    case AE_IFIFO:
      return "a FIFO";
    case AE_IFSOCK:
      return "a socket";
    default:
      return "not a regular file";
  }
}

class TarSource final : public PackSource {
 public:
  // The data of the member just read, straight from the archive.
  class MemberStream final : public ItemStream {
   public:
    MemberStream(TarSource& source, std::string name) : source_(source), name_(std::move(name)) {}
    Status ReadExactly(std::span<std::byte> dst) override {
      while (!dst.empty()) {
        const la_ssize_t n = archive_read_data(source_.archive_, dst.data(), dst.size());
        if (n < 0) return source_.ArchiveError("read member " + name_ + " of");
        if (n == 0) {
          return Status::Corruption(
              fmt::format("{}: member {} is truncated", source_.current_, name_));
        }
        dst = dst.subspan(static_cast<size_t>(n));
      }
      return Status::OK();
    }

   private:
    TarSource& source_;
    const std::string name_;
  };

  TarSource(std::vector<std::string> paths, uint64_t total_bytes, ExcludeFilter exclude)
      : paths_(std::move(paths)), total_bytes_(total_bytes), exclude_(std::move(exclude)) {}
  ~TarSource() override { CloseCurrent(); }

  Result<std::optional<SourceItem>> Next() override {
    while (true) {
      if (archive_ == nullptr) {
        if (next_shard_ == paths_.size()) return std::optional<SourceItem>();
        STOKER_RETURN_IF_ERROR(OpenShard(paths_[next_shard_++]));
      }
      archive_entry* entry = nullptr;
      const int rc = archive_read_next_header(archive_, &entry);
      if (rc == ARCHIVE_EOF) {
        finished_bytes_ += archive_filter_bytes(archive_, -1);
        CloseCurrent();
        continue;
      }
      if (rc < ARCHIVE_WARN) return Err(ArchiveError("read"));
      const char* raw_name = archive_entry_pathname(entry);
      const std::string name = raw_name ? raw_name : "";
      const mode_t type = archive_entry_filetype(entry);
      if (type == AE_IFDIR) continue;
      if (archive_entry_hardlink(entry) != nullptr) {
        return Err(Status::InvalidArgument(fmt::format(
            "{}: member {} is a hard link; only regular files can be packed", current_, name)));
      }
      if (type != AE_IFREG) {
        return Err(Status::InvalidArgument(
            fmt::format("{}: member {} is {}; only regular files can be packed", current_, name,
                        MemberTypeName(type))));
      }
      std::string path = name;
      while (path.starts_with("./")) path.erase(0, 2);  // "tar -C dir ." writes ./ prefixes
      if (path.starts_with('/')) {
        return Err(Status::InvalidArgument(
            fmt::format("{}: member has an absolute name: {}", current_, name)));
      }
      if (Status s = format::ValidateRelativePath(path); !s.ok()) {
        return Err(Status::InvalidArgument(
            fmt::format("{}: unsafe member name {}: {}", current_, name, s.message())));
      }
      if (exclude_.Excludes(path)) {
        left_out_.excluded.Add(path);
        continue;  // libarchive skips the member's data at the next header
      }
      const int64_t size = archive_entry_size(entry);
      if (size < 0) {
        return Err(Status::InvalidArgument(
            fmt::format("{}: member {} has an unsupported size", current_, name)));
      }
      // A large member is streamed: memory never follows a size the archive merely declares.
      auto stream = std::make_unique<MemberStream>(*this, name);
      if (static_cast<uint64_t>(size) > kStreamedItemBytes) {
        return std::optional<SourceItem>(
            SourceItem{std::move(path), {}, std::move(stream), static_cast<uint64_t>(size)});
      }
      // Smaller ones are held in memory, grown as their bytes arrive (a 100-byte .tar.gz may
      // declare a 64 MiB member): what is allocated is what the archive really holds.
      SourceItem item{std::move(path), {}, nullptr, 0};
      constexpr uint64_t kPiece = 1 << 20;
      for (uint64_t done = 0; done < static_cast<uint64_t>(size);) {
        const uint64_t n = std::min<uint64_t>(kPiece, static_cast<uint64_t>(size) - done);
        item.bytes.resize(static_cast<size_t>(done + n));
        STOKER_RETURN_IF_ERROR(stream->ReadExactly(std::span(item.bytes).subspan(done)));
        done += n;
      }
      return std::optional<SourceItem>(std::move(item));
    }
  }
  uint64_t total_items() const override { return 0; }
  LeftOut left_out() const override { return left_out_; }
  uint64_t total_bytes() const override { return total_bytes_; }
  uint64_t consumed_bytes() const override {
    return finished_bytes_ +
           (archive_ ? static_cast<uint64_t>(archive_filter_bytes(archive_, -1)) : 0);
  }

 private:
  Status OpenShard(const std::string& path) {
    archive_ = archive_read_new();
    archive_read_support_filter_all(archive_);
    archive_read_support_format_tar(archive_);
    archive_read_support_format_gnutar(archive_);
    current_ = path;
    if (archive_read_open_filename(archive_, path.c_str(), 1 << 20) != ARCHIVE_OK) {
      Status s = ArchiveError("open");
      CloseCurrent();
      return s;
    }
    return Status::OK();
  }
  Status ArchiveError(const std::string& what) const {
    const char* msg = archive_error_string(archive_);
    const int err = archive_errno(archive_);
    std::string text = fmt::format("{} {}: {}", what, current_, msg ? msg : "unknown error");
    if (err == ENOENT) return Status::NotFound(text);
    return Status::InvalidArgument(text);
  }
  void CloseCurrent() {
    if (archive_ != nullptr) archive_read_free(archive_);
    archive_ = nullptr;
  }

  const std::vector<std::string> paths_;
  const uint64_t total_bytes_;
  size_t next_shard_ = 0;
  archive* archive_ = nullptr;
  std::string current_;
  uint64_t finished_bytes_ = 0;
  const ExcludeFilter exclude_;
  LeftOut left_out_;
};

}  // namespace

Result<std::unique_ptr<PackSource>> OpenTarSource(std::vector<std::string> tar_paths,
                                                  std::vector<std::string> exclude) {
  uint64_t total = 0;
  for (const auto& p : tar_paths) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(p, ec);
    if (ec) return Err(Status::FromErrno(ec.value(), "stat " + p));
    total += size;
  }
  return std::make_unique<TarSource>(std::move(tar_paths), total,
                                     ExcludeFilter(std::move(exclude)));
}

}  // namespace stoker::dataset
