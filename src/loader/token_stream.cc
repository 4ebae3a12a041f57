#include "loader/token_stream.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <numeric>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>

#include "common/crc32c.h"
#include "common/trace.h"
#include "dataset/version_view.h"
#include "format/chunk.h"

namespace stoker::loader {

Result<std::unique_ptr<TokenStream>> TokenStream::Open(std::shared_ptr<const Dataset> dataset,
                                                       const std::string& column,
                                                       std::vector<bool> selected) {
  if (!selected.empty() && selected.size() != dataset->sample_count()) {
    return Err(Status::InvalidArgument(fmt::format("a selection of {} samples for a dataset of {}",
                                                   selected.size(), dataset->sample_count())));
  }
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
  stream->element_ = c->element.value_or(format::kDefaultTokenElement);
  // A sample's files are in path order, "key.<column>" by column name. Where no optional column
  // sorts before this one, its file is the same one of every sample that has all its columns.
  const auto at = static_cast<int64_t>(c - schema.columns.data());
  const bool fixed = std::none_of(schema.columns.begin(), schema.columns.begin() + at,
                                  [](const format::Column& col) { return col.optional; });
  stream->position_ = fixed ? at : -1;
  stream->columns_ = schema.columns.size();
  stream->selected_ = std::move(selected);
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
    if (!selected_.empty() && !selected_[s.sample]) continue;  // outside the view
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

void TokenStream::KeepBuffers(size_t count) const {
  std::lock_guard lock(buffers_mu_);
  keep_buffers_ = std::max(keep_buffers_, count);
}

void TokenStream::Recycle(Tokens tokens) const {
  std::lock_guard lock(buffers_mu_);
  if (buffers_.size() < keep_buffers_ && tokens.data) buffers_.push_back(std::move(tokens));
}

TokenStream::Tokens TokenStream::Buffer(size_t bytes) const {
  Tokens tokens;
  {
    std::lock_guard lock(buffers_mu_);
    auto best = buffers_.end();
    for (auto it = buffers_.begin(); it != buffers_.end(); ++it) {
      if (it->capacity >= bytes && (best == buffers_.end() || it->capacity < best->capacity)) {
        best = it;
      }
    }
    if (best != buffers_.end()) {
      tokens = std::move(*best);
      buffers_.erase(best);
    }
  }
  if (tokens.capacity < bytes || !tokens.data) {
    tokens.data = std::make_unique_for_overwrite<std::byte[]>(bytes);
    tokens.capacity = bytes;
  }
  tokens.size = 0;
  return tokens;
}

Result<TokenStream::Tokens> TokenStream::ReadChunk(uint32_t c, uint64_t tail) const {
  trace::Span traced("read chunk", "read");
  if (trace::Enabled()) traced.set_args(fmt::format("\"chunk\": {}", c));
  STOKER_ASSIGN_OR_RETURN(const auto files, ChunkTokenFiles(c));
  uint64_t total = 0, begin = UINT64_MAX, end = 0;
  for (const TokenFile& f : files) {
    total += f.length;
    if (f.chunk != c) continue;
    begin = std::min(begin, f.offset);
    end = std::max(end, f.offset + f.length);
  }
  Tokens tokens = Buffer(total + tail * element_.size);
  tokens.size = total;
  const std::span<std::byte> out(tokens.data.get(), total);
  // Token files back to back in the chunk (a dataset of tokens alone): one read straight into
  // the output. Else one read of the span they cover (other columns' values between them come
  // along), copied out file by file.
  bool adjacent = !files.empty();
  for (size_t i = 0; i < files.size() && adjacent; ++i) {
    adjacent = files[i].chunk == c &&
               (i == 0 || files[i].offset == files[i - 1].offset + files[i - 1].length);
  }
  std::vector<std::byte> span;
  if (end > begin) {
    STOKER_ASSIGN_OR_RETURN(auto chunk, dataset_->ChunkFile(c));
    if (adjacent) {
      STOKER_RETURN_IF_ERROR(chunk->ReadAt(begin, out));
    } else {
      span.resize(end - begin);
      STOKER_RETURN_IF_ERROR(chunk->ReadAt(begin, span));
    }
  }
  uint64_t at = 0;
  for (const TokenFile& f : files) {
    const std::span<std::byte> dst(out.data() + at, f.length);
    if (f.chunk == c) {
      if (!adjacent) std::memcpy(dst.data(), span.data() + (f.offset - begin), f.length);
      STOKER_RETURN_IF_ERROR(format::CheckPayload(f.crc32c, dst, [&] {
        return format::PayloadNames{
            dataset_->FilePath(f.file),
            dataset_->storage().Describe(dataset::ViewOf(*dataset_).ChunkName(c))};
      }));
    } else {
      STOKER_RETURN_IF_ERROR(dataset_->ReadFileInto(f.file, dst));  // checks its CRC
    }
    at += f.length;
  }
  if (tail > 0) STOKER_RETURN_IF_ERROR(ReadTail(c, tail, tokens));
  return tokens;
}

Status TokenStream::ReadTail(uint32_t c, uint64_t tail, Tokens& tokens) const {
  uint64_t want = tail * element_.size;
  std::vector<std::byte> file;
  for (uint32_t next = c + 1; want > 0 && next < chunk_tokens_.size(); ++next) {
    if (chunk_tokens_[next] == 0) continue;
    STOKER_ASSIGN_OR_RETURN(const auto files, ChunkTokenFiles(next));
    for (const TokenFile& f : files) {
      if (want == 0) break;
      file.resize(f.length);
      STOKER_RETURN_IF_ERROR(dataset_->ReadFileInto(f.file, file));  // checks its CRC
      const uint64_t n = std::min<uint64_t>(want, f.length);
      std::memcpy(tokens.data.get() + tokens.size, file.data(), n);
      tokens.size += n;
      want -= n;
    }
  }
  return Status::OK();
}

}  // namespace stoker::loader

namespace stoker::loader {

struct TokenBatches::State {
  std::shared_ptr<const TokenStream> stream;
  Options options;
  std::vector<uint32_t> plan;
  std::vector<uint64_t> begins;               // the stream position of each chunk's first token
  std::vector<uint32_t> home;                 // per plan position: the chunk its block starts in
  std::vector<uint32_t> schedule;             // chunks in the order the plan first needs them
  std::vector<std::vector<uint32_t>> expire;  // per plan position: chunks last needed there
  size_t position = 0;                        // next plan position to hand out

