#!/usr/bin/env python3
"""Worker for bench/run_decode.py: torchvision ImageFolder + DataLoader, decoding with PIL.

Runs in venv-tv (Pillow) or venv-simd (pillow-simd): the code is the same, the interpreter picks
the PIL build. Transforms are the reference ImageNet recipes:
  train  RandomResizedCrop(224) + RandomHorizontalFlip + ToTensor + Normalize
  val    Resize(256) + CenterCrop(224) + ToTensor + Normalize
Batches of float32 NCHW tensors, shuffled (train and val alike, so file order is the same
random order for both), default collate. --workers 0 decodes in the main process.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def transform(mode: str):
    from torchvision import transforms as T
    norm = [T.ToTensor(), T.Normalize(common.MEAN, common.STD)]
    if mode == "train":
        return T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), *norm])
    return T.Compose([T.Resize(256), T.CenterCrop(224), *norm])


def main() -> int:
    a = common.worker_parser(__doc__).parse_args()
    import time
    t = time.perf_counter()
    import PIL
    import PIL.features
    import torch
    import torchvision
    from torch.utils.data import DataLoader
    from torchvision.datasets import ImageFolder
    torch.set_num_threads(len(common.cpus()))
    torch.manual_seed(a.seed)
    ds = ImageFolder(a.data, transform=transform(a.mode))
    gen = torch.Generator().manual_seed(a.seed)

    def make_iter():
        return iter(DataLoader(ds, batch_size=a.batch, shuffle=True, generator=gen,
                               num_workers=a.workers, pin_memory=False, drop_last=False))

    setup_s = time.perf_counter() - t
    r = common.timed_epoch(make_iter, a.limit_images, a.warmup_batches)
    r.update(system="torchvision", mode=a.mode, workers=a.workers, setup_s=setup_s,
             dataset_images=len(ds), torch_threads=torch.get_num_threads(),
             versions={"torch": torch.__version__, "torchvision": torchvision.__version__,
                       "PIL": PIL.__version__,
                       "libjpeg_turbo": PIL.features.version_feature("libjpeg_turbo")})
    common.emit(r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
