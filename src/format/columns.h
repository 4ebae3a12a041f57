// Typed columns (stoker.Writer, docs/format.md §9): a column dataset is a grouped dataset whose
// sample `key` holds one file `key.<column>` per column it has a value for, and whose version
// records carry the schema. Each value is stored in a form other tools read too (the FUSE view
// shows them as files):
//
//   bytes, jpeg, png   the bytes themselves (jpeg/png: an encoded image ImageLoader decodes)
//   str, json          UTF-8 text (json: one JSON document)
//   int                decimal text, like a WebDataset .cls member ("-12")
//   float              the shortest decimal text that reads back as the same double
//   ndarray            a NumPy .npy file (format 1.0, little-endian, C order)
//   tokens             the integers, little-endian, of the column's element type, back to back
//
// The schema's text form, as a version record holds it (space-separated, columns in name
// order, then the label column if any):
//   "caption:str emb:ndarray:float32? image:jpeg label:int score:float:nan label=label"
// A column is `name:type[:parameter][?]`: `?` marks it optional (a sample may lack it); the
// parameter is an ndarray's fixed dtype, a tokens column's element type (default int32), or
// `nan` for a float column that accepts NaN and infinities. `label=NAME` names an int column
// whose values are the samples' class labels (0 .. kMaxClsLabel).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "stoker/columns.h"
#include "stoker/status.h"

namespace stoker::format {

enum class ColumnType : uint8_t {
  kBytes,
  kStr,
  kInt,
  kFloat,
  kJson,
  kNdarray,
  kJpeg,
  kPng,
  kTokens
};

// A fixed-size numeric element type ("int32"), public because column values name it.
using ElementType = stoker::ElementType;

// A tokens column's element type when its type names none ("tokens").
inline constexpr ElementType kDefaultTokenElement{'i', 4};
Result<ElementType> ParseElementType(std::string_view name);     // "int32", "uint8", ...
Result<ElementType> ElementTypeOfDescr(std::string_view descr);  // "<i4", "|u1", ...

struct Column {
  std::string name;
  ColumnType type = ColumnType::kBytes;
  // ndarray: the fixed element type (nullopt: any); tokens: the element type (integers only).
  std::optional<ElementType> element;
  // ndarray with an element type: the fixed shape ("ndarray:uint8:224x224x3"; empty: any), so
  // that every value has it (a batch is then one array).
  std::vector<uint64_t> shape;
  bool optional = false;
  bool allow_nan = false;  // float: NaN and infinities are values, not errors
  bool operator==(const Column&) const = default;
};

struct Schema {
  std::vector<Column> columns;  // in name order
  std::string label;            // the int column that labels samples; empty: none
  bool empty() const { return columns.empty(); }
  const Column* Find(std::string_view name) const;
  bool operator==(const Schema&) const = default;
};

std::string_view ColumnTypeName(ColumnType type);
// The bytes a jpeg or png column's every value starts with (writers check it); "" for others.
std::string_view ImageSignature(ColumnType type);
// One column from its name and type text ("ndarray:float32?", "ndarray:uint8:224x224x3");
// InvalidArgument naming it.
Result<Column> ParseColumn(std::string_view name, std::string_view type);
std::string ColumnTypeText(const Column& column);  // "ndarray:float32:16?"
// Builds a schema (sorted by name, checked: names, types, a label column of type int).
Result<Schema> MakeSchema(std::vector<Column> columns, std::string label);
// The text form above; Parse is strict (a version record's `columns` line).
std::string FormatSchema(const Schema& schema);
Result<Schema> ParseSchema(std::string_view text);

// The file of `column` in sample `key`: "key.column".
std::string ColumnPath(std::string_view key, std::string_view column);
// Why a sample without a single value is refused by every writer: it would have no file, so it
// would not exist, and the samples after it would take its index.
inline constexpr std::string_view kSampleWithoutValues =
    "no value in any column: a sample is stored as the files of its values, so one without any "
    "would vanish (give it a value, or leave it out)";

// An .npy (format 1.0) header for a C-order array; `shape` may be empty (a scalar).
std::string NpyHeader(const ElementType& element, std::span<const uint64_t> shape);
struct NpyLayout {
  ElementType element;
  std::vector<uint64_t> shape;
  uint64_t data_offset = 0;  // where the elements start
  uint64_t count = 0;        // product of shape
};
// Parses an .npy file's header and checks that the data that follows is exactly the array's
// (hostile input: Corruption, never an allocation from a declared size).
Result<NpyLayout> ParseNpy(std::span<const std::byte> file);

// "16", "224x224x3": a fixed shape as a column type writes it; "()" for a scalar's.
std::string ShapeText(std::span<const uint64_t> shape);

// int/float columns: the text of a value, and back (Corruption on anything else).
std::string IntText(int64_t value);
std::string FloatText(double value);
Result<int64_t> ParseIntText(std::string_view text);
Result<double> ParseFloatText(std::string_view text);

}  // namespace stoker::format
