#include "format/columns.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "common/parse_number.h"

namespace stoker {

// stoker/columns.h declares ElementType (column values name it); its text forms live here.
std::string ElementType::Name() const {
  switch (kind) {
    case 'b':
      return "bool";
    case 'i':
      return fmt::format("int{}", size * 8);
    case 'u':
      return fmt::format("uint{}", size * 8);
    case 'f':
      return fmt::format("float{}", size * 8);
    default:
      return fmt::format("complex{}", size * 8);
  }
}

std::string ElementType::Descr() const {
  return fmt::format("{}{}{}", size == 1 ? '|' : '<', kind, size);
}

namespace format {
namespace {

constexpr std::array<std::pair<ColumnType, std::string_view>, 9> kTypeNames = {{
    {ColumnType::kBytes, "bytes"},
    {ColumnType::kStr, "str"},
    {ColumnType::kInt, "int"},
    {ColumnType::kFloat, "float"},
    {ColumnType::kJson, "json"},
    {ColumnType::kNdarray, "ndarray"},
    {ColumnType::kJpeg, "jpeg"},
    {ColumnType::kPng, "png"},
    {ColumnType::kTokens, "tokens"},
}};
constexpr size_t kMaxColumnName = 64;
constexpr size_t kMaxColumns = 1024;
constexpr std::string_view kNpyMagic = "\x93NUMPY";
// Arrays of more dimensions than NumPy's own limit (64) are not arrays NumPy could make.
constexpr size_t kMaxNpyDims = 64;

// Names become file extensions and dict keys: letters, digits and '_' (no '.', which ends a
// sample key, nor the separators of the schema's text). "__x" is kept for keys stoker adds.
bool ValidColumnName(std::string_view name) {
  if (name.empty() || name.size() > kMaxColumnName || name.starts_with("__")) return false;
  return std::ranges::all_of(name, [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

Status BadColumn(std::string_view name, std::string_view why) {
  return Status::InvalidArgument(fmt::format("column '{}': {}", name, why));
}

std::string TypeList() {
  std::string out;
  for (const auto& [type, name] : kTypeNames) out += (out.empty() ? "" : ", ") + std::string(name);
  return out;
}

}  // namespace

Result<ElementType> ParseElementType(std::string_view name) {
  static constexpr std::array<std::pair<std::string_view, ElementType>, 14> kNames = {{
      {"bool", {'b', 1}},
      {"int8", {'i', 1}},
      {"int16", {'i', 2}},
      {"int32", {'i', 4}},
      {"int64", {'i', 8}},
      {"uint8", {'u', 1}},
      {"uint16", {'u', 2}},
      {"uint32", {'u', 4}},
      {"uint64", {'u', 8}},
      {"float16", {'f', 2}},
      {"float32", {'f', 4}},
      {"float64", {'f', 8}},
      {"complex64", {'c', 8}},
      {"complex128", {'c', 16}},
  }};
  for (const auto& [n, element] : kNames) {
    if (n == name) return element;
  }
  return Err(Status::InvalidArgument(fmt::format(
      "'{}' is not an element type (bool, int8 .. int64, uint8 .. uint64, float16 .. float64, "
      "complex64, complex128)",
      name.substr(0, 40))));
}

Result<ElementType> ElementTypeOfDescr(std::string_view descr) {
  if (descr.size() < 3 || (descr[0] != '<' && descr[0] != '|')) {
    return Err(Status::Corruption(fmt::format("unsupported dtype '{}'", descr.substr(0, 20))));
  }
  uint32_t size = 0;
  const auto [ptr, ec] = std::from_chars(descr.data() + 2, descr.data() + descr.size(), size);
  const ElementType element{descr[1], static_cast<uint8_t>(size)};
  if (ec != std::errc() || ptr != descr.data() + descr.size() || size > 16 ||
      !ParseElementType(element.Name()) || element.Descr() != descr) {
    return Err(Status::Corruption(fmt::format("unsupported dtype '{}'", descr.substr(0, 20))));
  }
  return element;
}

const Column* Schema::Find(std::string_view name) const {
  auto it = std::ranges::lower_bound(columns, name, {}, &Column::name);
  return it != columns.end() && it->name == name ? &*it : nullptr;
}

std::string_view ImageSignature(ColumnType type) {
  if (type == ColumnType::kJpeg) return "\xff\xd8\xff";
  if (type == ColumnType::kPng) return {"\x89PNG\r\n\x1a\n", 8};
  return "";
}

std::string_view ColumnTypeName(ColumnType type) {
  for (const auto& [t, name] : kTypeNames) {
    if (t == type) return name;
  }
  return "?";
}

namespace {

// "16", "224x224x3": 1 to 32 dimensions, each 1 .. 2^31, at most 2^40 elements in all.
Result<std::vector<uint64_t>> ParseShape(std::string_view text) {
  const auto bad = [&] {
    return Err(Status::InvalidArgument(
        fmt::format("shape '{}': give the dimensions joined by 'x', e.g. ndarray:float32:512 or "
                    "ndarray:uint8:224x224x3",
                    text.substr(0, 40))));
  };
  std::vector<uint64_t> shape;
  uint64_t elements = 1;
  while (true) {
    const size_t x = text.find('x');
    const auto d = ParseUnsigned<uint64_t>(text.substr(0, x));
    if (!d || *d == 0 || *d > (uint64_t{1} << 31) || shape.size() == 32) return bad();
    elements *= *d;
    if (elements > (uint64_t{1} << 40)) return bad();
    shape.push_back(*d);
    if (x == std::string_view::npos) return shape;
    text.remove_prefix(x + 1);
  }
}

}  // namespace

Result<Column> ParseColumn(std::string_view name, std::string_view type) {
  if (!ValidColumnName(name)) {
    return Err(BadColumn(name.substr(0, kMaxColumnName + 1),
                         "a name is 1 to 64 letters, digits or '_', not starting with '__'"));
  }
  Column c;
  c.name = std::string(name);
  if (type.ends_with('?')) {
    c.optional = true;
    type.remove_suffix(1);
  }
  const size_t colon = type.find(':');
  const std::string_view base = type.substr(0, colon);
  // What follows the first ':' ("float32:16" of "ndarray:float32:16"); none without one.
  const bool has_parameter = colon != std::string_view::npos;
  const std::string_view parameter = has_parameter ? type.substr(colon + 1) : std::string_view();
  auto it = std::ranges::find(kTypeNames, base, &std::pair<ColumnType, std::string_view>::second);
  if (it == kTypeNames.end()) {
    return Err(BadColumn(name, fmt::format("unknown type '{}' (types: {}; '?' after a type makes "
                                           "the column optional)",
                                           type.substr(0, 40), TypeList())));
  }
  c.type = it->first;
  if (c.type == ColumnType::kTokens) c.element = kDefaultTokenElement;
  if (!has_parameter) return c;
  switch (c.type) {
    case ColumnType::kFloat:
      if (parameter != "nan") return Err(BadColumn(name, "a float column takes ':nan' only"));
      c.allow_nan = true;
      return c;
    case ColumnType::kNdarray:
    case ColumnType::kTokens: {
      const size_t second = parameter.find(':');
      const std::string_view element_name = parameter.substr(0, second);
      if (second != std::string_view::npos) {
        if (c.type == ColumnType::kTokens) {
          return Err(BadColumn(name, "tokens are 1-D documents of any length: no fixed shape"));
        }
        auto shape = ParseShape(parameter.substr(second + 1));
        if (!shape) return Err(BadColumn(name, shape.error().message()));
        c.shape = *std::move(shape);
      }
      auto element = ParseElementType(element_name);
      if (!element) return Err(BadColumn(name, element.error().message()));
      if (c.type == ColumnType::kTokens && element->kind != 'i' && element->kind != 'u') {
        return Err(BadColumn(name, "tokens are integers (int8 .. int64, uint8 .. uint64)"));
      }
      c.element = *element;
      return c;
    }
    default:
      return Err(
          BadColumn(name, fmt::format("type '{}' takes no parameter", ColumnTypeName(c.type))));
  }
}

std::string ShapeText(std::span<const uint64_t> shape) {
  if (shape.empty()) return "()";
  std::string text;
  for (const uint64_t d : shape) text += (text.empty() ? "" : "x") + std::to_string(d);
  return text;
}

std::string ColumnTypeText(const Column& c) {
  std::string text(ColumnTypeName(c.type));
  const bool default_tokens = c.type == ColumnType::kTokens && c.element == kDefaultTokenElement;
  if (c.element && !default_tokens) text += ":" + c.element->Name();
  if (!c.shape.empty()) text += ":" + ShapeText(c.shape);
  if (c.allow_nan) text += ":nan";
  if (c.optional) text += "?";
  return text;
}

Result<Schema> MakeSchema(std::vector<Column> columns, std::string label) {
  if (columns.empty()) return Err(Status::InvalidArgument("a schema needs at least one column"));
  if (columns.size() > kMaxColumns) {
    return Err(Status::InvalidArgument(fmt::format("more than {} columns", kMaxColumns)));
  }
  std::ranges::sort(columns, {}, &Column::name);
  for (size_t i = 1; i < columns.size(); ++i) {
    if (columns[i].name == columns[i - 1].name) {
      return Err(BadColumn(columns[i].name, "given twice"));
    }
  }
  Schema schema{std::move(columns), std::move(label)};
  if (!schema.label.empty()) {
    const Column* c = schema.Find(schema.label);
    if (c == nullptr) {
      return Err(Status::InvalidArgument(
          fmt::format("label column '{}' is not among the columns", schema.label)));
    }
    if (c->type != ColumnType::kInt) {
      return Err(BadColumn(c->name, "a label column must be of type int"));
    }
  }
  return schema;
}

std::string FormatSchema(const Schema& schema) {
  std::string text;
  for (const Column& c : schema.columns) {
    text += (text.empty() ? "" : " ") + c.name + ":" + ColumnTypeText(c);
  }
  if (!schema.label.empty()) text += " label=" + schema.label;
  return text;
}

Result<Schema> ParseSchema(std::string_view text) {
  const std::string_view whole = text;
  std::vector<Column> columns;
  std::string label;
  while (!text.empty()) {
    const size_t space = text.find(' ');
    const std::string_view word = text.substr(0, space);
    text = space == std::string_view::npos ? std::string_view() : text.substr(space + 1);
    if (word.starts_with("label=")) {
      if (!label.empty() || !text.empty())
        return Err(Status::Corruption("columns: misplaced label"));
      label = std::string(word.substr(6));
      continue;
    }
    const size_t colon = word.find(':');
    if (colon == std::string_view::npos) {
      return Err(Status::Corruption(fmt::format("columns: bad entry '{}'", word.substr(0, 80))));
    }
    auto column = ParseColumn(word.substr(0, colon), word.substr(colon + 1));
    if (!column) return Err(Status::Corruption("columns: " + column.error().message()));
    columns.push_back(*std::move(column));
  }
  auto schema = MakeSchema(columns, label);
  if (!schema) return Err(Status::Corruption("columns: " + schema.error().message()));
  // Strict: the text must be the canonical form, so two writers' schemas compare as text.
  if (!std::ranges::is_sorted(columns, {}, &Column::name)) {
    return Err(Status::Corruption("columns: not in name order"));
  }
  if (const std::string canonical = FormatSchema(*schema); canonical != whole) {
    return Err(
        Status::Corruption(fmt::format("columns: '{}' is not written as a writer writes "
                                       "it ('{}')",
                                       whole.substr(0, 200), canonical.substr(0, 200))));
  }
  return schema;
}

std::string ColumnPath(std::string_view key, std::string_view column) {
  std::string path;
  path.reserve(key.size() + 1 + column.size());
  path.append(key).append(".").append(column);
  return path;
}

std::string NpyHeader(const ElementType& element, std::span<const uint64_t> shape) {
  std::string dims;
  for (uint64_t d : shape) dims += fmt::format("{}, ", d);
  if (shape.size() > 1) dims.resize(dims.size() - 2);  // (3,) but (3, 4)
  if (shape.size() == 1) dims.resize(dims.size() - 1);
  std::string dict = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}",
                                 element.Descr(), dims);
  // Magic (6) + version (2) + length (2) + dict + padding + '\n', a multiple of 64 in all.
  const size_t unpadded = 10 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict += '\n';
  std::string header(kNpyMagic);
  header += '\x01';
  header += '\x00';
  header += static_cast<char>(dict.size() & 0xff);
  header += static_cast<char>(dict.size() >> 8);
  return header + dict;
}

Result<NpyLayout> ParseNpy(std::span<const std::byte> file) {
  const std::string_view text(reinterpret_cast<const char*>(file.data()), file.size());
  auto bad = [](std::string_view why) {
    return Err(Status::Corruption(fmt::format("not an .npy array written by stoker: {}", why)));
  };
  if (text.size() < 10 || !text.starts_with(kNpyMagic) || text[6] != '\x01' || text[7] != 0) {
    return bad("no .npy 1.0 header");
  }
  const size_t length =
      static_cast<uint8_t>(text[8]) | (size_t{static_cast<uint8_t>(text[9])} << 8);
  if (text.size() < 10 + length) return bad("truncated header");
  std::string_view dict = text.substr(10, length);
  // The dict as NpyHeader writes it: descr, fortran_order, shape, in that order.
  constexpr std::string_view kDescr = "{'descr': '",
                             kOrder = "', 'fortran_order': False, 'shape': (";
  if (!dict.starts_with(kDescr)) return bad("no descr");
  dict.remove_prefix(kDescr.size());
  const size_t quote = dict.find(kOrder);
  if (quote == std::string_view::npos) return bad("not C order, or fields out of order");
  NpyLayout layout;
  auto element = ElementTypeOfDescr(dict.substr(0, quote));
  if (!element) return Err(element.error());
  layout.element = *element;
  dict.remove_prefix(quote + kOrder.size());
  layout.count = 1;
  while (!dict.starts_with(')')) {
    uint64_t d = 0;
    const auto [ptr, ec] = std::from_chars(dict.data(), dict.data() + dict.size(), d);
    if (ec != std::errc() || layout.shape.size() >= kMaxNpyDims) return bad("bad shape");
    if (d != 0 && layout.count > UINT64_MAX / d) return bad("shape overflows");
    layout.count *= d;
    layout.shape.push_back(d);
    dict.remove_prefix(static_cast<size_t>(ptr - dict.data()));
    if (dict.starts_with(", "))
      dict.remove_prefix(2);
    else if (dict.starts_with(','))
      dict.remove_prefix(1);
  }
  dict.remove_prefix(1);
  if (!dict.starts_with(", }") || !dict.ends_with('\n')) return bad("bad header end");
  layout.data_offset = 10 + length;
  const uint64_t data = text.size() - layout.data_offset;
  if (layout.count > UINT64_MAX / layout.element.size ||
      layout.count * layout.element.size != data) {
    return bad(fmt::format("{} bytes of data for {} elements of {}", data, layout.count,
                           layout.element.Name()));
  }
  return layout;
}

std::string IntText(int64_t value) { return fmt::format("{}", value); }

// fmt's shortest form that reads back as the same double ("0.1", "1e+300", "nan", "-inf").
std::string FloatText(double value) { return fmt::format("{}", value); }

Result<int64_t> ParseIntText(std::string_view text) {
  int64_t value = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr != text.data() + text.size() || text.empty()) {
    return Err(Status::Corruption(fmt::format("not an int value: '{}'", text.substr(0, 40))));
  }
  return value;
}

Result<double> ParseFloatText(std::string_view text) {
  const std::optional<double> value = ParseDouble(text);
  if (!value) {
    return Err(Status::Corruption(fmt::format("not a float value: '{}'", text.substr(0, 40))));
  }
  return *value;
}

}  // namespace format
}  // namespace stoker
