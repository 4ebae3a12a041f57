// What makes an image's pixels: this stoker and the codec libraries it decodes with. Two
// processes with the same text make the same bytes from the same (sample, seed, epoch, options);
// a trainer and its feeders must agree on it (decision 0013), so a feeder of another build is
// refused when it joins rather than trusted to match.
// Thread-safe (a constant).
#pragma once

#include <string_view>

namespace stoker::decode {

// "stoker 0.1.0; libjpeg-turbo 2.1.5; libpng 1.6.39": the versions compiled in and loaded.
std::string_view MakerVersion();

}  // namespace stoker::decode
