"""Shared by bench/run_decode.py (the driver) and its per-system workers in this directory.

Standard library only: every worker runs in a different virtual environment (torchvision, DALI,
FFCV and stoker cannot share one), and the driver imports this too. A worker is a script that
measures one system in one configuration and prints one JSON object on its last stdout line; logs
go to stderr. Single-threaded use only (plain functions, no shared state).

The measurement every worker makes (timed_epoch): a warm-up of a few batches through a first
iteration, then one whole pass over the data set, timed from the start of iteration to the last
batch in hand. Pipeline start-up (worker processes, prefetch fill) is inside the timed pass, as it
is in every real epoch; building the loader object is timed separately ("setup_s").
"""
from __future__ import annotations

import argparse
import json
import os
import struct
import sys
import threading
import time

# ImageNet statistics used by torchvision's reference recipes.
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def worker_parser(doc: str | None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=doc)
    p.add_argument("--data", required=True, help="ImageFolder tree (or the system's own format)")
    p.add_argument("--mode", choices=("train", "val"), default="train")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--workers", type=int, default=0, help="loader processes/threads")
    p.add_argument("--warmup-batches", type=int, default=2)
    p.add_argument("--limit-images", type=int, default=0,
                   help="stop the timed pass after this many images (0: whole pass)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cache", default="", help="where a system may keep converted data")
    return p


def cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0))


def timed_epoch(make_iter, limit_images: int, warmup_batches: int) -> dict:
    """make_iter() -> a fresh iterator of (images, labels) batches over one whole pass.
    Runs a warm-up iteration of `warmup_batches` batches (then abandons it), then one timed
    iteration. Returns images, seconds, images/s and a small check of the last batch."""
    if warmup_batches > 0:
        it = make_iter()
        for i, _ in enumerate(it):
            if i + 1 >= warmup_batches:
                break
        # Stop the abandoned pass before timing the next: a loader whose iterator is a thread
        # (FFCV) would otherwise keep decoding its prefetch window during the timed pass.
        close = getattr(it, "close", None)
        if callable(close):
            close()
        if isinstance(it, threading.Thread):
            it.join(timeout=60)
        del it
    images = batches = 0
    last = None
    first_batch_s = None
    t0 = time.perf_counter()
    for x, y in make_iter():
        if first_batch_s is None:
            first_batch_s = time.perf_counter() - t0
        images += len(y)
        batches += 1
        last = (x, y)
        if limit_images and images >= limit_images:
            break
    seconds = time.perf_counter() - t0
    out = {"images": images, "batches": batches, "seconds": seconds,
           "images_per_s": images / seconds if seconds > 0 else 0.0,
           "first_batch_s": first_batch_s}
    if last is not None:
        out["check"] = check_batch(*last)
    return out


def check_batch(x, y) -> dict:
    """Shape, dtype, layout and value statistics of a batch (outside the timed region): a
    normalized ImageNet batch has mean near 0 and std near 1 per channel."""
    try:
        import torch
        xt = x if isinstance(x, torch.Tensor) else torch.as_tensor(x)
        f = xt.float()
        return {"shape": list(xt.shape), "dtype": str(xt.dtype).replace("torch.", ""),
                "contiguous": bool(xt.is_contiguous()),
                "mean": round(float(f.mean()), 4), "std": round(float(f.std()), 4),
                "labels_min": int(torch.as_tensor(y).min()),
                "labels_max": int(torch.as_tensor(y).max())}
    except Exception as e:  # a check must never lose a measurement
        return {"error": repr(e)}


def emit(result: dict) -> None:
    result.setdefault("cpus", cpus())
    result.setdefault("python", sys.executable)
    print(json.dumps(result), flush=True)


def jpeg_size(path: str) -> tuple[int, int] | None:
    """(width, height) from a JPEG's SOFn marker, without decoding; None if not found."""
    with open(path, "rb") as f:
        if f.read(2) != b"\xff\xd8":
            return None
        while True:
            b = f.read(1)
            while b and b != b"\xff":
                b = f.read(1)
            while b == b"\xff":
                b = f.read(1)
            if not b:
                return None
            marker = b[0]
            if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
                continue  # standalone markers
            seg = f.read(2)
            if len(seg) < 2:
                return None
            (length,) = struct.unpack(">H", seg)
            if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
                data = f.read(5)
                if len(data) < 5:
                    return None
                h, w = struct.unpack(">HH", data[1:5])
                return w, h
            f.seek(length - 2, os.SEEK_CUR)


def image_files(root: str) -> list[tuple[str, int]]:
    """ImageFolder order: classes = sorted first-level directories, label = class index, files
    sorted by path within each class."""
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
    out = []
    for label, c in enumerate(classes):
        for dirpath, _, names in sorted(os.walk(os.path.join(root, c), followlinks=True)):
            out.extend((os.path.join(dirpath, n), label) for n in sorted(names))
    return out
