// stoker._core.image: the decode module's single-image operations, exposed for tests that check
// pixels against a reference (PIL) and for users who want one image at a time. Batches go
// through stoker._core.ImagePipeline instead; nothing here is on the training hot path.
//
//   pixels, info = image.decode(data, region=(x, y, w, h), min_size=(w, h))
//   out = image.resize(pixels, (w, h), box=(x0, y0, x1, y1), interpolation="bilinear")
//
// Pixels are uint8 numpy arrays of shape (height, width, 3).
#include "image_ops.h"

#include <cstring>
#include <optional>
#include <string>
#include <tuple>

#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include "decode/decoder.h"
#include "decode/output.h"
#include "decode/resize.h"
#include "decode/warp.h"
#include "errors.h"

namespace nb = nanobind;

namespace stoker::python {
namespace {

using decode::Image;
using Pixels = nb::ndarray<nb::numpy, uint8_t, nb::ndim<3>>;
using PixelsIn = nb::ndarray<const uint8_t, nb::ndim<3>, nb::c_contig, nb::device::cpu>;

// A numpy array that owns a copy of `image` (tests only: a copy is fine here).
Pixels ToNumpy(const decode::ImageView& image) {
  const size_t row = size_t{image.width} * decode::kChannels;
  auto* data = new uint8_t[row * image.height];
  for (uint32_t y = 0; y < image.height; ++y) std::memcpy(data + y * row, image.row(y), row);
  nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<uint8_t*>(p); });
  return Pixels(data, {image.height, image.width, size_t{decode::kChannels}}, owner);
}

decode::ImageView ViewOf(const PixelsIn& pixels) {
  if (pixels.shape(2) != decode::kChannels) throw nb::value_error("pixels must be (H, W, 3)");
  return {pixels.data(), static_cast<uint32_t>(pixels.shape(1)),
          static_cast<uint32_t>(pixels.shape(0)), pixels.shape(1) * decode::kChannels};
}

nb::dict InfoDict(const decode::ImageInfo& info) {
  nb::dict d;
  d["format"] = info.format == decode::ImageFormat::kJpeg  ? "jpeg"
                : info.format == decode::ImageFormat::kPng ? "png"
                                                           : "unknown";
  d["width"] = info.width;
  d["height"] = info.height;
  d["components"] = info.components;
  d["progressive"] = info.progressive;
  return d;
}

std::span<const std::byte> BytesOf(const nb::bytes& data) {
  return {reinterpret_cast<const std::byte*>(data.c_str()), data.size()};
}

}  // namespace

decode::Interpolation ParseInterpolation(const std::string& name) {
  const std::optional<decode::Interpolation> mode = decode::ParseInterpolation(name);
  if (!mode) throw nb::value_error("interpolation must be 'nearest', 'bilinear' or 'bicubic'");
  return *mode;
}

void RegisterImageOps(nb::module_& parent) {
  nb::module_ m = parent.def_submodule("image", "Single-image decode and transform operations");

  m.def(
      "info",
      [](const nb::bytes& data, uint64_t max_pixels) {
        decode::DecodeLimits limits;
        limits.max_pixels = max_pixels;
        return InfoDict(ValueOrThrow(decode::ReadImageInfo(BytesOf(data), limits)));
      },
      nb::arg("data"), nb::arg("max_pixels") = decode::DecodeLimits{}.max_pixels,
      "The header of a JPEG or PNG: {format, width, height, components, progressive}.");

  m.def(
      "decode",
      [](const nb::bytes& data,
         std::optional<std::tuple<uint32_t, uint32_t, uint32_t, uint32_t>> region,
         std::optional<std::tuple<uint32_t, uint32_t>> min_size, uint64_t max_pixels) {
        decode::DecodeRequest request;
        if (region) {
          auto [x, y, w, h] = *region;
          request.region = {x, y, w, h};
        }
        if (min_size) std::tie(request.min_width, request.min_height) = *min_size;
        request.limits.max_pixels = max_pixels;
        Image image;
        Result<decode::DecodedRegion> decoded = Err(Status::Internal("unset"));
        {
          nb::gil_scoped_release release;
          decode::Decoder decoder;
          decoded = decoder.Decode(BytesOf(data), request, image);
        }
        const decode::DecodedRegion r = ValueOrThrow(std::move(decoded));
        nb::dict where = InfoDict(r.info);
        where["scale"] = nb::make_tuple(r.scale_x, r.scale_y);
        where["origin"] = nb::make_tuple(r.origin_x, r.origin_y);
        return nb::make_tuple(ToNumpy(image.view()), where);
      },
      nb::arg("data"), nb::arg("region") = nb::none(), nb::arg("min_size") = nb::none(),
      nb::arg("max_pixels") = decode::DecodeLimits{}.max_pixels,
      "Decodes JPEG/PNG bytes to (pixels (H, W, 3) uint8, info with 'scale' and 'origin': "
      "image = source * scale - origin). region=(x, y, w, h) asks for part of the image; "
      "min_size=(w, h) allows DCT scaling while the region stays at least that big.");

  m.def(
      "resize",
      [](const PixelsIn& pixels, std::tuple<uint32_t, uint32_t> size,
         std::optional<std::tuple<double, double, double, double>> box,
         const std::string& interpolation) {
        const decode::ImageView src = ViewOf(pixels);
        decode::Box b{0, 0, double(src.width), double(src.height)};
        if (box) std::tie(b.x0, b.y0, b.x1, b.y1) = *box;
        Image out;
        out.Reset(std::get<0>(size), std::get<1>(size));
        const decode::Interpolation mode = ParseInterpolation(interpolation);
        {
          nb::gil_scoped_release release;
          decode::Resizer().Resize(src, b, mode, out.mutable_view());
        }
        return ToNumpy(out.view());
      },
      nb::arg("pixels"), nb::arg("size"), nb::arg("box") = nb::none(),
      nb::arg("interpolation") = "bilinear",
      "Resamples box (x0, y0, x1, y1) of pixels to size (w, h), as PIL's Image.resize does.");

  m.def(
      "warp",
      [](const PixelsIn& pixels, double angle, double zoom,
         std::tuple<uint8_t, uint8_t, uint8_t> fill, const std::string& interpolation) {
        const decode::ImageView src = ViewOf(pixels);
        decode::WarpParams params;
        params.angle_degrees = angle;
        params.zoom = zoom;
        std::tie(params.fill[0], params.fill[1], params.fill[2]) = fill;
        params.interpolation = ParseInterpolation(interpolation);
        Image out;
        out.Reset(src.width, src.height);
        {
          nb::gil_scoped_release release;
          decode::Warp(src, params, out.mutable_view());
        }
        return ToNumpy(out.view());
      },
      nb::arg("pixels"), nb::arg("angle"), nb::arg("zoom") = 1.0,
      nb::arg("fill") = std::make_tuple(0, 0, 0), nb::arg("interpolation") = "nearest",
      "Rotates by `angle` degrees (counter-clockwise) and zooms about the centre, as "
      "torchvision's affine transforms do for PIL images.");
}

}  // namespace stoker::python
