#!/usr/bin/env python3
"""Worker for bench/run_decode.py: where the torchvision/PIL pipeline's time goes.

One process, one thread (torch.set_num_threads(1)), no DataLoader: each stage of the reference
pipeline is timed separately over the same N images (files in the page cache):
  read         open + read the whole file into memory
  decode       PIL decode of those bytes to an RGB image (Image.open(BytesIO).convert("RGB"),
               the call ImageFolder's loader makes, forced with load())
  crop+resize  train: RandomResizedCrop(224) (parameter draw, crop, bilinear antialiased resize)
               val:   Resize(256) + CenterCrop(224)
  flip         train only: RandomHorizontalFlip (p=0.5)
  to_tensor    ToTensor (HWC uint8 -> CHW float32 in [0, 1])
  normalize    Normalize(mean, std)
  collate      torch.stack of each full batch (default_collate's work for tensors), per image
Stages run image by image in pipeline order, each timed with perf_counter around it.
"""
from __future__ import annotations

import io
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def main() -> int:
    p = common.worker_parser(__doc__)
    p.add_argument("--images", type=int, default=512)
    a = p.parse_args()
    import PIL
    import PIL.features
    import torch
    import torchvision
    from PIL import Image
    from torchvision import transforms as T
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    files = common.image_files(a.data)
    random.Random(a.seed).shuffle(files)
    files = files[: a.images]
    if a.mode == "train":
        geom = [("crop+resize", T.RandomResizedCrop(224)), ("flip", T.RandomHorizontalFlip())]
    else:
        geom = [("crop+resize", T.Compose([T.Resize(256), T.CenterCrop(224)]))]
    stages = [*geom, ("to_tensor", T.ToTensor()), ("normalize", T.Normalize(common.MEAN, common.STD))]
    names = ["read", "decode", *(n for n, _ in stages), "collate"]
    total = dict.fromkeys(names, 0.0)
    pc = time.perf_counter

    def run(paths, record: bool) -> None:
        batch = []
        for path, _ in paths:
            t = pc()
            with open(path, "rb") as f:
                data = f.read()
            t1 = pc()
            img = Image.open(io.BytesIO(data))
            img = img.convert("RGB")
            img.load()
            t2 = pc()
            if record:
                total["read"] += t1 - t
                total["decode"] += t2 - t1
            x = img
            for name, fn in stages:
                t = pc()
                x = fn(x)
                if record:
                    total[name] += pc() - t
            batch.append(x)
            if len(batch) == a.batch:
                t = pc()
                torch.stack(batch)
                if record:
                    total["collate"] += pc() - t
                batch = []

    run(files[: min(32, len(files))], record=False)  # warm-up: imports, allocator, caches
    run(files, record=True)
    n = len(files)
    batches = n // a.batch
    per_image_us = {k: v / n * 1e6 for k, v in total.items()}
    if batches:  # collate only ran on full batches
        per_image_us["collate"] = total["collate"] / (batches * a.batch) * 1e6
    s = sum(per_image_us.values())
    common.emit({"system": "torchvision-costsplit", "mode": a.mode, "images": n,
                 "per_image_us": per_image_us, "total_us": s,
                 "share": {k: v / s for k, v in per_image_us.items()},
                 "single_core_images_per_s": 1e6 / s,
                 "versions": {"torch": torch.__version__, "torchvision": torchvision.__version__,
                              "PIL": PIL.__version__,
                              "libjpeg_turbo": PIL.features.version_feature("libjpeg_turbo")}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
