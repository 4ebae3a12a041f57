// Reads fixed-width integers, varints and byte runs off the front of a byte string, remembering
// whether any read ran past the end, so that a parser checks once (`ok`) instead of after every
// field. Nothing it returns after a failed read is meaningful.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/coding.h"
#include "common/varint.h"

namespace stoker {

struct ByteCursor {
  std::string_view in;
  bool ok = true;

  uint64_t Varint() {
    auto v = varint::Get(&in);
    if (!v) ok = false;
    return v.value_or(0);
  }
  std::string_view Bytes(uint64_t n) {
    if (n > in.size()) {
      ok = false;
      return {};
    }
    std::string_view out = in.substr(0, n);
    in.remove_prefix(n);
    return out;
  }
  template <typename T>
  T Fixed() {
    const std::string_view b = Bytes(sizeof(T));
    return ok ? coding::DecodeFixed<T>(b.data()) : T{};
  }
};

}  // namespace stoker
