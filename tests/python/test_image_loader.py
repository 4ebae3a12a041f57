"""stoker.ImageLoader: batches of decoded, augmented images — checked pixel by pixel against
torchvision's definitions computed with PIL, for determinism, resume, the error policy and the
distribution of the random parameters."""
from __future__ import annotations

import glob
import io
import logging
import math
import random
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import stoker

torch = pytest.importorskip("torch")

MEAN = np.array(stoker.image_loader.IMAGENET_MEAN, dtype=np.float32)
STD = np.array(stoker.image_loader.IMAGENET_STD, dtype=np.float32)


def photo_sources() -> list[Image.Image]:
    """A few real photographs (Debian's wallpapers), downscaled whole."""
    paths = sorted(glob.glob("/usr/share/wallpapers/*/contents/images/*.jpg") +
                   glob.glob("/usr/share/backgrounds/gnome/*.jpg"))
    if not paths:
        pytest.skip("no wallpaper photographs installed (scripts/setup installs them)")
    rng = random.Random(4)
    images = []
    for path in rng.sample(paths, min(6, len(paths))):
        im = Image.open(path).convert("RGB")
        im.thumbnail((360, 360), Image.BICUBIC)
        images.append(im)
    return images


def write_photo_tree(root: Path, count: int, extra: dict[str, bytes] | None = None) -> dict[str, bytes]:
    """`count` JPEGs (assorted sizes, some progressive, some grayscale) and PNGs in 3 classes."""
    rng = random.Random(7)
    sources = photo_sources()
    files: dict[str, bytes] = {}
    for i in range(count):
        im = sources[i % len(sources)]
        w, h = rng.randint(120, im.width), rng.randint(100, im.height)
        x, y = rng.randint(0, im.width - w), rng.randint(0, im.height - h)
        crop = im.crop((x, y, x + w, y + h))
        buf = io.BytesIO()
        if i % 7 == 6:
            crop.save(buf, "PNG")
            name = f"c{i % 3}/img{i:03d}.png"
        else:
            if i % 5 == 3:
                crop = crop.convert("L")
            crop.save(buf, "JPEG", quality=rng.choice([75, 90]), progressive=i % 4 == 1)
            name = f"c{i % 3}/img{i:03d}.jpg"
        files[name] = buf.getvalue()
    files.update(extra or {})
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return files


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> tuple[str, dict[str, bytes]]:
    root = tmp_path_factory.mktemp("photos")
    files = write_photo_tree(root / "src", 36)
    stoker.pack(str(root / "src"), str(root / "ds"), chunk_size=256 << 10)
    return str(root / "ds"), files


def pil_reference(data: bytes, params: dict, size: tuple[int, int]) -> np.ndarray:
    """torchvision's PIL pipeline for one sample, from the parameters stoker drew: uint8 HWC."""
    im = Image.open(io.BytesIO(data)).convert("RGB")
    x0, y0, x1, y1 = params["box"]
    if params["clip_to_box"]:  # RandomResizedCrop: crop, then resize
        out = im.crop((round(x0), round(y0), round(x1), round(y1))).resize(
            (size[1], size[0]), Image.BILINEAR)
    else:  # Resize on the whole image, then CenterCrop: the same box, neighbours included
        out = im.resize((size[1], size[0]), Image.BILINEAR, box=(x0, y0, x1, y1))
    if params["flip"]:
        out = out.transpose(Image.FLIP_LEFT_RIGHT)
    return np.asarray(out)


def all_batches(loader) -> tuple[np.ndarray, np.ndarray]:
    xs, ys = [], []
    for images, labels in loader:
        xs.append(images.numpy().copy())
        ys.append(labels.numpy().copy())
    return np.concatenate(xs), np.concatenate(ys)


