// The tokens of a column dataset's tokens column (stoker.Writer) as one stream, for LLM
// training (stoker.TokenLoader): chunk after chunk, and within a chunk the token files of the
// samples that start in it, in sample order. A loader cuts the stream into blocks of
// block_size + 1 tokens that cross document (and chunk) edges, as Megatron and LitData's
// TokensLoader do, and shuffles them chunk-wise: a block belongs to the chunk it starts in.
//
// A view (stoker's ds.subset / ds.filter) gives the samples it holds: the stream is then their
// documents alone, still in storage order.
//
// Open reads every chunk's locations once (32 bytes per file, streamed, not kept) to count the
// tokens of each chunk; ReadChunk reads one chunk's token files with one range read, each file
// CRC-checked. Thread-safe after Open (ReadChunk from several threads).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "format/columns.h"
#include "stoker/dataset.h"

namespace stoker::loader {

class TokenStream {
 public:
  // `selected`: per sample of the dataset, whether the stream holds its document; empty: all.
  static Result<std::unique_ptr<TokenStream>> Open(std::shared_ptr<const Dataset> dataset,
                                                   const std::string& column,
                                                   std::vector<bool> selected = {});

  const format::ElementType& element() const { return element_; }
  // Tokens of each chunk (their sum is the stream's length).
  const std::vector<uint64_t>& chunk_tokens() const { return chunk_tokens_; }
  // A chunk's tokens, little-endian, back to back (not zero-filled first: read straight in).
  struct Tokens {
    std::unique_ptr<std::byte[]> data;
    size_t size = 0;      // bytes
    size_t capacity = 0;  // bytes `data` holds
  };
  // Chunk c's tokens, CRC-checked (Corruption names the file and chunk), followed by up to
  // `tail` tokens of the stream after them (from the first token files of the next chunks,
  // each read whole to check its CRC): then every block that starts in c lies in the buffer.
  Result<Tokens> ReadChunk(uint32_t c, uint64_t tail = 0) const;

  // Buffers given back are read into again, up to `count` of them kept between reads (and
  // passes): fresh memory costs a page fault per 4 KiB, ~15 % of a pass over cached chunks.
  void KeepBuffers(size_t count) const;
  void Recycle(Tokens tokens) const;

 private:
  struct TokenFile {
    uint64_t file = 0;
    uint32_t chunk = 0;
    uint64_t offset = 0, length = 0;
    uint32_t crc32c = 0;
  };
  // The token files of the samples that start in chunk c, in sample order.
  Result<std::vector<TokenFile>> ChunkTokenFiles(uint32_t c) const;
  // A buffer for `bytes`: a kept one (the smallest that fits) or a new one.
  Tokens Buffer(size_t bytes) const;
  // Appends up to `tail` tokens of the stream after chunk c to `tokens`.
  Status ReadTail(uint32_t c, uint64_t tail, Tokens& tokens) const;

  std::shared_ptr<const Dataset> dataset_;
  std::string suffix_;  // "." + the column's name
  format::ElementType element_;
  int64_t position_ = -1;  // the column's file within a complete sample; -1: look it up
  uint64_t columns_ = 0;   // files of a sample holding every column
  std::vector<bool> selected_;
  std::vector<uint64_t> chunk_tokens_;
  mutable std::mutex buffers_mu_;
  mutable std::vector<Tokens> buffers_;
  mutable size_t keep_buffers_ = 0;
};

}  // namespace stoker::loader

namespace stoker::loader {

// Batches of blocks of a TokenStream in a plan's order (stoker.TokenLoader): block k is tokens
// [k * block, k * block + block + 1) of the stream. A block is copied out of the chunk it
// starts in, read with the `block` tokens that follow it (ReadChunk's tail), so a block across
// a chunk's end needs no other chunk held: the chunks held are those of the shuffle windows.
// Chunks are read by two threads in the order the plan first needs them, at most `ahead`
// beyond those released (more only when the consumer waits for one), and released after the
// plan position that needs them last. Thread-safety: Next from one consumer thread.
class TokenBatches {
 public:
  struct Options {
    uint64_t block = 2048;  // tokens per block, without the one that follows
    uint32_t batch = 8;
    uint32_t ahead = 18;  // chunks held beyond the ones released
  };
  static Result<std::unique_ptr<TokenBatches>> Start(std::shared_ptr<const TokenStream> stream,
                                                     std::vector<uint32_t> plan,
                                                     const Options& options);
  ~TokenBatches();

  // The next batch's blocks (at most options.batch), written row by row into `dst`, which
  // holds batch * (block + 1) tokens; 0 at the end of the plan.
  Result<uint32_t> Next(std::span<std::byte> dst);
  // The next rows.size() blocks (at most those left), block j written into row rows[j] of
  // `dst` (rows of block + 1 tokens): a mix fills one batch from several streams.
  Result<uint32_t> NextRows(std::span<std::byte> dst, std::span<const uint32_t> rows);
  uint64_t chunks_read() const;
  // Seconds Next/NextRows waited for chunks still being read (the consumer starved on reads).
  double wait_seconds() const;

 private:
  struct State;
  explicit TokenBatches(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace stoker::loader
