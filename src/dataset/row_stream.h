// Rows of a column dataset from a byte stream: the input of `stoker pack - DST --columns ...`,
// written by producers that are not Python (the Spark writer in the executors' JVMs,
// java/stoker-spark). The stream carries each value in a fixed binary form; this encodes it as
// stoker.Writer would (int and float as text, arrays as .npy), checks it with the reader's own
// decoder (format/column_values.h), and queues the sample on a StreamPack.
//
// The stream (docs/engines.md, "The row stream"), all integers little-endian:
//
//   "STKROWS1"                          8 bytes, once
//   then per row:  0x01, then one value per column in the --columns order
//   then, once:    0x00                 the end: a stream without it is cut short, an error
//   value:         u32 length, then that many bytes; length 0xFFFFFFFF: no value (an optional
//                  column's null)
//     int          8 bytes, a signed 64-bit integer
//     float        8 bytes, an IEEE-754 double
//     str, json    UTF-8 text (json: one JSON document, checked)
//     bytes        the bytes; jpeg and png: the image file, its signature checked
//     ndarray      the elements, of the column's element type (needed), one after another; the
//                  value's shape is the column's (fixed shape), else 1-D
//     tokens       the elements, of the column's element type
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "dataset/stream_pack.h"
#include "format/columns.h"
#include "stoker/status.h"

namespace stoker::dataset {

struct RowStreamOptions {
  int fd = 0;                         // read until its end marker
  std::vector<format::Column> order;  // the columns, in the stream's order
  std::string label;                  // the label column (its values are checked as classes)
  std::string key_prefix;             // each sample's key: prefix + its row number (12 digits)
  // Asked between reads, and while waiting for the producer (Ctrl-C, a scheduler's TERM): true
  // ends the pack with Cancelled.
  std::function<bool()> stop_requested;
};

// The stream's column order is the order of `--columns NAME=TYPE` flags; ParseRowColumns makes
// it, refusing a type the stream cannot carry (ndarray without an element type).
Result<std::vector<format::Column>> ParseRowColumns(const std::vector<std::string>& flags);

// Reads every row of the stream into `pack` (samples Add-ed, not finished) and returns how many.
// InvalidArgument naming the row and column for a value that does not fit its column, and for a
// stream that is not one, ends without its end marker, or goes on after it. A value's memory is
// allocated as its bytes arrive, so a damaged length costs an error, not gigabytes.
Result<uint64_t> PackRowStream(const RowStreamOptions& options, StreamPack& pack);

}  // namespace stoker::dataset