@pytest.mark.parametrize("train", [True, False])
def test_pixels_match_torchvision_semantics(photos, train):
    uri, files = photos
    ds = stoker.Dataset(uri)
    loader = stoker.ImageLoader(uri, batch_size=8, train=train, size=(48, 64), resize=72,
                                dtype="uint8", layout="NHWC", shuffle="sequential",
                                dct_scaling=False, seed=3)
    images, labels = all_batches(loader)
    assert images.shape == (len(ds), 48, 64, 3) and images.dtype == np.uint8
    worst = 0
    # "sequential" is storage order: chunk after chunk, by chunk index (a chunk's id is random).
    order = sorted(range(len(ds)), key=lambda i: (ds.stat(i)["chunk_index"], i))
    for position, sample in enumerate(order):
        data, label, path = ds[sample]
        assert labels[position] == label
        with Image.open(io.BytesIO(data)) as im:
            params = loader.sample_params(sample, im.width, im.height, epoch=0)
        expected = pil_reference(data, params, (48, 64))
        diff = np.abs(images[position].astype(int) - expected.astype(int))
        worst = max(worst, int(diff.max()))
        assert diff.max() <= 2, f"{path}: max diff {diff.max()}"
        assert (diff > 1).mean() < 0.001, path
    print("max abs difference vs PIL:", worst)


def torchvision_validation(data: bytes, resize: int, size: tuple[int, int]) -> np.ndarray:
    """torchvision's Resize(resize) + CenterCrop(size) with the PIL backend, as they compute it:
    the whole image resized, then a crop of whole pixels."""
    im = Image.open(io.BytesIO(data)).convert("RGB")
    w, h = im.size
    if w <= h:
        rw, rh = resize, int(resize * h / w)
    else:
        rw, rh = int(resize * w / h), resize
    resized = im.resize((rw, rh), Image.BILINEAR)
    top, left = int(round((rh - size[0]) / 2.0)), int(round((rw - size[1]) / 2.0))
    return np.asarray(resized.crop((left, top, left + size[1], top + size[0])))


def test_validation_differs_from_resize_then_center_crop_by_at_most_one_level(photos):
    # What docs/augment.md states: validation resamples only the centre crop's box of the
    # source (PIL's resize with a float box), not the whole image; the box's corners are
    # rounded to float, so a few filter windows shift by a fraction of a pixel's width and
    # some values move by one level, never more.
    uri, _ = photos
    ds = stoker.Dataset(uri)
    loader = stoker.ImageLoader(uri, batch_size=8, train=False, size=(48, 64), resize=72,
                                dtype="uint8", layout="NHWC", shuffle="sequential",
                                dct_scaling=False)
    images, _ = all_batches(loader)
    order = sorted(range(len(ds)), key=lambda i: (ds.stat(i)["chunk_index"], i))
    differing = total = 0
    for position, sample in enumerate(order):
        expected = torchvision_validation(ds[sample][0], 72, (48, 64))
        diff = np.abs(images[position].astype(int) - expected.astype(int))
        assert diff.max() <= 1, f"{ds[sample][2]}: max diff {diff.max()}"
        differing += int((diff > 0).sum())
        total += diff.size
    print(f"values differing from Resize+CenterCrop by one level: {differing / total:.4%}")
    assert differing / total < 0.01


def test_validation_without_center_crop_is_resize_to_size(photos):
    # center_crop=False: torchvision's Resize((h, w)) of the whole image (ray.data.read_images'
    # size), PIL's pixels exactly without DCT scaling.
    uri, _ = photos
    ds = stoker.Dataset(uri)
    loader = stoker.ImageLoader(uri, batch_size=8, train=False, size=(48, 64), center_crop=False,
                                dtype="uint8", layout="NHWC", shuffle="sequential",
                                dct_scaling=False)
    images, _ = all_batches(loader)
    order = sorted(range(len(ds)), key=lambda i: (ds.stat(i)["chunk_index"], i))
    for position, sample in enumerate(order):
        with Image.open(io.BytesIO(ds[sample][0])) as im:
            expected = np.asarray(im.convert("RGB").resize((64, 48), Image.BILINEAR))
        assert np.array_equal(images[position], expected), ds[sample][2]


