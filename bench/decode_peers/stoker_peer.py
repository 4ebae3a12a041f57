#!/usr/bin/env python3
"""Worker for bench/run_decode.py: stoker.ImageLoader (decode + augmentation in C++ threads).

Runs in the project's .venv. --data is a packed dataset (`stoker pack` of the ImageFolder tree;
labels from the first directory level, as ImageFolder's). The loader's own pipelines:
  train  random resized crop to 224 + random horizontal flip + normalize (train=True)
  val    resize shorter side to 256 + center crop 224 + normalize (train=False)
float32 NCHW torch tensors; --workers is the loader's thread count (the driver passes the cores).
A loader object is one pass (an epoch): the warm-up and the timed pass each build a fresh one.
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def main() -> int:
    a = common.worker_parser(__doc__).parse_args()
    t = time.perf_counter()
    import stoker
    import torch
    torch.set_num_threads(len(common.cpus()))

    def make_loader():
        return stoker.ImageLoader(a.data, batch_size=a.batch, train=a.mode == "train", size=224,
                                  threads=max(1, a.workers), seed=a.seed, dtype="float32",
                                  layout="NCHW")

    make_loader()  # the first open (snapshot, imports) is set-up, not throughput
    setup_s = time.perf_counter() - t
    loaders = []

    def make_iter():
        loader = make_loader()
        loaders.append(loader)
        return iter(loader)

    r = common.timed_epoch(make_iter, a.limit_images, a.warmup_batches)
    stats = {}
    try:
        stats = loaders[-1].stats()
    except Exception as e:  # stats are a bonus; never lose the measurement over them
        stats = {"error": repr(e)}
    r.update(system="stoker", mode=a.mode, workers=a.workers, setup_s=setup_s,
             loader_stats=stats, versions={"stoker": stoker.__version__,
                                           "torch": torch.__version__})
    common.emit(r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