  std::mutex mu;
  std::condition_variable cv;
  std::unordered_map<uint32_t, TokenStream::Tokens> resident;
  size_t next_read = 0;                // into schedule
  size_t released = 0;                 // chunks released so far
  size_t wanted = 0;                   // the consumer waits for schedule[< wanted]
  std::vector<size_t> schedule_index;  // chunk -> its index in schedule
  uint64_t reads = 0;
  double waited = 0;  // seconds the consumer waited for reads
  Status failed;
  bool stopping = false;
  std::vector<std::thread> readers;

  void Read() {
    trace::NameThread("stoker token reader");
    std::unique_lock lock(mu);
    while (true) {
      cv.wait(lock, [&] {
        return stopping || !failed.ok() ||
               (next_read < schedule.size() &&
                (next_read < released + options.ahead || next_read < wanted));
      });
      if (stopping || !failed.ok()) return;
      const uint32_t chunk = schedule[next_read++];
      lock.unlock();
      auto tokens = stream->ReadChunk(chunk, options.block);
      lock.lock();
      if (!tokens) {
        failed = tokens.error();
      } else {
        resident[chunk] = *std::move(tokens);
        ++reads;
      }
      cv.notify_all();
    }
  }

  // Chunk c's tokens, waiting for its read. Called with `lock` held; valid until the consumer
  // releases c (map nodes stay put when readers insert others).
  Result<const TokenStream::Tokens*> Chunk(uint32_t c, std::unique_lock<std::mutex>& lock) {
    if (auto it = resident.find(c); it != resident.end()) return &it->second;
    if (schedule_index[c] + 1 > wanted) {  // readers may go past `ahead` to reach it
      wanted = schedule_index[c] + 1;
      cv.notify_all();
    }
    const auto start = std::chrono::steady_clock::now();
    const uint64_t trace_start = trace::Enabled() ? trace::NowNs() : 0;
    cv.wait(lock, [&] { return !failed.ok() || resident.contains(c); });
    waited += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (trace_start != 0) trace::Complete("wait chunk", "wait", trace_start, trace::NowNs());
    if (!failed.ok()) return Err(failed);
    return &resident[c];
  }

