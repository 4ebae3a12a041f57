#!/usr/bin/env python3
"""Worker for bench/run_decode.py: FFCV's Loader on the CPU.

FFCV reads its own .beton format, so the ImageFolder tree is converted first (--prepare-only, run
once by the driver, untimed): DatasetWriter with RGBImageField(write_mode="jpg", jpeg_quality=90,
no max_resolution: the photos keep their size) and IntField labels. Note FFCV stores *re-encoded*
JPEGs (decoded by Pillow, re-encoded at quality 90 by FFCV's encoder), so it decodes different
files than the other systems: their size and bits per pixel are reported ("beton").

Pipelines (ToDevice is left out: everything stays on the CPU):
  train  RandomResizedCropRGBImageDecoder((224, 224)) -> RandomHorizontalFlip -> NormalizeImage
         (float32, CPU lookup table) -> ToTensor -> ToTorchImage(channels_last=False)
  val    CenterCropRGBImageDecoder((224, 224), ratio=224/256) -> NormalizeImage -> ToTensor
         -> ToTorchImage(channels_last=False)
ToTorchImage(channels_last=False) copies into contiguous NCHW, the layout the others return.
OrderOption.RANDOM, drop_last=False, os_cache=True, --workers = num_workers (the core count).
"""
from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

QUALITY = 90


def beton_path(a) -> str:
    return os.path.join(a.cache, f"{os.path.basename(os.path.normpath(a.data))}"
                                 f"-ffcv-jpg-q{QUALITY}.beton")


def prepare(a) -> dict:
    """Writes the .beton once (a stamp file marks it complete); returns its summary."""
    path = beton_path(a)
    stamp = path + ".json"
    if os.path.exists(stamp) and os.path.exists(path):
        with open(stamp) as f:
            return json.load(f)
    from ffcv.fields import IntField, RGBImageField
    from ffcv.writer import DatasetWriter
    from torchvision.datasets import ImageFolder
    ds = ImageFolder(a.data)
    t = time.perf_counter()
    writer = DatasetWriter(path, {"image": RGBImageField(write_mode="jpg", jpeg_quality=QUALITY),
                                  "label": IntField()},
                           num_workers=len(common.cpus()))
    writer.from_indexed_dataset(ds)
    files = common.image_files(a.data)
    pixels = 0
    for p, _ in files:
        w, h = common.jpeg_size(p)
        pixels += w * h
    size = os.path.getsize(path)
    summary = {"beton": path, "bytes": size, "images": len(ds), "write_s": time.perf_counter() - t,
               "bits_per_pixel_of_totals": size * 8 / pixels,
               "note": f"re-encoded JPEG quality {QUALITY}; size includes FFCV's metadata"}
    with open(stamp, "w") as f:
        json.dump(summary, f)
    return summary


def main() -> int:
    p = common.worker_parser(__doc__)
    p.add_argument("--prepare-only", action="store_true")
    a = p.parse_args()
    t = time.perf_counter()
    import numpy as np
    import torch
    summary = prepare(a)
    if a.prepare_only:
        common.emit({"system": "ffcv", "prepare": summary})
        return 0
    import ffcv
    from ffcv.fields.decoders import (CenterCropRGBImageDecoder, IntDecoder,
                                      RandomResizedCropRGBImageDecoder)
    from ffcv.loader import Loader, OrderOption
    from ffcv.transforms import (NormalizeImage, RandomHorizontalFlip, Squeeze, ToTensor,
                                 ToTorchImage)
    torch.set_num_threads(len(common.cpus()))
    mean = np.array(common.MEAN) * 255
    std = np.array(common.STD) * 255
    if a.mode == "train":
        head = [RandomResizedCropRGBImageDecoder((224, 224)), RandomHorizontalFlip()]
    else:
        head = [CenterCropRGBImageDecoder((224, 224), ratio=224 / 256)]
    image = [*head, NormalizeImage(mean, std, np.float32), ToTensor(),
             ToTorchImage(channels_last=False)]
    label = [IntDecoder(), ToTensor(), Squeeze()]
    loader = Loader(summary["beton"], batch_size=a.batch, num_workers=max(1, a.workers),
                    order=OrderOption.RANDOM, seed=a.seed, os_cache=True, drop_last=False,
                    pipelines={"image": image, "label": label})
    setup_s = time.perf_counter() - t
    # A Loader is reusable: each iter() is a new epoch (the first one also JIT-compiles the
    # pipeline with numba, which the warm-up absorbs).
    r = common.timed_epoch(lambda: iter(loader), a.limit_images, a.warmup_batches)
    r.update(system="ffcv", mode=a.mode, workers=a.workers, setup_s=setup_s,
             dataset_images=summary["images"], beton=summary,
             versions={"ffcv": getattr(ffcv, "__version__", "?"), "torch": torch.__version__})
    common.emit(r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
