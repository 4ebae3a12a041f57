// The version of the stoker library a program runs against ("0.1.0"), for its logs and bug
// reports. Thread-safety: a constant.
#pragma once

#include <string_view>

namespace stoker {

std::string_view Version();

}  // namespace stoker
