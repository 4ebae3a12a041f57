// See transform_option_table.h. One entry per option: the accessors are captureless lambdas,
// so the whole table is data.
#include "decode/transform_option_table.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace stoker::decode {
namespace {

using Values = std::vector<double>;

const Values& AsValues(const OptionValue& v) { return std::get<Values>(v); }

// A whole number of pixels that fits the field.
Status ToPixels(std::string_view name, double v, uint32_t& out) {
  if (!(v >= 1 && v <= std::numeric_limits<uint32_t>::max() && v == std::floor(v))) {
    return Status::InvalidArgument(fmt::format("{} must be whole pixels >= 1, not {}", name, v));
  }
  out = static_cast<uint32_t>(v);
  return Status::OK();
}

Status ToUint32(std::string_view name, uint64_t v, uint32_t& out) {
  if (v > std::numeric_limits<uint32_t>::max()) {
    return Status::InvalidArgument(fmt::format("{} is too large: {}", name, v));
  }
  out = static_cast<uint32_t>(v);
  return Status::OK();
}

const std::vector<TransformOption>& Table() {
  static const std::vector<TransformOption> table = {
      {"train",
       OptionKind::kBool,
       "the training transform (random crop, flip, ...) or the validation one (resize, centre "
       "crop).",
       {},
       [](TransformOptions& o, const OptionValue& v) -> Status {
         o.train = std::get<bool>(v);
         return Status::OK();
       },
       [](const TransformOptions& o) { return OptionValue(o.train); }},
      {"size",
       OptionKind::kSize,
       "output size in pixels: an int (square) or (height, width).",
       {},
       [](TransformOptions& o, const OptionValue& v) -> Status {
         STOKER_RETURN_IF_ERROR(ToPixels("size", AsValues(v)[0], o.output.height));
         return ToPixels("size", AsValues(v)[1], o.output.width);
       },
       [](const TransformOptions& o) {
         return OptionValue(Values{double(o.output.height), double(o.output.width)});
       }},
      {"scale",
       OptionKind::kPair,
       "training: RandomResizedCrop's range of the crop's area, as a fraction of the image's.",
       {},
       [](TransformOptions& o, const OptionValue& v) -> Status {
         o.crop.scale_min = AsValues(v)[0];
         o.crop.scale_max = AsValues(v)[1];
         return Status::OK();
       },
       [](const TransformOptions& o) {
         return OptionValue(Values{o.crop.scale_min, o.crop.scale_max});
       }},
      {"ratio",
       OptionKind::kPair,
       "training: RandomResizedCrop's range of the crop's aspect ratio (width / height).",
       {},
       [](TransformOptions& o, const OptionValue& v) -> Status {
         o.crop.ratio_min = AsValues(v)[0];
         o.crop.ratio_max = AsValues(v)[1];
         return Status::OK();
       },
       [](const TransformOptions& o) {
         return OptionValue(Values{o.crop.ratio_min, o.crop.ratio_max});
       }},
      {"flip",
       OptionKind::kNumber,
       "training: the probability of a horizontal flip (validation never flips).",
       {},
       [](TransformOptions& o, const OptionValue& v) -> Status {
         o.flip_probability = std::get<double>(v);
         return Status::OK();
       },
       [](const TransformOptions& o) { return OptionValue(o.flip_probability); }},
      {"rotation",
       OptionKind::kNumber,
       "training: degrees; the angle is uniform in [-rotation, rotation] (0: off).",
       {},
       [](TransformOptions& o, const OptionValue& v) -> Status {
         o.rotation_degrees = std::get<double>(v);
         return Status::OK();
       },
       [](const TransformOptions& o) { return OptionValue(o.rotation_degrees); }},
      {"zoom",
       OptionKind::kPair,
       "training: (min, max) RandomAffine-style scale about the centre ((1, 1): off).",
       {},
       [](TransformOptions& o, const OptionValue& v) -> Status {
         o.zoom_min = AsValues(v)[0];
         o.zoom_max = AsValues(v)[1];
         return Status::OK();
       },
       [](const TransformOptions& o) { return OptionValue(Values{o.zoom_min, o.zoom_max}); }},
      {"resize",
       OptionKind::kUnsigned,
       "validation: the shorter side before the centre crop (0: the larger side of size * 8 / 7, "
       "256 for 224).",
       {},
       [](TransformOptions& o, const OptionValue& v) -> Status {
         return ToUint32("resize", std::get<uint64_t>(v), o.resize);
       },
       [](const TransformOptions& o) { return OptionValue(uint64_t{o.resize}); }},
      {"center_crop",
       OptionKind::kBool,
       "validation: Resize(resize) then CenterCrop(size), or (False) the whole image resized to "
       "size, its aspect ratio not kept (torchvision's Resize((h, w)), ray.data.read_images' "
       "size).",
       {},
       [](TransformOptions& o, const OptionValue& v) -> Status {
         o.center_crop = std::get<bool>(v);
         return Status::OK();
       },
       [](const TransformOptions& o) { return OptionValue(o.center_crop); }},
      {"interpolation",
       OptionKind::kChoice,
       "resampling filter: bilinear (torchvision's default), bicubic or nearest.",
       {"bilinear", "bicubic", "nearest"},
       [](TransformOptions& o, const OptionValue& v) -> Status {
         // The bindings checked the choice; the CPU path's default otherwise.
         o.interpolation =
             ParseInterpolation(std::get<std::string>(v)).value_or(Interpolation::kBilinear);
         return Status::OK();
       },
       [](const TransformOptions& o) {
         return OptionValue(std::string(InterpolationName(o.interpolation)));
       }},
      {"mean",
       OptionKind::kTriple,
       "per-channel mean subtracted from the [0, 1] values (float32 output).",
       {},
       [](TransformOptions& o, const OptionValue& v) -> Status {
         for (int c = 0; c < 3; ++c) o.output.mean[c] = float(AsValues(v)[c]);
         return Status::OK();
       },
       [](const TransformOptions& o) {
         return OptionValue(Values{o.output.mean[0], o.output.mean[1], o.output.mean[2]});
       }},
      {"std",
       OptionKind::kTriple,
       "per-channel standard deviation the values are divided by (float32 output).",
       {},
       [](TransformOptions& o, const OptionValue& v) -> Status {
         for (int c = 0; c < 3; ++c) o.output.std[c] = float(AsValues(v)[c]);
         return Status::OK();
       },
       [](const TransformOptions& o) {
         return OptionValue(Values{o.output.std[0], o.output.std[1], o.output.std[2]});
       }},
      {"dtype",
       OptionKind::kChoice,
       "float32 (normalized) or uint8 (raw pixels, e.g. to normalize on the GPU).",
       {"float32", "uint8"},
       [](TransformOptions& o, const OptionValue& v) -> Status {
         o.output.dtype = std::get<std::string>(v) == "uint8" ? DType::kUint8 : DType::kFloat32;
         return Status::OK();
       },
       [](const TransformOptions& o) {
         return OptionValue(std::string(o.output.dtype == DType::kUint8 ? "uint8" : "float32"));
       }},
      {"layout",
       OptionKind::kChoice,
       "NCHW (PyTorch's default) or NHWC (channels_last).",
       {"NCHW", "NHWC"},
       [](TransformOptions& o, const OptionValue& v) -> Status {
         o.output.layout = std::get<std::string>(v) == "NHWC" ? Layout::kNHWC : Layout::kNCHW;
         return Status::OK();
       },
       [](const TransformOptions& o) {
         return OptionValue(std::string(o.output.layout == Layout::kNHWC ? "NHWC" : "NCHW"));
       }},
      {"dct_scaling",
       OptionKind::kBool,
       "let JPEG decoding downscale in the DCT domain when the crop will be shrunk by 2x or more "
       "anyway (faster; off gives torchvision's pixels exactly).",
       {},
       [](TransformOptions& o, const OptionValue& v) -> Status {
         o.dct_scaling = std::get<bool>(v);
         return Status::OK();
       },
       [](const TransformOptions& o) { return OptionValue(o.dct_scaling); }},
      {"max_pixels",
       OptionKind::kUnsigned,
       "images whose header claims more pixels are errors, before anything is allocated.",
       {},
       [](TransformOptions& o, const OptionValue& v) -> Status {
         o.limits.max_pixels = std::get<uint64_t>(v);
         return Status::OK();
       },
       [](const TransformOptions& o) { return OptionValue(uint64_t{o.limits.max_pixels}); }},
  };
  return table;
}

}  // namespace

std::span<const TransformOption> TransformOptionTable() { return Table(); }

const TransformOption* FindTransformOption(std::string_view name) {
  return FindOption(TransformOptionTable(), name);
}

}  // namespace stoker::decode
