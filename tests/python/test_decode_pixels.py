"""stoker._core.image.decode against PIL, pixel for pixel.

Full decodes must equal Image.open().convert("RGB"); DCT-scaled decodes must equal PIL's
Image.draft("RGB", size), which uses the same libjpeg scaling; region decodes must equal the same
pixels of the full decode at that scale. Both sides use libjpeg-turbo's defaults (accurate
integer IDCT, fancy upsampling), so the expected difference is 0, not a tolerance.

The JPEGs are real photos (the desktop wallpapers shipped with the system, downscaled to about
500x400 and saved at quality 90, like ImageNet files) and synthetic ones covering the layouts
(progressive, grayscale, 4:4:4, CMYK, odd sizes).
"""
from __future__ import annotations

import glob
import io
import math
import random
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

import stoker
from stoker._core import image as simage

PHOTO_SOURCES = sorted(glob.glob("/usr/share/wallpapers/*/contents/images/*.jpg")
                       + glob.glob("/usr/share/backgrounds/gnome/*.jpg"))


def jpeg_bytes(im: Image.Image, **options) -> bytes:
    buf = io.BytesIO()
    im.save(buf, format="JPEG", **options)
    return buf.getvalue()


def png_bytes(im: Image.Image, **options) -> bytes:
    buf = io.BytesIO()
    im.save(buf, format="PNG", **options)
    return buf.getvalue()


def synthetic(width: int, height: int, seed: int, channels: int = 3) -> np.ndarray:
    """Smooth gradients, an edge and noise: behaves like a photo under JPEG."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    fx, fy = rng.uniform(1, 8, 2)
    planes = [128 + 90 * np.sin(fx * x / width * (c + 1) + fy * y / height)
              + np.where(x / width + 0.3 * y / height > 0.5, 30, -30) for c in range(channels)]
    noisy = np.stack(planes, -1) + rng.integers(-20, 21, (height, width, channels))
    return np.clip(noisy, 0, 255).astype(np.uint8)


def pil_rgb(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def pil_draft(data: bytes, size: tuple[int, int]) -> tuple[np.ndarray, float]:
    """PIL's DCT-scaled decode for a requested size: (pixels, the scale PIL chose)."""
    im = Image.open(io.BytesIO(data))
    width = im.width
    _, box = im.draft("RGB", size)
    return np.asarray(im.convert("RGB")), box[2] / width