def test_transform_images_threads_and_files_that_are_no_image(photos):
    # The batch decode behind stoker.ray.read_images: every thread count gives the same pixels
    # (seeded per sample index), a README is left out by its name, a damaged JPEG fails by its.
    from stoker._core import transform_images
    uri, files = photos
    names = sorted(files)[:9] + ["c0/README.txt", "c0/broken.jpg"]
    data = [files[n] for n in names[:9]] + [b"not an image", b"\xff\xd8\xff broken"]
    indices = np.arange(len(data), dtype=np.uint32) * 3
    options = {"train": True, "size": 40, "dtype": "uint8", "layout": "NHWC"}
    one, failed, not_images = transform_images(data, options, indices, 5, 0, 1, names)
    assert not_images == [9] and [i for i, _ in failed] == [10]
    assert failed[0][1].startswith("InvalidArgument: jpeg:"), failed
    for threads in (2, 4, 11, 16):
        again, f, n = transform_images(data, options, indices, 5, 0, threads, names)
        assert np.array_equal(again, one) and f == failed and n == not_images
    assert not one[9].any() and not one[10].any()  # their slots are zeros
    assert transform_images(data, options, indices, 6)[0][:9].tobytes() != one[:9].tobytes()
    with pytest.raises(ValueError, match="threads"):
        transform_images(data, options, indices, 5, 0, 0)
    with pytest.raises(ValueError, match="too large|larger than an image may be"):
        transform_images(data, {"size": (2**31, 2**31), "train": False, "center_crop": False,
                                "dtype": "float32"}, indices)


def test_float_output_is_the_normalized_uint8(photos):
    uri, _ = photos
    common = dict(batch_size=10, size=40, shuffle="sequential", seed=1)
    u8, _ = all_batches(stoker.ImageLoader(uri, dtype="uint8", layout="NCHW", **common))
    f32, _ = all_batches(stoker.ImageLoader(uri, **common))
    assert f32.dtype == np.float32 and f32.shape == u8.shape
    expected = (u8.astype(np.float32) / 255 - MEAN[None, :, None, None]) / STD[None, :, None, None]
    np.testing.assert_allclose(f32, expected, atol=1e-5)
    nhwc, _ = all_batches(stoker.ImageLoader(uri, layout="NHWC", **common))
    np.testing.assert_array_equal(nhwc, f32.transpose(0, 2, 3, 1))


def test_deterministic_and_epochs_differ(photos):
    uri, _ = photos
    a = stoker.ImageLoader(uri, batch_size=5, size=32, seed=9, threads=1)
    b = stoker.ImageLoader(uri, batch_size=7, size=32, seed=9, threads=2)
    xa, ya = all_batches(a)
    xb, yb = all_batches(b)
    np.testing.assert_array_equal(xa, xb)
    np.testing.assert_array_equal(ya, yb)
    xa1, _ = all_batches(a)  # the pass moved a on to epoch 1: new order, new crops
    assert a.epoch == 2 and not np.array_equal(xa1, xa)
    b.set_epoch(1)
    xb1, _ = all_batches(b)
    np.testing.assert_array_equal(xa1, xb1)


def test_resume_continues_with_the_same_pixels(photos):
    uri, _ = photos
    full = stoker.ImageLoader(uri, batch_size=4, size=32, seed=2)
    expected, _ = all_batches(full)
    first = stoker.ImageLoader(uri, batch_size=4, size=32, seed=2)
    it = iter(first)
    seen = [next(it)[0].numpy().copy() for _ in range(3)]
    state = first.state_dict()
    del it
    second = stoker.ImageLoader(uri, batch_size=4, size=32, seed=2)
    second.load_state_dict(state)
    rest, _ = all_batches(second)
    np.testing.assert_array_equal(np.concatenate(seen + [rest]), expected)


