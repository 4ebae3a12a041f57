#include "loader/token_stream.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "common/crc32c.h"
#include "dataset/version_view.h"

namespace stoker::loader {

Result<std::unique_ptr<TokenStream>> TokenStream::Open(std::shared_ptr<const Dataset> dataset,
                                                       const std::string& column) {
  const dataset::VersionView& view = dataset::ViewOf(*dataset);
  const format::Schema& schema = view.columns();
  const format::Column* c = schema.Find(column);
  if (c == nullptr || c->type != format::ColumnType::kTokens) {
    std::string tokens;
    for (const auto& col : schema.columns) {
      if (col.type == format::ColumnType::kTokens)
        tokens += (tokens.empty() ? "" : ", ") + col.name;
    }
    return Err(Status::InvalidArgument(
        fmt::format("'{}' is not a tokens column of {} (its tokens columns: {})", column,
                    dataset->storage().Describe(""), tokens.empty() ? "none" : tokens)));
  }
  std::unique_ptr<TokenStream> stream(new TokenStream());
  stream->dataset_ = std::move(dataset);
  stream->suffix_ = "." + column;
  stream->element_ = *c->element;
  // A sample's files are in path order, "key.<column>" by column name. Where no optional column
  // sorts before this one, its file is the same one of every sample that has all its columns.
  const auto at = static_cast<int64_t>(c - schema.columns.data());
  const bool fixed = std::none_of(schema.columns.begin(), schema.columns.begin() + at,
                                  [](const format::Column& col) { return col.optional; });
  stream->position_ = fixed ? at : -1;
  stream->columns_ = schema.columns.size();
  stream->chunk_tokens_.resize(view.chunk_count());
  for (uint32_t chunk = 0; chunk < view.chunk_count(); ++chunk) {
    STOKER_ASSIGN_OR_RETURN(const auto files, stream->ChunkTokenFiles(chunk));
    uint64_t bytes = 0;
    for (const TokenFile& f : files) bytes += f.length;
    stream->chunk_tokens_[chunk] = bytes / stream->element_.size;
  }
  return stream;
}

Result<std::vector<TokenStream::TokenFile>> TokenStream::ChunkTokenFiles(uint32_t c) const {
  const dataset::VersionView& view = dataset::ViewOf(*dataset_);
  std::vector<std::pair<uint64_t, dataset::FileLocation>> files;
  std::vector<dataset::SampleRef> samples;
  STOKER_RETURN_IF_ERROR(view.ReadChunk(c, &files, &samples));
  std::ranges::sort(files, {}, &std::pair<uint64_t, dataset::FileLocation>::first);
  std::vector<TokenFile> out;
  out.reserve(samples.size());
  for (const dataset::SampleRef& s : samples) {
    std::optional<uint64_t> token_file;
    if (position_ >= 0 && s.count == columns_) {
      token_file = s.first_file + static_cast<uint64_t>(position_);
    } else {
      // A sample lacking some optional column: find its file by name (or it has none).
      for (uint64_t f = s.first_file; f < s.first_file + s.count; ++f) {
        STOKER_ASSIGN_OR_RETURN(const std::string path, dataset_->Path(f));
        if (path.ends_with(suffix_)) token_file = f;
      }
      if (!token_file) continue;  // an optional tokens column this sample lacks
    }
    TokenFile t;
    t.file = *token_file;
    auto it = std::ranges::lower_bound(files, t.file, {},
                                       &std::pair<uint64_t, dataset::FileLocation>::first);
    if (it != files.end() && it->first == t.file) {
      t.chunk = c;
      t.offset = it->second.offset;
      t.length = it->second.length;
      t.crc32c = it->second.crc32c;
    } else {  // the sample's chunk filled before its token file: it lies in the next one
      STOKER_ASSIGN_OR_RETURN(const FileInfo info, dataset_->Stat(t.file));
      t.chunk = info.chunk;
      t.offset = info.offset;
      t.length = info.size;
      t.crc32c = info.crc32c;
    }
    if (t.length % element_.size != 0) {
      return Err(
          Status::Corruption(fmt::format("{}: {} bytes is not a whole number of {} tokens",
                                         dataset_->FilePath(t.file), t.length, element_.Name())));
    }
    out.push_back(t);
  }
  return out;
}

Result<std::vector<std::byte>> TokenStream::ReadChunk(uint32_t c) const {
  STOKER_ASSIGN_OR_RETURN(const auto files, ChunkTokenFiles(c));
  uint64_t total = 0, begin = UINT64_MAX, end = 0;
  for (const TokenFile& f : files) {
    total += f.length;
    if (f.chunk != c) continue;
    begin = std::min(begin, f.offset);
    end = std::max(end, f.offset + f.length);
  }
  std::vector<std::byte> out(total);
  // One read of the span the chunk's token files cover (other columns' values between them
  // come along; a dataset of tokens alone has none).
  std::vector<std::byte> span;
  if (end > begin) {
    STOKER_ASSIGN_OR_RETURN(auto chunk, dataset_->ChunkFile(c));
    span.resize(end - begin);
    STOKER_RETURN_IF_ERROR(chunk->ReadAt(begin, span));
  }
  uint64_t at = 0;
  for (const TokenFile& f : files) {
    const std::span<std::byte> dst(out.data() + at, f.length);
    if (f.chunk == c) {
      std::memcpy(dst.data(), span.data() + (f.offset - begin), f.length);
      if (crc32c::Value(dst) != f.crc32c) {
        return Err(
            Status::Corruption(fmt::format("{}: CRC32C mismatch in {}", dataset_->FilePath(f.file),
                                           dataset::ViewOf(*dataset_).ChunkName(c))));
      }
    } else {
      STOKER_RETURN_IF_ERROR(dataset_->ReadFileInto(f.file, dst));  // checks its CRC
    }
    at += f.length;
  }
  return out;
}

}  // namespace stoker::loader