def pil_at_scale(data: bytes, m: int) -> np.ndarray:
    """PIL's decode at scale m/8."""
    width, height = Image.open(io.BytesIO(data)).size
    pixels, scale = pil_draft(data, (width * m // 8, height * m // 8))
    assert scale == m / 8
    return pixels


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> dict[str, bytes]:
    """Real photos, downscaled to about 500x400, as baseline 4:2:0, progressive and 4:4:4."""
    out_dir = tmp_path_factory.mktemp("photos")
    # One size per wallpaper (the sources come in many resolutions of the same picture).
    by_theme: dict[str, str] = {}
    for path in PHOTO_SOURCES:
        by_theme.setdefault(path.split("/contents/")[0], path)
    sources = list(by_theme.values())[:6]
    photos = {}
    for i, path in enumerate(sources):
        im = Image.open(path).convert("RGB")
        im.thumbnail((500, 400), Image.Resampling.LANCZOS)
        options = [{}, {"progressive": True}, {"subsampling": 0}][i % 3]
        name = f"photo{i}_{'_'.join(options) or 'baseline'}.jpg"
        (out_dir / name).write_bytes(jpeg_bytes(im, quality=90, **options))
        photos[name] = (out_dir / name).read_bytes()
    if not photos:
        pytest.skip("no wallpapers installed to make real photos from")
    return photos


SYNTHETIC = {
    "baseline_420": lambda: jpeg_bytes(Image.fromarray(synthetic(333, 247, 1)), quality=90),
    "baseline_444": lambda: jpeg_bytes(Image.fromarray(synthetic(256, 192, 2)), quality=95,
                                       subsampling=0),
    "baseline_422": lambda: jpeg_bytes(Image.fromarray(synthetic(161, 97, 3)), quality=85,
                                       subsampling=1),
    "progressive": lambda: jpeg_bytes(Image.fromarray(synthetic(300, 200, 4)), quality=90,
                                      progressive=True),
    "grayscale": lambda: jpeg_bytes(Image.fromarray(synthetic(123, 77, 5)[..., 0], "L"),
                                    quality=90),
    "cmyk": lambda: jpeg_bytes(Image.fromarray(synthetic(120, 90, 6, channels=4), "CMYK"),
                               quality=90),
    "odd_17x9": lambda: jpeg_bytes(Image.fromarray(synthetic(17, 9, 7)), quality=90),
    "one_pixel": lambda: jpeg_bytes(Image.fromarray(synthetic(1, 1, 8)), quality=90),
    "tall_3x1001": lambda: jpeg_bytes(Image.fromarray(synthetic(3, 1001, 9)), quality=90),
}


@pytest.fixture(scope="module")
def jpegs(photos) -> dict[str, bytes]:
    return {**photos, **{name: make() for name, make in SYNTHETIC.items()}}


def test_full_decode_equals_pil(jpegs):
    for name, data in jpegs.items():
        pixels, info = simage.decode(data)
        expected = pil_rgb(data)
        assert pixels.shape == expected.shape, name
        diff = np.abs(pixels.astype(int) - expected).max()
        assert diff == 0, f"{name}: max abs diff {diff}"
        assert info["format"] == "jpeg"
        assert (info["width"], info["height"]) == (expected.shape[1], expected.shape[0])
        assert info["scale"] == (1.0, 1.0) and info["origin"] == (0.0, 0.0)


@pytest.mark.parametrize("denominator", [2, 4, 8])
def test_scaled_decode_equals_pil_draft(jpegs, denominator):
    # stoker picks the smallest scale that keeps min_size, PIL's draft the largest reduction
    # that keeps the requested size: the same choice.
    for name, data in jpegs.items():
        width, height = Image.open(io.BytesIO(data)).size
        min_size = (max(1, width // denominator), max(1, height // denominator))
        pixels, info = simage.decode(data, min_size=min_size)
        expected, scale = pil_draft(data, min_size)
        assert info["scale"] == (scale, scale), name
        if width >= 8 and height >= 8:
            assert scale == 1 / denominator
        assert pixels.shape == expected.shape, name
        diff = np.abs(pixels.astype(int) - expected).max()
        assert diff == 0, f"{name} at {scale}: max abs diff {diff}"


def random_resized_crop(rng: random.Random, width: int, height: int) -> tuple[int, int, int, int]:
    """torchvision's RandomResizedCrop.get_params: area 8%-100%, aspect 3/4-4/3."""
    for _ in range(10):
        area = width * height * rng.uniform(0.08, 1.0)
        aspect = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
        w, h = round(math.sqrt(area * aspect)), round(math.sqrt(area / aspect))
        if 0 < w <= width and 0 < h <= height:
            return rng.randint(0, width - w), rng.randint(0, height - h), w, h
    side = min(width, height)
    return (width - side) // 2, (height - side) // 2, side, side


def test_region_decode_equals_full_decode(jpegs):
    rng = random.Random(0)
    for name, data in jpegs.items():
        width, height = Image.open(io.BytesIO(data)).size
        full = {8: pil_rgb(data)}
        for _ in range(25):
            x, y, w, h = random_resized_crop(rng, width, height)
            # Sometimes a min size that allows DCT scaling (a 224 crop of a large region).
            target = rng.choice([None, 1, 2, 4])
            min_size = None
            if target is not None:
                min_size = (max(1, w * target // 8), max(1, h * target // 8))
            pixels, info = simage.decode(data, region=(x, y, w, h), min_size=min_size)
            sx, sy = info["scale"]
            ox, oy = info["origin"]
            m = round(sx * 8)
            assert sx == sy and m in (1, 2, 4, 8)
            if min_size is not None:
                assert w * sx >= min_size[0] and h * sy >= min_size[1]
            if m not in full:
                full[m] = pil_at_scale(data, m)
            reference = full[m]
            # The decoded pixels the region touches, in reference (scaled) coordinates.
            x0, y0 = math.floor(x * sx), math.floor(y * sy)
            x1 = min(reference.shape[1], math.ceil((x + w) * sx))
            y1 = min(reference.shape[0], math.ceil((y + h) * sy))
            assert 0 <= x0 - ox and x1 - ox <= pixels.shape[1], (name, x, y, w, h, info)
            assert 0 <= y0 - oy and y1 - oy <= pixels.shape[0], (name, x, y, w, h, info)
            got = pixels[int(y0 - oy):int(y1 - oy), int(x0 - ox):int(x1 - ox)]
            diff = np.abs(got.astype(int) - reference[y0:y1, x0:x1]).max()
            assert diff == 0, f"{name} region {(x, y, w, h)} at {m}/8: max abs diff {diff}"


def test_region_decode_decodes_less(photos):
    data = next(iter(photos.values()))
    width, height = Image.open(io.BytesIO(data)).size
    pixels, info = simage.decode(data, region=(width // 2, height // 2, 64, 48))
    assert pixels.shape[0] == 48  # exactly the rows asked for
    assert pixels.shape[1] < width  # and a crop of the columns
    assert info["origin"][1] == height // 2


def test_png_equals_pil():
    rgb = synthetic(61, 43, 11)
    rgba = synthetic(61, 43, 12, channels=4)
    cases = {
        "rgb": Image.fromarray(rgb),
        "rgba": Image.fromarray(rgba, "RGBA"),  # alpha dropped, not composited
        "gray": Image.fromarray(rgb[..., 0], "L"),
        "gray_alpha": Image.fromarray(rgba[..., :2].copy(), "LA"),
        "bilevel": Image.fromarray(rgb[..., 0] > 128),
        "palette": Image.fromarray(rgb).quantize(37),
        "palette_transparent": Image.fromarray(rgb).quantize(200),
    }
    for name, im in cases.items():
        options = {"transparency": 5} if name == "palette_transparent" else {}
        data = png_bytes(im, **options)
        pixels, info = simage.decode(data, region=(3, 4, 10, 10), min_size=(2, 2))
        assert info["format"] == "png"
        assert info["scale"] == (1.0, 1.0) and info["origin"] == (0.0, 0.0)  # always whole
        diff = np.abs(pixels.astype(int) - pil_rgb(data)).max()
        assert diff == 0, f"{name}: max abs diff {diff}"


def raw_png(width: int, height: int, color_type: int, bit_depth: int, rows: list[bytes],
            extra_chunks: bytes = b"") -> bytes:
    """A PNG written by hand, for what Pillow cannot write (16-bit RGB, a gAMA chunk)."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body)
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)
    header = struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, 0)
    data = zlib.compress(b"".join(b"\0" + row for row in rows))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + extra_chunks + chunk(b"IDAT", data)
            + chunk(b"IEND", b""))


def gamma_chunk(gamma: float) -> bytes:
    body = struct.pack(">I", round(gamma * 100000))
    return struct.pack(">I", 4) + b"gAMA" + body + struct.pack(">I", zlib.crc32(b"gAMA" + body))


def test_png_16_bit_keeps_the_high_byte():
    rng = np.random.default_rng(19)
    rgb16 = rng.integers(0, 65536, (9, 13, 3), dtype=np.uint16)
    data = raw_png(13, 9, 2, 16, [row.astype(">u2").tobytes() for row in rgb16])
    pixels, _ = simage.decode(data)
    assert np.array_equal(pixels, pil_rgb(data))  # PIL reads 16-bit RGB as "RGB;16B"
    assert np.array_equal(pixels, (rgb16 >> 8).astype(np.uint8))
    # 16-bit gray: PIL opens it as "I;16" and its convert("RGB") clips every value to 255;
    # stoker takes the high byte, as for the other 16-bit types.
    gray16 = rng.integers(0, 65536, (9, 13), dtype=np.uint16)
    data = raw_png(13, 9, 0, 16, [row.astype(">u2").tobytes() for row in gray16])
    pixels, _ = simage.decode(data)
    assert np.array_equal(pixels, np.repeat((gray16 >> 8).astype(np.uint8)[..., None], 3, -1))


@pytest.mark.parametrize("gamma", [1.0, 1 / 1.8, 1 / 2.2])
def test_png_gamma_is_ignored_as_by_pil(gamma):
    rgb = synthetic(13, 9, 20)
    data = raw_png(13, 9, 2, 8, [row.tobytes() for row in rgb], gamma_chunk(gamma))
    pixels, _ = simage.decode(data)
    assert np.array_equal(pixels, pil_rgb(data))
    assert np.array_equal(pixels, rgb)


def test_png_named_jpg_decodes(tmp_path):
    path = tmp_path / "actually_a_png.jpg"
    path.write_bytes(png_bytes(Image.fromarray(synthetic(8, 8, 14))))
    pixels, info = simage.decode(path.read_bytes())
    assert info["format"] == "png" and pixels.shape == (8, 8, 3)


def test_info():
    data = jpeg_bytes(Image.fromarray(synthetic(33, 21, 15)[..., 0], "L"), progressive=True)
    assert simage.info(data) == {"format": "jpeg", "width": 33, "height": 21, "components": 1,
                                 "progressive": True}
    data = png_bytes(Image.fromarray(synthetic(7, 5, 16, channels=4), "RGBA"))
    assert simage.info(data) == {"format": "png", "width": 7, "height": 5, "components": 4,
                                 "progressive": False}


def test_errors_raise_the_mapped_exceptions():
    data = jpeg_bytes(Image.fromarray(synthetic(64, 48, 17)), quality=90)
    # Truncated: a damaged image is bad input, ValueError, for full and region decodes; not
    # stoker.CorruptionError, which says stored bytes changed (a CRC mismatch).
    for cut in (len(data) // 3, len(data) - 2):
        for region in (None, (0, 0, 8, 8)):
            with pytest.raises(ValueError, match="jpeg: ") as caught:
                simage.decode(data[:cut], region=region)
            assert not isinstance(caught.value, stoker.CorruptionError)
    with pytest.raises(ValueError, match="png: "):
        simage.decode(png_bytes(Image.fromarray(synthetic(64, 48, 18)))[:200])
    # Not an image at all: ValueError, saying what the bytes start with.
    with pytest.raises(ValueError, match="not a JPEG or PNG image"):
        simage.decode(b"GIF89a" + bytes(100))
    with pytest.raises(ValueError, match="not a JPEG or PNG image"):
        simage.info(b"")
    # Over the pixel limit: OSError with code ResourceExhausted, before any pixel is decoded.
    with pytest.raises(OSError, match="exceeds the limit") as caught:
        simage.decode(data, max_pixels=64 * 48 - 1)
    assert caught.value.code == "ResourceExhausted"
    assert not isinstance(caught.value, stoker.CorruptionError)
    # A region outside the image is the caller's mistake.
    with pytest.raises(ValueError, match="outside"):
        simage.decode(data, region=(64, 0, 4, 4))
