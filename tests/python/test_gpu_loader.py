"""stoker.ImageLoader(device="cuda"): batches made on the GPU (nvJPEG + CUDA kernels) as CUDA
tensors. Without a GPU (every CI run) the loader must refuse at construction and say why; with
one (the device machine, docs/gpu.md) the batches must be the CPU path's, within nvJPEG's
rounding, with no host copy."""
from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

import stoker
from stoker import _core

torch = pytest.importorskip("torch")

HAVE_GPU = _core.cuda_devices() > 0
needs_gpu = pytest.mark.skipif(not HAVE_GPU, reason="no CUDA device (docs/gpu.md)")


def photo_like(rng: np.random.Generator, width: int, height: int) -> Image.Image:
    """Smooth colour fields with texture and edges: JPEG-compresses like a photograph."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    channels = []
    for c in range(3):
        fx, fy, phase = rng.uniform(0.01, 0.08, 2).tolist() + [rng.uniform(0, 6)]
        field = 128 + 80 * np.sin(x * fx + phase) * np.cos(y * fy)
        field += rng.normal(0, 18, (height, width))
        channels.append(field)
    pixels = np.clip(np.stack(channels, axis=2), 0, 255).astype(np.uint8)
    pixels[height // 3: height // 3 + 4, :, :] = 20 * (1 + np.arange(3))  # an edge
    return Image.fromarray(pixels)


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> str:
    """40 JPEGs (baseline, progressive, grayscale, assorted sizes), 4 PNGs, one truncated JPEG."""
    root = tmp_path_factory.mktemp("gpu")
    rng = np.random.default_rng(5)
    for i in range(44):
        im = photo_like(rng, int(rng.integers(90, 400)), int(rng.integers(80, 300)))
        buf = io.BytesIO()
        if i % 11 == 10:
            im.save(buf, "PNG")
            name = f"c{i % 4}/img{i:03d}.png"
        else:
            if i % 7 == 3:
                im = im.convert("L")
            im.save(buf, "JPEG", quality=85, progressive=i % 5 == 1)
            name = f"c{i % 4}/img{i:03d}.jpg"
        path = root / "src" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(buf.getvalue())
    good = (root / "src" / "c0/img000.jpg").read_bytes()
    (root / "src" / "c1" / "cut.jpg").write_bytes(good[: len(good) // 2])
    stoker.pack(str(root / "src"), str(root / "ds"), chunk_size=256 << 10)
    return str(root / "ds")


def test_a_bad_device_is_refused(images):
    for device in ("tpu", "cuda:x", "gpu"):
        with pytest.raises(ValueError, match="device must be"):
            stoker.ImageLoader(images, device=device)


def test_cpu_is_the_default_device(images):
    kwargs = dict(batch_size=8, size=32, seed=2, on_error="skip")
    default = [b[0] for b in stoker.ImageLoader(images, **kwargs)]
    on_cpu = [b[0] for b in stoker.ImageLoader(images, device="cpu", **kwargs)]
    assert len(default) == len(on_cpu) == 6
    for a, b in zip(default, on_cpu):
        assert not b.is_cuda and torch.equal(a, b)


@pytest.mark.skipif(HAVE_GPU, reason="a CUDA device is present")
def test_cuda_without_a_gpu_fails_when_the_loader_is_made(images):
    reason = ("built without the GPU path" if not _core.built_with_cuda()
              else "no CUDA device is visible")
    with pytest.raises(RuntimeError, match=reason):
        stoker.ImageLoader(images, device="cuda")


@needs_gpu
@pytest.mark.parametrize("train", [True, False])
def test_cuda_batches_are_the_cpu_paths(images, train):
    # The GPU decodes at full resolution: compare with the CPU path without DCT scaling.
    kwargs = dict(batch_size=8, size=(40, 56), seed=3, train=train, dct_scaling=False,
                  dtype="uint8", on_error="skip")
    cpu = stoker.ImageLoader(images, **kwargs)
    gpu = stoker.ImageLoader(images, device="cuda", **kwargs)
    cpu_batches, gpu_batches = list(cpu), list(gpu)
    assert len(cpu_batches) == len(gpu_batches) == 6
    for (a, la), (b, lb) in zip(cpu_batches, gpu_batches):
        assert b.is_cuda and b.device == torch.device("cuda", 0) and lb.is_cuda
        assert b.shape == a.shape and b.dtype == a.dtype
        assert torch.equal(la, lb.cpu())
        diff = (a.int() - b.cpu().int()).abs()
        assert diff.max().item() <= 2
        assert diff.float().mean().item() < 0.5
    assert [e[1] for e in cpu.errors] == [e[1] for e in gpu.errors]
    assert len(gpu.errors) == 1 and "cut.jpg" in gpu.errors[0][2]
    stats = gpu.stats()
    assert stats["samples"] == 44 and stats["gpu_seconds"] > 0


@needs_gpu
def test_cuda_float_batches_train_a_step(images):
    """Normalized float32 NCHW batches feed a model on the GPU as they come."""
    loader = stoker.ImageLoader(images, batch_size=16, size=32, on_error="skip", device="cuda")
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d(1),
                                torch.nn.Flatten(), torch.nn.Linear(4, 4)).cuda()
    for images_, labels in loader:
        assert images_.dtype == torch.float32 and images_.is_contiguous()
        loss = torch.nn.functional.cross_entropy(model(images_), labels)
        loss.backward()
        assert torch.isfinite(loss).item()
    assert abs(images_.mean().item()) < 3


@needs_gpu
def test_cuda_buffers_are_recycled_not_copied(images):
    """The tensors are the pipeline's device buffers, reused: 23 batches in a few buffers."""
    loader = stoker.ImageLoader(images, batch_size=2, size=32, on_error="skip", device="cuda",
                                prefetch_batches=2)
    addresses, batches = set(), 0
    for batch, _ in loader:
        addresses.add(batch.data_ptr())
        batches += 1
        del batch
    assert batches == 23
    # At most: a batch per GPU thread (2) + one ready, the loop's and the generator's
    # references, and one more freed and not yet reused.
    assert len(addresses) <= 6, addresses


