// A column dataset's typed values (stoker.Writer; docs/columns.md), as Dataset::ReadColumns
// reads them: each value's file is read, CRC-checked, decoded and checked in C++, so a C++
// program reads the values Python's ds[i] returns, without Python.
//
//   auto ds = stoker::Dataset::Open("caps.stoker");
//   auto columns = (*ds)->ReadColumns(0);  // Corruption naming the file on a bad value
//   for (const stoker::ColumnEntry& c : *columns) {
//     if (!c.value) continue;  // an optional column this sample has no value for
//     if (const auto* caption = std::get_if<std::string>(&*c.value)) use(*caption);
//     if (const auto* emb = std::get_if<stoker::NdarrayValue>(&*c.value)) {
//       const std::byte* elements = c.data.data() + emb->offset;  // emb->count of emb->element
//     }
//   }
//
// Thread-safety: plain values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace stoker {

// A fixed-size numeric element type, as NumPy names it.
struct ElementType {
  char kind = 'i';            // 'b' bool, 'i' signed, 'u' unsigned, 'f' float, 'c' complex
  uint8_t size = 4;           // bytes
  std::string Name() const;   // "int32", "float16", "bool", "complex64"
  std::string Descr() const;  // NumPy's array-protocol string: "<i4", "|u1", "<f2", "|b1"
  bool operator==(const ElementType&) const = default;
};

// A bytes, jpeg or png column's value: the file's bytes (ColumnEntry::data) as they are.
struct BytesValue {
  bool operator==(const BytesValue&) const = default;
};

// A json column's value: one JSON document's text, checked to be UTF-8. The library has no JSON
// parser, so the text is the reader's to parse (stoker.Dataset parses it with json.loads).
struct JsonValue {
  std::string text;
  bool operator==(const JsonValue&) const = default;
};

// An ndarray column's value: `count` elements (little-endian, C order) of `shape`, in the file's
// bytes from `offset` on (after the .npy header), so the array is read where it lies.
struct NdarrayValue {
  ElementType element;
  std::vector<uint64_t> shape;  // empty: a scalar
  uint64_t offset = 0;
  uint64_t count = 0;  // the product of shape
  bool operator==(const NdarrayValue&) const = default;
};

// A tokens column's value: `count` integers of `element` (little-endian), the whole file.
struct TokensValue {
  ElementType element;
  uint64_t count = 0;
  bool operator==(const TokensValue&) const = default;
};

// One column's value: bytes/jpeg/png, str (UTF-8 text), int, float, json, ndarray, tokens.
using ColumnValue =
    std::variant<BytesValue, std::string, int64_t, double, JsonValue, NdarrayValue, TokensValue>;

// One column of a sample, as Dataset::ReadColumns returns it.
struct ColumnEntry {
  std::string name;
  std::optional<ColumnValue> value;  // nullopt: an optional column the sample has no value for
  std::vector<std::byte> data;       // the value's file, CRC-checked; empty without a value
};

}  // namespace stoker
