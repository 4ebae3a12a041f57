#!/usr/bin/env python3
"""Worker for bench/run_decode.py: an NVIDIA DALI pipeline on the CPU only (device_id=None).

  train  readers.file (random shuffle) -> decoders.image_random_crop (RandomResizedCrop's area
         0.08-1 and aspect 3/4-4/3, fused into the decode) -> resize to 224x224 (linear,
         antialiased) -> crop_mirror_normalize (random mirror, mean/std, CHW float32)
  val    readers.file -> decoders.image -> resize (shorter side 256) -> crop_mirror_normalize
         (center 224x224 crop, mean/std, CHW float32)
--workers is the pipeline's num_threads (the driver passes the core count). Batches come out as
torch tensors through DALIGenericIterator (a copy into torch memory, like any loader's output).
"""
from __future__ import annotations

import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def main() -> int:
    a = common.worker_parser(__doc__).parse_args()
    t = time.perf_counter()
    import nvidia.dali as dali
    import nvidia.dali.fn as fn
    import nvidia.dali.types as types
    import torch
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy
    torch.set_num_threads(len(common.cpus()))
    mean = [m * 255 for m in common.MEAN]
    std = [s * 255 for s in common.STD]

    @dali.pipeline_def(batch_size=a.batch, num_threads=max(1, a.workers), device_id=None,
                       seed=a.seed + 1, prefetch_queue_depth=2)
    def pipe():
        jpegs, labels = fn.readers.file(file_root=a.data, random_shuffle=True, name="Reader",
                                        seed=a.seed + 1)
        if a.mode == "train":
            images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB,
                                                   random_area=[0.08, 1.0],
                                                   random_aspect_ratio=[3 / 4, 4 / 3])
            images = fn.resize(images, resize_x=224, resize_y=224,
                               interp_type=types.INTERP_LINEAR, antialias=True)
            mirror = fn.random.coin_flip(probability=0.5)
            images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW",
                                              mean=mean, std=std, mirror=mirror)
        else:
            images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
            images = fn.resize(images, resize_shorter=256, interp_type=types.INTERP_LINEAR,
                               antialias=True)
            images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW",
                                              crop=(224, 224), mean=mean, std=std)
        return images, labels

    p = pipe()
    p.build()
    n = p.epoch_size("Reader")
    it = DALIGenericIterator([p], ["images", "labels"], reader_name="Reader",
                             last_batch_policy=LastBatchPolicy.PARTIAL, auto_reset=True)
    setup_s = time.perf_counter() - t

    # DALI's iterator is one object over consecutive epochs (auto_reset: a loop that ran to
    # StopIteration starts the next epoch). The warm-up reads `warmup_batches` batches, then the
    # rest of that epoch is drained untimed, so the timed pass is a whole epoch.
    def make_iter():
        return ((b[0]["images"], b[0]["labels"].squeeze(-1)) for b in it)

    if a.warmup_batches > 0:
        for i, _ in enumerate(make_iter()):
            if i + 1 >= a.warmup_batches:
                break
        for _ in make_iter():  # continues the same epoch to its end
            pass
    r = common.timed_epoch(make_iter, a.limit_images, 0)
    r.update(system="dali", mode=a.mode, workers=a.workers, setup_s=setup_s,
             dataset_images=n, expected_batches=math.ceil(n / a.batch),
             versions={"dali": dali.__version__, "torch": torch.__version__})
    common.emit(r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
