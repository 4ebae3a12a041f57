"""Pixels of stoker's resize and warp against PIL, which torchvision's transforms call.

stoker reproduces Pillow's arithmetic step by step, so with Pillow >= 13 (whose resampling
order rule it follows) the results are expected to be identical, value for value; with an older
Pillow they may differ by one where the two passes ran in the other order.

Inputs are real photos (desktop wallpapers shipped with the system, downscaled with PIL to
about 500x400) and random noise, with many random crop boxes from a fixed seed.
"""
from __future__ import annotations

import glob
import math
import random

import numpy as np
import pytest
from PIL import Image

core = pytest.importorskip("stoker._core")
image_ops = core.image

PIL_MAJOR = int(Image.__version__.split(".")[0])
EXACT = PIL_MAJOR >= 13  # Pillow 13 runs the vertical pass first when height shrinks most

FILTERS = {"nearest": Image.NEAREST, "bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC}


def _photos() -> list[Image.Image]:
    paths = sorted(glob.glob("/usr/share/wallpapers/*/contents/images/*.jpg"))
    paths += sorted(glob.glob("/usr/share/backgrounds/gnome/*.jpg"))
    chosen, seen = [], set()
    for path in paths:  # one picture per wallpaper, the smallest file of it
        folder = path.split("/contents/")[0]
        if folder not in seen:
            seen.add(folder)
            chosen.append(path)
    photos = []
    for i, path in enumerate(chosen[:4]):
        size = [(500, 400), (470, 390), (400, 500), (333, 251)][i]
        photos.append(Image.open(path).convert("RGB").resize(size, Image.BILINEAR))
    if not photos:  # no wallpapers here: a smooth synthetic picture instead
        y, x = np.mgrid[0:400, 0:500]
        pixels = np.stack([x * 255 // 499, y * 255 // 399, (x * 7 + y * 13) % 256], axis=2)
        photos.append(Image.fromarray(pixels.astype(np.uint8)))
    return photos


def _noise(width: int, height: int, seed: int) -> Image.Image:
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


@pytest.fixture(scope="module")
def images() -> list[Image.Image]:
    return _photos() + [_noise(370, 300, 1), _noise(97, 131, 2)]


@pytest.fixture(scope="module")
def small_images(images) -> list[Image.Image]:
    """The warp tests' inputs: half size (warping samples every pixel the slow way in Pillow)."""
    return [img.resize((img.width // 2, img.height // 2), Image.BILINEAR) for img in images]


def _assert_matches(ours: np.ndarray, ref: np.ndarray, what: str) -> None:
    assert ours.shape == ref.shape, what
    diff = np.abs(ours.astype(int) - ref.astype(int))
    if EXACT:
        assert diff.max() == 0, f"{what}: {np.count_nonzero(diff)} values differ, max {diff.max()}"
    else:
        assert diff.max() <= 1, f"{what}: max difference {diff.max()}"


def _random_box(rng: random.Random, width: int, height: int) -> tuple[float, ...]:
    """A RandomResizedCrop-like box: fractional half the time, as after DCT scaling."""
    area = rng.uniform(0.08, 1.0) * width * height
    ratio = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
    w = min(width, max(1.0, math.sqrt(area * ratio)))
    h = min(height, max(1.0, math.sqrt(area / ratio)))
    x0 = rng.uniform(0, width - w)
    y0 = rng.uniform(0, height - h)
    if rng.random() < 0.5:
        return (float(int(x0)), float(int(y0)), float(int(x0) + int(w)), float(int(y0) + int(h)))
    return (x0, y0, x0 + w, y0 + h)


@pytest.mark.parametrize("interpolation", list(FILTERS))
def test_resize_random_boxes_match_pil(images, interpolation):
    rng = random.Random(1234)
    for index, img in enumerate(images):
        pixels = np.asarray(img)
        for trial in range(30):
            box = _random_box(rng, img.width, img.height)
            size = rng.choice([(224, 224), (224, 224), (rng.randint(1, 400), rng.randint(1, 400)),
                               (rng.randint(1, 16), rng.randint(1, 16))])
            ours = image_ops.resize(pixels, size, box=box, interpolation=interpolation)
            ref = np.asarray(img.resize(size, FILTERS[interpolation], box=box))
            _assert_matches(ours, ref, f"image {index} box {box} size {size}")


@pytest.mark.parametrize("interpolation", list(FILTERS))
def test_resize_whole_images_match_pil(images, interpolation):
    # torchvision's Resize(256) on its own, up and down, and sizes that make Pillow take the
    # vertical pass first (height shrinking by more than twice as many pixels as width).
    for index, img in enumerate(images):
        pixels = np.asarray(img)
        short = min(img.width, img.height)
        sizes = [(round(img.width * 256 / short), round(img.height * 256 / short)),
                 (img.width * 2 + 1, img.height + 3), (img.width - 5, img.height // 3),
                 (img.width, img.height - 1), (7, 5)]
        for size in sizes:
            ours = image_ops.resize(pixels, size, interpolation=interpolation)
            ref = np.asarray(img.resize(size, FILTERS[interpolation]))
            _assert_matches(ours, ref, f"image {index} size {size}")


def test_resize_box_partly_outside_is_clamped(images):
    img = images[0]
    pixels = np.asarray(img)
    for box, clamped in [((-20.5, -3.0, 120.0, 90.0), (0.0, 0.0, 120.0, 90.0)),
                         ((img.width - 50.5, 10.0, img.width + 40.0, img.height + 1.0),
                          (img.width - 50.5, 10.0, float(img.width), float(img.height)))]:
        for interpolation, resample in FILTERS.items():
            ours = image_ops.resize(pixels, (64, 48), box=box, interpolation=interpolation)
            ref = np.asarray(img.resize((64, 48), resample, box=clamped))
            _assert_matches(ours, ref, f"box {box}")


def _torchvision_inverse_affine(center, angle, translate, scale, shear):
    """torchvision.transforms.functional._get_inverse_affine_matrix, restated for the test."""
    rot = math.radians(angle)
    sx, sy = math.radians(shear[0]), math.radians(shear[1])
    cx, cy = center
    tx, ty = translate
    a = math.cos(rot - sy) / math.cos(sy)
    b = -math.cos(rot - sy) * math.tan(sx) / math.cos(sy) - math.sin(rot)
    c = math.sin(rot - sy) / math.cos(sy)
    d = -math.sin(rot - sy) * math.tan(sx) / math.cos(sy) + math.cos(rot)
    matrix = [x / scale for x in [d, -b, 0.0, -c, a, 0.0]]
    matrix[2] += matrix[0] * (-cx - tx) + matrix[1] * (-cy - ty)
    matrix[5] += matrix[3] * (-cx - tx) + matrix[4] * (-cy - ty)
    matrix[2] += cx
    matrix[5] += cy
    return matrix


def _random_affine(img: Image.Image, angle: float, zoom: float, resample, fill) -> np.ndarray:
    """torchvision's F.affine on a PIL image (RandomAffine): angle clockwise, centre w/2, h/2."""
    matrix = _torchvision_inverse_affine([img.width * 0.5, img.height * 0.5], angle, [0, 0],
                                         zoom, [0.0, 0.0])
    return np.asarray(img.transform(img.size, Image.AFFINE, matrix, resample, fillcolor=fill))


ANGLES = [0.0, 90.0, -90.0, 180.0, 45.0, 30.0, -12.5, 170.25, 359.0, 725.0]


@pytest.mark.parametrize("interpolation", list(FILTERS))
def test_warp_rotation_matches_pil_rotate(small_images, interpolation):
    # RandomRotation on a PIL image is Image.rotate(angle, resample, fillcolor=fill).
    rng = random.Random(99)
    for index, small in enumerate(small_images):
        pixels = np.asarray(small)
        for angle in ANGLES + [rng.uniform(-180, 180) for _ in range(4)]:
            fill = tuple(rng.randint(0, 255) for _ in range(3))
            ours = image_ops.warp(pixels, angle, 1.0, fill, interpolation)
            ref = np.asarray(small.rotate(angle, resample=FILTERS[interpolation], fillcolor=fill))
            _assert_matches(ours, ref, f"image {index} angle {angle}")


@pytest.mark.parametrize("interpolation", list(FILTERS))
def test_warp_zoom_matches_torchvision_affine(small_images, interpolation):
    rng = random.Random(7)
    for index, small in enumerate(small_images):
        pixels = np.asarray(small)
        for _ in range(6):
            angle = rng.choice([0.0, 90.0, rng.uniform(-180, 180)])
            zoom = rng.choice([0.5, 1.25, rng.uniform(0.7, 1.5)])
            fill = tuple(rng.randint(0, 255) for _ in range(3))
            ours = image_ops.warp(pixels, angle, zoom, fill, interpolation)
            # stoker's angle is counter-clockwise, F.affine's clockwise.
            ref = _random_affine(small, -angle, zoom, FILTERS[interpolation], fill)
            _assert_matches(ours, ref, f"image {index} angle {angle} zoom {zoom}")


def test_warp_rotation_is_close_to_random_affine(small_images):
    # At zoom 1 stoker follows Image.rotate, whose matrix is rounded to 15 decimals; RandomAffine
    # with scale 1 uses the unrounded one. Only positions on a rounding tie can differ.
    rng = random.Random(5)
    differing = total = 0
    for small in small_images:
        for _ in range(5):
            angle = rng.uniform(-180, 180)
            for interpolation in ("nearest", "bilinear"):
                ours = image_ops.warp(np.asarray(small), angle, 1.0, (0, 0, 0), interpolation)
                ref = _random_affine(small, -angle, 1.0, FILTERS[interpolation], (0, 0, 0))
                diff = np.abs(ours.astype(int) - ref.astype(int)).max(axis=2)
                differing += np.count_nonzero(diff)
                total += diff.size
                if interpolation == "bilinear":
                    assert diff.max() <= 1
    assert differing <= total * 1e-3, f"{differing} of {total} pixels differ"
