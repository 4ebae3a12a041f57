#include "dataset/row_stream.h"

#include <poll.h>
#include <unistd.h>

#include <array>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "dataset/addition.h"
#include "format/column_values.h"

namespace stoker::dataset {
namespace {

static_assert(std::endian::native == std::endian::little, "the stream's numbers are read as-is");

using format::Column;
using format::ColumnType;

constexpr std::string_view kMagic = "STKROWS1";
constexpr uint8_t kRowTag = 1, kEndTag = 0;
constexpr uint32_t kNoValue = 0xFFFFFFFF;
constexpr size_t kBufferBytes = size_t{1} << 20;

// Buffered reads of exact sizes from a file descriptor, giving up when asked to stop.
class FdReader {
 public:
  FdReader(int fd, const std::function<bool()>& stop_requested)
      : fd_(fd), stop_requested_(stop_requested), buffer_(kBufferBytes) {}

  // Fills `out` whole. Ok(false): the stream ended before its first byte; an error: it ended
  // inside, the read failed, or a stop was asked for.
  Result<bool> Read(std::span<std::byte> out) {
    size_t done = 0;
    while (done < out.size()) {
      if (begin_ == end_) {
        STOKER_ASSIGN_OR_RETURN(const size_t n, Fill());
        if (n == 0) {
          if (done == 0) return false;
          return Err(Status::InvalidArgument("the row stream is cut short (inside a value)"));
        }
      }
      const size_t take = std::min(out.size() - done, end_ - begin_);
      std::memcpy(out.data() + done, buffer_.data() + begin_, take);
      begin_ += take;
      done += take;
    }
    return true;
  }

  // Like Read, but the end of the stream is an error too.
  Status ReadAll(std::span<std::byte> out) {
    STOKER_ASSIGN_OR_RETURN(const bool got, Read(out));
    return got ? Status::OK()
               : Status::InvalidArgument("the row stream is cut short (no end marker)");
  }

  // `length` bytes, the vector growing as they arrive.
  Status ReadValue(uint32_t length, std::vector<std::byte>& out) {
    out.clear();
    while (out.size() < length) {
      // At most a buffer more than has arrived; the vector still grows geometrically.
      const size_t piece = std::min<size_t>(length - out.size(), kBufferBytes);
      const size_t at = out.size();
      out.resize(at + piece);
      STOKER_RETURN_IF_ERROR(ReadAll(std::span(out).subspan(at)));
    }
    return Status::OK();
  }

 private:
  // Reads what is there into the buffer (0: the end), waiting in short polls so that a stop is
  // seen even when its signal went to another thread.
  Result<size_t> Fill() {
    for (;;) {
      if (stop_requested_ && stop_requested_()) {
        return Err(Status::Cancelled("stopped while reading the row stream"));
      }
      pollfd p{fd_, POLLIN, 0};
      const int ready = ::poll(&p, 1, kPollMs);
      if (ready < 0 && errno != EINTR) {
        return Err(
            Status::IOError(fmt::format("waiting for the row stream: {}", std::strerror(errno))));
      }
      if (ready <= 0) continue;
      const ssize_t n = ::read(fd_, buffer_.data(), buffer_.size());
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n < 0) {
        return Err(
            Status::IOError(fmt::format("reading the row stream: {}", std::strerror(errno))));
      }
      begin_ = 0;
      end_ = static_cast<size_t>(n);
      return end_;
    }
  }