@needs_gpu
def test_cuda_refuses_nearest_interpolation(images):
    with pytest.raises(ValueError, match="nearest"):
        stoker.ImageLoader(images, device="cuda", interpolation="nearest")


@needs_gpu
def test_cuda_raises_naming_a_damaged_jpeg(images):
    with pytest.raises(Exception, match="cut.jpg"):
        for _ in stoker.ImageLoader(images, batch_size=8, size=32, device="cuda",
                                    shuffle="sequential"):
            pass


def test_stats_name_the_gpu_stage(images):
    loader = stoker.ImageLoader(images, batch_size=8, size=32, on_error="skip")
    list(loader)
    assert loader.stats()["gpu_seconds"] == 0


class _FakeImages:
    """Stands for a batch's images tensor: pin_memory() (which needs CUDA) returns a copy
    marked pinned."""

    def __init__(self, index: int, pinned: bool = False) -> None:
        self.index, self.pinned = index, pinned

    def pin_memory(self) -> "_FakeImages":
        return _FakeImages(self.index, True)


def test_pinning_runs_ahead_in_its_own_thread():
    import threading
    from stoker.image_loader import _PinnedAhead
    producers = set()

    def batches():
        for i in range(5):
            producers.add(threading.current_thread().name)
            yield _FakeImages(i), i
    got = list(_PinnedAhead(batches()))
    assert [(images.index, images.pinned, i) for images, i in got] == [
        (i, True, i) for i in range(5)]
    assert producers == {"stoker pin memory"}


def test_pinning_hands_errors_on_and_stops_when_closed():
    import itertools
    from stoker.image_loader import _PinnedAhead

    def failing():
        yield _FakeImages(0), 0
        raise RuntimeError("bad batch")
    batches = _PinnedAhead(failing())
    assert next(batches)[1] == 0
    with pytest.raises(RuntimeError, match="bad batch"):
        next(batches)
    batches.close()
    endless = _PinnedAhead(((_FakeImages(i), i) for i in itertools.count()), depth=1)
    next(endless)
    endless.close()  # its thread was blocked on the full queue
    assert not endless._thread.is_alive()
