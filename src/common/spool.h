// A spool: an anonymous temporary file that is appended to and then read back in order. Writers
// that must not hold what they collect in memory (a pack of a billion files sorts its metadata
// on disk) put it here. The file has no name from the moment it exists (O_TMPFILE, or unlinked
// at once where a file system lacks it), so a crash or kill -9 never leaves it behind.
// Thread-safety: none; one owner.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "stoker/status.h"

namespace stoker {

// Where spools go: $TMPDIR, else /tmp.
std::string DefaultSpoolDir();

class Spool {
 public:
  static Result<Spool> Create(const std::string& dir);
  Spool(Spool&& other) noexcept;
  Spool& operator=(Spool&& other) noexcept;
  Spool(const Spool&) = delete;
  Spool& operator=(const Spool&) = delete;
  ~Spool();

  Status Append(std::string_view bytes);
  // A record: its size as a varint, then its bytes (Reader::NextRecord reads it back).
  Status AppendRecord(std::string_view record);
  // Writes out what is buffered; reads see everything appended before.
  Status Flush();
  // Flush, and give the write buffer's memory (1-2 MiB) back: for a spool written in full. A
  // sort of 10^8 files keeps ~150 sorted runs at once, which would otherwise hold ~150-300 MB
  // of empty buffers. Appending afterwards still works.
  Status Seal();
  uint64_t size() const { return size_; }

  // Reads [offset, offset + n) into *out (after Flush()); fewer bytes only at the end.
  Status Read(uint64_t offset, uint64_t n, std::string* out) const;

  // Sequential reading in blocks of `buffer_bytes`.
  class Reader {
   public:
    Reader(const Spool& spool, uint64_t buffer_bytes)
        : spool_(spool), buffer_bytes_(buffer_bytes) {}
    // Up to `n` bytes ahead without consuming them (fewer at the end); Corruption never: a
    // short view means the spool ended.
    Result<std::string_view> Peek(uint64_t n);
    void Skip(uint64_t n) { pos_ += n; }
    // The next record AppendRecord wrote; nullopt at the end. Valid until the next call.
    Result<std::optional<std::string_view>> NextRecord();
    bool at_end() const { return offset_ + pos_ >= spool_.size(); }

   private:
    const Spool& spool_;
    const uint64_t buffer_bytes_;
    std::string buffer_;
    uint64_t offset_ = 0;  // of buffer_[0] in the spool
    uint64_t pos_ = 0;     // into buffer_
  };

  // Copies the whole spool to `sink` (a function taking string_views) in blocks.
  template <typename Sink>
  Status CopyTo(Sink&& sink) const {
    std::string block;
    for (uint64_t offset = 0; offset < size_; offset += block.size()) {
      STOKER_RETURN_IF_ERROR(Read(offset, kCopyBlock, &block));
      if (block.empty()) return Status::IOError("spool ended early");
      STOKER_RETURN_IF_ERROR(sink(std::string_view(block)));
    }
    return Status::OK();
  }

 private:
  static constexpr uint64_t kCopyBlock = 1 << 20;
  static constexpr uint64_t kBufferBytes = 1 << 20;
  explicit Spool(int fd) : fd_(fd) {}
  Status ReadInto(uint64_t offset, char* dst, uint64_t n) const;  // exactly n bytes
  int fd_ = -1;
  uint64_t size_ = 0;     // appended, buffered included
  uint64_t written_ = 0;  // in the file
  std::string buffer_;
};

}  // namespace stoker