def test_ranks_split_the_epoch(photos):
    uri, _ = photos
    ds = stoker.Dataset(uri)
    counts = []
    for rank in range(3):
        loader = stoker.ImageLoader(uri, batch_size=4, size=16, rank=rank, world_size=3)
        images, _ = all_batches(loader)
        counts.append(len(images))
        assert len(loader) == math.ceil(math.ceil(len(ds) / 3) / 4)
    assert counts == [math.ceil(len(ds) / 3)] * 3


def test_rank_from_torchrun_environment_and_batch_transform(photos, monkeypatch):
    uri, _ = photos
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    flipped = stoker.ImageLoader(uri, batch_size=4, size=16, seed=6,
                                 batch_transform=lambda x, y: (x.flip(-1), y + 100))
    assert (flipped.rank, flipped.world_size) == (1, 2)
    plain = stoker.ImageLoader(uri, batch_size=4, size=16, seed=6)
    for (a, la), (b, lb) in zip(flipped, plain):
        assert torch.equal(a, b.flip(-1)) and torch.equal(la, lb + 100)


def test_batches_are_torch_tensors_sharing_recycled_buffers(photos):
    uri, _ = photos
    loader = stoker.ImageLoader(uri, batch_size=6, size=24, prefetch_batches=1, threads=1)
    pointers = set()
    for images, labels in loader:
        assert isinstance(images, torch.Tensor) and images.dtype == torch.float32
        assert labels.dtype == torch.int64 and images.shape == (len(labels), 3, 24, 24)
        pointers.add(images.data_ptr())
        del images
    # Freed tensors give their buffers back: 6 batches, far fewer distinct buffers.
    assert len(pointers) <= 4
    stats = loader.stats()
    assert stats["samples"] == len(stoker.Dataset(uri))
    assert stats["decode_seconds"] > 0 and stats["images_per_second"] > 0


def test_rotation_and_zoom(photos):
    uri, _ = photos
    common = dict(batch_size=36, size=32, seed=4, dtype="uint8", shuffle="sequential")
    plain, _ = all_batches(stoker.ImageLoader(uri, **common))
    rotated, _ = all_batches(stoker.ImageLoader(uri, rotation=40, zoom=(0.8, 1.2), **common))
    again, _ = all_batches(stoker.ImageLoader(uri, rotation=40, zoom=(0.8, 1.2), **common))
    np.testing.assert_array_equal(rotated, again)
    assert not np.array_equal(rotated, plain)
    loader = stoker.ImageLoader(uri, rotation=40, zoom=(0.8, 1.2), **common)
    params = [loader.sample_params(s, 300, 200) for s in range(200)]
    assert all(-40 <= p["angle"] <= 40 for p in params)
    assert all(0.8 <= p["zoom"] <= 1.2 for p in params)


def torchvision_crop_params(rng: np.random.Generator, width: int, height: int,
                            scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)) -> tuple[int, int, int, int]:
    """A port of torchvision's RandomResizedCrop.get_params (its documented definition)."""
    area = width * height
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target_area = area * rng.uniform(scale[0], scale[1])
        aspect = math.exp(rng.uniform(*log_ratio))
        w = int(round(math.sqrt(target_area * aspect)))
        h = int(round(math.sqrt(target_area / aspect)))
        if 0 < w <= width and 0 < h <= height:
            i = int(rng.integers(0, height - h + 1))
            j = int(rng.integers(0, width - w + 1))
            return j, i, w, h
    in_ratio = width / height
    if in_ratio < min(ratio):
        w, h = width, int(round(width / min(ratio)))
    elif in_ratio > max(ratio):
        w, h = int(round(height * max(ratio))), height
    else:
        w, h = width, height
    return (width - w) // 2, (height - h) // 2, w, h


