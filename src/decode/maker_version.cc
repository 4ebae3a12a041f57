// See maker_version.h.
#include "decode/maker_version.h"

#include <cstdio>  // jpeglib.h needs FILE
#include <string>

#include <fmt/format.h>
#include <jpeglib.h>
#include <png.h>

namespace stoker::decode {

std::string_view MakerVersion() {
  // libjpeg-turbo reports no version at run time: the one built against (a Debian package
  // pins its soname to the same release line); libpng's is the loaded library's.
  constexpr int kJpeg = LIBJPEG_TURBO_VERSION_NUMBER;  // 2001005: 2.1.5
  static const std::string version =
      fmt::format("stoker {}; libjpeg-turbo {}.{}.{}; libpng {}", STOKER_VERSION, kJpeg / 1000000,
                  kJpeg / 1000 % 1000, kJpeg % 1000, png_get_libpng_ver(nullptr));
  return version;
}

}  // namespace stoker::decode
