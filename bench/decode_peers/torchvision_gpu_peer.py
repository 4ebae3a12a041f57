#!/usr/bin/env python3
"""The GPU peer of bench/gpu_decode_bench.cc: torchvision's nvJPEG decode
(`torchvision.io.decode_jpeg(..., device="cuda")`, batched) and its v2 transforms on the GPU,
on the same JPEGs already in host memory, to the same batches in device memory:
  train  RandomResizedCrop(224, antialias) + RandomHorizontalFlip, per image (sizes differ)
  val    Resize(256, antialias) + CenterCrop(224)
then stacked, float32 NCHW, normalized with ImageNet's mean/std.

    python3 bench/decode_peers/torchvision_gpu_peer.py --images DIR [--mode train|val]
            [--batch 256] [--batches 40]

Batches cycle through the files as the stoker bench does; one warm-up batch, then `batches`
timed (torch.cuda.synchronize at the end). Prints one JSON object.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--images", required=True)
    p.add_argument("--mode", choices=("train", "val"), default="train")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--batches", type=int, default=40)
    a = p.parse_args()

    import torch
    import torchvision
    from torchvision.io import decode_jpeg
    from torchvision.transforms import v2

    files = sorted(f for f in Path(a.images).rglob("*")
                   if f.suffix.lower() in (".jpg", ".jpeg") and f.is_file())
    data = [torch.frombuffer(bytearray(f.read_bytes()), dtype=torch.uint8) for f in files]
    if a.mode == "train":
        per_image = v2.Compose([v2.RandomResizedCrop(224, antialias=True),
                                v2.RandomHorizontalFlip()])
    else:
        per_image = v2.Compose([v2.Resize(256, antialias=True), v2.CenterCrop(224)])
    mean = torch.tensor(MEAN, device="cuda").view(1, 3, 1, 1) * 255
    std = torch.tensor(STD, device="cuda").view(1, 3, 1, 1) * 255
    torch.manual_seed(0)

    def batch(b: int) -> torch.Tensor:
        chunk = [data[(b * a.batch + i) % len(data)] for i in range(a.batch)]
        decoded = decode_jpeg(chunk, device="cuda")
        out = torch.stack([per_image(x) for x in decoded]).float()
        return (out - mean) / std

    batch(0)  # warm-up: nvJPEG handles, kernels, allocator
    torch.cuda.synchronize()
    cpu_start = time.process_time()
    start = time.perf_counter()
    for b in range(1, a.batches + 1):
        out = batch(b)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    cpu_cores = (time.process_time() - cpu_start) / seconds
    print(json.dumps({
        "system": "torchvision-gpu", "mode": a.mode, "images": len(data), "batch": a.batch,
        "batches": a.batches, "images_per_s": round(a.batches * a.batch / seconds, 1),
        "host_cpu_cores": round(cpu_cores, 2),
        "shape": list(out.shape), "torch": torch.__version__,
        "torchvision": torchvision.__version__, "gpu": torch.cuda.get_device_name()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