def ks_statistic(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sample Kolmogorov–Smirnov statistic: the largest gap between the two CDFs."""
    a, b = np.sort(a), np.sort(b)
    values = np.concatenate([a, b])
    cdf_a = np.searchsorted(a, values, side="right") / len(a)
    cdf_b = np.searchsorted(b, values, side="right") / len(b)
    return float(np.abs(cdf_a - cdf_b).max())


@pytest.mark.parametrize("size", [(500, 375), (300, 900)])
def test_crop_distribution_matches_torchvision(photos, size):
    uri, _ = photos
    width, height = size
    n = 20000
    loader = stoker.ImageLoader(uri, seed=123)
    ours = np.array([loader.sample_params(s, width, height)["box"] for s in range(n)])
    rng = np.random.default_rng(5)
    theirs = np.array([torchvision_crop_params(rng, width, height) for _ in range(n)], float)
    theirs = np.stack([theirs[:, 0], theirs[:, 1], theirs[:, 0] + theirs[:, 2],
                       theirs[:, 1] + theirs[:, 3]], axis=1)

    def features(boxes):
        w, h = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
        return {"area": w * h / (width * height), "log_aspect": np.log(w / h),
                "centre_x": (boxes[:, 0] + boxes[:, 2]) / 2, "centre_y": (boxes[:, 1] + boxes[:, 3]) / 2}

    # Critical value of the two-sample KS test at alpha = 0.001 for n = m = 20000: 1.95·√(2/n).
    critical = 1.95 * math.sqrt(2 / n)
    for name, ours_values in features(ours).items():
        d = ks_statistic(ours_values, features(theirs)[name])
        assert d < critical, f"{name}: KS statistic {d:.4f} >= {critical:.4f}"
    flips = np.mean([loader.sample_params(s, width, height)["flip"] for s in range(n)])
    assert abs(flips - 0.5) < 0.015


def test_error_policy(tmp_path, caplog):
    good = write_photo_tree(tmp_path / "src", 12)
    first = next(iter(good.values()))
    extra = {
        "c0/truncated.jpg": first[: len(first) // 2],
        "c1/readme.jpg": b"not an image, whatever the name says",
    }
    for rel, data in extra.items():
        (tmp_path / "src" / rel).write_bytes(data)
    stoker.pack(str(tmp_path / "src"), str(tmp_path / "ds"))
    uri = str(tmp_path / "ds")
    with pytest.raises((stoker.CorruptionError, ValueError)) as raised:
        all_batches(stoker.ImageLoader(uri, batch_size=4, size=16, shuffle="sequential"))
    assert "c0/truncated.jpg" in str(raised.value) or "c1/readme.jpg" in str(raised.value)

    skip = stoker.ImageLoader(uri, batch_size=4, size=16, on_error="skip")
    images, _ = all_batches(skip)
    assert len(images) == 12 and len(skip.errors) == 2
    assert {e[2].split(": ")[1] for e in skip.errors} == set(extra)

    caplog.set_level(logging.WARNING, logger="stoker")
    logged = stoker.ImageLoader(uri, batch_size=4, size=16, on_error="log")
    images, _ = all_batches(logged)
    assert len(images) == 12
    text = caplog.text
    assert "c0/truncated.jpg" in text and "c1/readme.jpg" in text


def test_bad_arguments(photos):
    uri, _ = photos
    for kwargs in [dict(batch_size=0), dict(on_error="ignore"), dict(dtype="float16"),
                   dict(layout="CHW"), dict(interpolation="lanczos"), dict(threads=0),
                   dict(mean=(0.5, 0.5))]:
        with pytest.raises(ValueError):
            stoker.ImageLoader(uri, **kwargs)
    with pytest.raises(ValueError):
        next(iter(stoker.ImageLoader(uri, scale=(0.5, 0.1))))
    with pytest.raises(ValueError):
        next(iter(stoker.ImageLoader(uri, train=False, size=224, resize=100)))
    # An output larger than any image may be: refused at once, not an abort in a thread.
    with pytest.raises(ValueError, match="size 100000x100000 is larger than an image may be"):
        next(iter(stoker.ImageLoader(uri, size=100000)))
    # A batch that cannot be allocated is an error of the iteration, and the process goes on.
    with pytest.raises(OSError, match="cannot allocate a batch of"):
        next(iter(stoker.ImageLoader(uri, batch_size=1 << 20, size=8192, train=False)))
