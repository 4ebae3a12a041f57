#include "node/chunk_fill.h"

#include <algorithm>
#include <future>
#include <utility>

namespace stoker::node {

ChunkFill::ChunkFill(CachedChunk& out, const format::ChunkInfo& info, std::string name)
    : out_(out), info_(info), name_(std::move(name)) {}

bool ChunkFill::done() const { return verified_ == info_.file_size; }

Status ChunkFill::From(const ReadFn& source, const std::string& source_name, uint64_t piece) {
  const std::span<std::byte> file = out_.writable();
  const uint64_t size = info_.file_size;
  if (file.size() != size) {
    return Status::Internal("chunk " + name_ + ": the cache's buffer does not fit the chunk");
  }
  if (!check_) {
    // The header and the tail first: they describe (and checksum) everything else.
    const uint64_t tail = format::ChunkStreamCheck::TailBytes(info_);
    if (size < format::kChunkHeaderSize || tail > size - format::kChunkHeaderSize) {
      return Status::Corruption("chunk " + name_ + ": the metadata's sizes do not add up");
    }
    const auto header = file.first(format::kChunkHeaderSize);
    STOKER_RETURN_IF_ERROR(source(0, header));
    STOKER_RETURN_IF_ERROR(source(size - tail, file.last(tail)));
    STOKER_ASSIGN_OR_RETURN(
        auto check, format::ChunkStreamCheck::Begin(header, file.last(tail), info_, source_name));
    check_.emplace(std::move(check));
    out_.SetVerifiedTail(size - tail);
    verified_ = format::kChunkHeaderSize;
    out_.SetVerified(verified_);
  }
  const uint64_t data_end = size - format::ChunkStreamCheck::TailBytes(info_);
  piece = std::max<uint64_t>(piece, 1);
  // Two pieces in flight: the next is asked for before this one is checked, so the transfer
  // is not one round trip (and one wait of the source's own fill) after another.
  auto ask = [&source, file, data_end, piece](uint64_t at) {
    const uint64_t n = std::min(piece, data_end - at);
    return std::async(std::launch::async, [&source, file, at, n] {
      return n == 0 ? Status::OK() : source(at, file.subspan(at, n));
    });
  };
  uint64_t present = verified_;
  std::future<Status> arriving = ask(present);
  while (!done()) {
    const uint64_t n = std::min(piece, data_end - present);
    const Status arrived = arriving.get();
    if (present + n < data_end) arriving = ask(present + n);
    STOKER_RETURN_IF_ERROR(arrived);  // (a piece still in flight is waited for on return)
    present += n;
    // The whole file once the data is in (the tail came first).
    const uint64_t have = present == data_end ? size : present;
    STOKER_ASSIGN_OR_RETURN(const uint64_t now, check_->Advance(file, have));
    verified_ = now;
    out_.SetVerified(verified_);
  }
  return Status::OK();
}

}  // namespace stoker::node