  static constexpr int kPollMs = 200;
  int fd_;
  const std::function<bool()>& stop_requested_;
  std::vector<std::byte> buffer_;
  size_t begin_ = 0, end_ = 0;
};

template <typename T>
T Load(const std::vector<std::byte>& bytes) {
  T v;
  std::memcpy(&v, bytes.data(), sizeof v);
  return v;
}

std::vector<std::byte> ToBytes(std::string_view s) {
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  return {p, p + s.size()};
}

// One value as stoker.Writer stores it (docs/format.md, column values), or why it cannot be.
// An int or float value's 8 bytes were checked when it was read.
Result<std::vector<std::byte>> Encode(const Column& column, bool is_label,
                                      std::vector<std::byte> raw) {
  switch (column.type) {
    case ColumnType::kInt: {
      const auto v = Load<int64_t>(raw);
      if (is_label && (v < 0 || v > kMaxClsLabel)) {
        return Err(Status::InvalidArgument(
            fmt::format("label {} is outside 0 .. {} (the label column's values are classes)", v,
                        kMaxClsLabel)));
      }
      return ToBytes(format::IntText(v));
    }
    case ColumnType::kFloat: {
      const auto v = Load<double>(raw);
      if (!std::isfinite(v) && !column.allow_nan) {
        return Err(Status::InvalidArgument(
            fmt::format("{} is not allowed (type 'float:nan' allows NaN and infinities)",
                        format::FloatText(v))));
      }
      return ToBytes(format::FloatText(v));
    }
    case ColumnType::kJpeg:
    case ColumnType::kPng: {
      const std::string_view magic = format::ImageSignature(column.type);
      if (raw.size() < magic.size() || std::memcmp(raw.data(), magic.data(), magic.size()) != 0) {
        return Err(Status::InvalidArgument(fmt::format("not a {} (its signature is missing)",
                                                       format::ColumnTypeName(column.type))));
      }
      return raw;
    }
    case ColumnType::kNdarray: {
      if (!column.element) {  // ParseRowColumns refuses such columns
        return Err(Status::InvalidArgument("an ndarray column without its element type"));
      }
      const format::ElementType element = *column.element;
      if (raw.size() % element.size != 0) {
        return Err(Status::InvalidArgument(
            fmt::format("{} bytes, not a whole number of {}", raw.size(), element.Name())));
      }
      const uint64_t count = raw.size() / element.size;
      std::vector<uint64_t> shape = column.shape;
      if (shape.empty()) shape = {count};
      uint64_t want = 1;
      for (const uint64_t d : shape) want *= d;
      if (want != count) {
        return Err(Status::InvalidArgument(fmt::format(
            "{} elements, the column's shape {} holds {}", count, format::ShapeText(shape), want)));
      }
      const std::string header = format::NpyHeader(element, shape);
      std::vector<std::byte> out(header.size() + raw.size());
      std::memcpy(out.data(), header.data(), header.size());
      if (!raw.empty()) std::memcpy(out.data() + header.size(), raw.data(), raw.size());
      return out;
    }
    case ColumnType::kTokens: {
      const format::ElementType element = column.element.value_or(format::kDefaultTokenElement);
      if (raw.size() % element.size != 0) {
        return Err(Status::InvalidArgument(
            fmt::format("{} bytes, not a whole number of {}", raw.size(), element.Name())));
      }
      return raw;
    }
    case ColumnType::kJson: {
      const auto* text = reinterpret_cast<const char*>(raw.data());
      if (!nlohmann::json::accept(text, text + raw.size())) {
        return Err(Status::InvalidArgument("not a JSON document"));
      }
      return raw;
    }
    case ColumnType::kBytes:
    case ColumnType::kStr:
      return raw;
  }
  return Err(Status::InvalidArgument("unknown column type"));
}

}  // namespace

Result<std::vector<Column>> ParseRowColumns(const std::vector<std::string>& flags) {
  std::vector<Column> columns;
  for (const std::string& flag : flags) {
    const size_t eq = flag.find('=');
    if (eq == std::string::npos) {
      return Err(Status::InvalidArgument(
          fmt::format("--columns {}: give NAME=TYPE, e.g. image=jpeg", flag)));
    }
    STOKER_ASSIGN_OR_RETURN(Column column,
                            format::ParseColumn(flag.substr(0, eq), flag.substr(eq + 1)));
    if (column.type == ColumnType::kNdarray && !column.element) {
      return Err(Status::InvalidArgument(fmt::format(
          "--columns {}: the row stream needs the element type (e.g. ndarray:float32)", flag)));
    }
    columns.push_back(std::move(column));
  }
  if (columns.empty()) {
    return Err(
        Status::InvalidArgument("row stream input needs its columns: --columns NAME=TYPE "
                                "for each, in the stream's order"));
  }
  return columns;
}