  // Drops chunk c, its buffer back to the stream for the next reads. Called with the lock held.
  void Release(uint32_t c) {
    auto node = resident.extract(c);
    if (!node.empty()) stream->Recycle(std::move(node.mapped()));
    ++released;
  }
};

TokenBatches::TokenBatches(std::unique_ptr<State> state) : state_(std::move(state)) {}

Result<std::unique_ptr<TokenBatches>> TokenBatches::Start(std::shared_ptr<const TokenStream> stream,
                                                          std::vector<uint32_t> plan,
                                                          const Options& options) {
  if (options.block == 0 || options.batch == 0 || options.ahead == 0) {
    return Err(Status::InvalidArgument("block, batch and ahead must be at least 1"));
  }
  auto s = std::make_unique<State>();
  const std::vector<uint64_t>& counts = stream->chunk_tokens();
  std::vector<uint64_t> ends(counts.size());
  uint64_t total = 0;
  s->begins.resize(counts.size());
  for (size_t c = 0; c < counts.size(); ++c) {
    s->begins[c] = total;
    total += counts[c];
    ends[c] = total;
  }
  const uint64_t width = options.block + 1;
  s->home.resize(plan.size());
  s->schedule_index.assign(counts.size(), SIZE_MAX);
  std::vector<size_t> last_use(counts.size(), 0);
  for (size_t p = 0; p < plan.size(); ++p) {
    const uint64_t start = uint64_t{plan[p]} * options.block;
    if (start + width > total) {
      return Err(
          Status::InvalidArgument(fmt::format("block {} is past the stream's end", plan[p])));
    }
    // The first chunk ending after `start`: it holds the block's first token.
    const auto c = static_cast<uint32_t>(std::ranges::upper_bound(ends, start) - ends.begin());
    s->home[p] = c;
    if (s->schedule_index[c] == SIZE_MAX) {
      s->schedule_index[c] = s->schedule.size();
      s->schedule.push_back(c);
    }
    last_use[c] = p;
  }
  s->expire.resize(plan.size());
  for (uint32_t c : s->schedule) s->expire[last_use[c]].push_back(c);
  // As many buffers as a pass holds at once, so the next pass reads into them too.
  stream->KeepBuffers(options.ahead + 2);
  s->stream = std::move(stream);
  s->options = options;
  s->plan = std::move(plan);
  State* state = s.get();
  for (int i = 0; i < 2; ++i) s->readers.emplace_back([state] { state->Read(); });
  return std::unique_ptr<TokenBatches>(new TokenBatches(std::move(s)));
}

TokenBatches::~TokenBatches() {
  {
    std::lock_guard lock(state_->mu);
    state_->stopping = true;
  }
  state_->cv.notify_all();
  for (std::thread& t : state_->readers) t.join();
}

Result<uint32_t> TokenBatches::Next(std::span<std::byte> dst) {
  const size_t count =
      std::min<size_t>(state_->options.batch, state_->plan.size() - state_->position);
  std::vector<uint32_t> rows(count);
  std::iota(rows.begin(), rows.end(), 0);
  return NextRows(dst, rows);
}

Result<uint32_t> TokenBatches::NextRows(std::span<std::byte> dst, std::span<const uint32_t> rows) {
  State& s = *state_;
  const uint64_t esize = s.stream->element().size;
  const uint64_t row_bytes = (s.options.block + 1) * esize;
  const size_t count = std::min<size_t>(rows.size(), s.plan.size() - s.position);
  for (size_t j = 0; j < count; ++j) {
    if ((uint64_t{rows[j]} + 1) * row_bytes > dst.size()) {
      return Err(Status::InvalidArgument(fmt::format("row {} is outside the batch", rows[j])));
    }
  }
  std::unique_lock lock(s.mu);
  for (size_t j = 0; j < count; ++j) {
    const size_t p = s.position + j;
    const uint32_t c = s.home[p];
    STOKER_ASSIGN_OR_RETURN(const TokenStream::Tokens* tokens, s.Chunk(c, lock));
    const uint64_t local = (uint64_t{s.plan[p]} * s.options.block - s.begins[c]) * esize;
    if (local + row_bytes > tokens->size) {  // the stream changed under us: never hand on less
      return Err(Status::Corruption(
          fmt::format("chunk {} holds fewer tokens than the dataset's metadata says", c)));
    }
    std::memcpy(dst.data() + rows[j] * row_bytes, tokens->data.get() + local, row_bytes);
  }
  bool released = false;
  for (size_t p = s.position; p < s.position + count; ++p) {
    for (uint32_t c : s.expire[p]) {
      s.Release(c);
      released = true;
    }
  }
  s.position += count;
  if (released) s.cv.notify_all();  // room for the readers (waking them per batch costs more)
  return static_cast<uint32_t>(count);
}

double TokenBatches::wait_seconds() const {
  std::lock_guard lock(state_->mu);
  return state_->waited;
}

uint64_t TokenBatches::chunks_read() const {
  std::lock_guard lock(state_->mu);
  return state_->reads;
}

}  // namespace stoker::loader