Result<uint64_t> PackRowStream(const RowStreamOptions& options, StreamPack& pack) {
  FdReader in(options.fd, options.stop_requested);
  std::array<std::byte, kMagic.size()> magic;
  STOKER_ASSIGN_OR_RETURN(const bool any, in.Read(magic));
  if (!any || std::memcmp(magic.data(), kMagic.data(), kMagic.size()) != 0) {
    return Err(
        Status::InvalidArgument("the input is no row stream (it does not start with STKROWS1)"));
  }
  for (uint64_t row = 0;; ++row) {
    auto where = [&](const Column& column) {
      return fmt::format("row stream: row {}: column '{}'", row, column.name);
    };
    std::byte tag;
    STOKER_RETURN_IF_ERROR(in.ReadAll({&tag, 1}));
    if (tag == std::byte{kEndTag}) {
      STOKER_ASSIGN_OR_RETURN(const bool more, in.Read({&tag, 1}));
      if (more) {
        return Err(Status::InvalidArgument(
            fmt::format("the row stream goes on after its end marker (after row {})", row)));
      }
      return row;
    }
    if (tag != std::byte{kRowTag}) {
      return Err(Status::InvalidArgument(
          fmt::format("row stream: row {}: starts with {:#04x}, not 0x01 (a row) or 0x00 (the "
                      "end)",
                      row, static_cast<int>(tag))));
    }
    const std::string key = fmt::format("{}{:012}", options.key_prefix, row);
    std::vector<SourceItem> items;
    items.reserve(options.order.size());
    for (const Column& column : options.order) {
      uint32_t length = 0;
      if (Status st = in.ReadAll(std::as_writable_bytes(std::span(&length, 1))); !st.ok()) {
        return Err(st.WithContext(where(column)));
      }
      if (length == kNoValue) {
        if (column.optional) continue;
        return Err(Status::InvalidArgument(
            fmt::format("{}: no value (not optional: its type would be '{}?')", where(column),
                        format::ColumnTypeText(column))));
      }
      const bool eight = column.type == ColumnType::kInt || column.type == ColumnType::kFloat;
      if (eight && length != 8) {  // before reading (or allocating) what the length says
        return Err(Status::InvalidArgument(fmt::format("{}: {} bytes; {} values are 8 bytes",
                                                       where(column), length,
                                                       format::ColumnTypeName(column.type))));
      }
      std::vector<std::byte> raw;
      if (Status st = in.ReadValue(length, raw); !st.ok()) {
        return Err(st.WithContext(where(column)));
      }
      auto encoded = Encode(column, column.name == options.label, std::move(raw));
      if (!encoded) return Err(encoded.error().WithContext(where(column)));
      std::string path = format::ColumnPath(key, column.name);
      // The reader's own checks (UTF-8 text, the .npy an array makes): what is published
      // reads back.
      const auto read_back = format::DecodeColumnValue(column, *encoded, [&] { return path; });
      if (!read_back) {
        return Err(Status::InvalidArgument(
            fmt::format("{}: {}", where(column), read_back.error().message())));
      }
      items.push_back({path, *std::move(encoded), nullptr, 0});
    }
    if (items.empty()) {
      return Err(Status::InvalidArgument(
          fmt::format("row stream: row {}: {}", row, format::kSampleWithoutValues)));
    }
    STOKER_RETURN_IF_ERROR(pack.Add(std::move(items)));
  }
}

}  // namespace stoker::dataset
