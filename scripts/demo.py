"""The demo behind `bash scripts/demo`: sample images -> stoker pack -> verify -> read back ->
training batches (decoded and augmented in C++ threads).

Every step runs the real thing: the `stoker` CLI installed by `pip install .` and the Python
package `stoker`. The report compares every byte and label read back with the source tree.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import stoker

HERE = Path(__file__).resolve().parent


def run(cmd, **kw):
    print("$ " + " ".join(str(c) for c in cmd), flush=True)
    return subprocess.run([str(c) for c in cmd], check=True, **kw)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("workdir", type=Path)
    ap.add_argument("--images", type=int, default=1000)
    ap.add_argument("--classes", type=int, default=10)
    args = ap.parse_args()
    images, dataset = args.workdir / "images", args.workdir / "dataset"

    print("1. Making ImageNet-like JPEGs from real photographs (cached between runs)")
    out = run([sys.executable, HERE / "make_sample_data.py", images, "--images", args.images,
               "--classes", args.classes, "--json"], stdout=subprocess.PIPE, text=True)
    sample = json.loads(out.stdout)

    print("\n2. Packing them into chunks + a metadata segment")
    shutil.rmtree(dataset, ignore_errors=True)
    out = run(["stoker", "pack", images, dataset, "--json"], stdout=subprocess.PIPE, text=True)
    packed = json.loads(out.stdout)

    print("\n3. Verifying every CRC32C")
    run(["stoker", "verify", dataset])
    run(["stoker", "info", dataset])

    print("\n4. Reading every image back in chunk-shuffled order through stoker.Loader"
          " and comparing with the source")
    ds = stoker.Dataset(str(dataset))
    classes = ds.classes
    loader = stoker.Loader(ds, shuffle="chunk", window=16, seed=0)
    start = time.perf_counter()
    mismatches = 0
    total = 0
    order = []
    for data, label, path in loader:
        total += len(data)
        order.append(path)
        source = (images / path).read_bytes()
        if data != source or classes[label] != path.split("/")[0]:
            mismatches += 1
            print(f"   MISMATCH: {path}")
    seconds = time.perf_counter() - start
    with_source = len(order)
    stats = loader.stats()
    if sorted(order) != sorted(ds[i][2] for i in range(len(ds))):
        mismatches += 1
        print("   the epoch did not deliver every image exactly once")

    print("\n5. One training epoch of batches through stoker.ImageLoader: RandomResizedCrop(224)"
          " + flip + normalize, decoded in C++ threads")
    import torch  # noqa: F401  (imported before timing: the first batch would pay for it)
    images_loader = stoker.ImageLoader(ds, batch_size=128, train=True, size=224, seed=0)
    start = time.perf_counter()
    batches = 0
    shapes = set()
    for x, y in images_loader:
        batches += 1
        shapes.add((tuple(x.shape[1:]), str(x.dtype)))
        finite = bool(torch.isfinite(x).all())
        if not finite or y.min() < 0 or y.max() >= len(classes):
            mismatches += 1
            print("   BAD BATCH: non-finite pixels or labels out of range")
    image_seconds = time.perf_counter() - start
    image_stats = images_loader.stats()

    print("\nReport")
    print(f"  images        {sample['images']} in {sample['classes']} classes, "
          f"{sample['mean_bytes'] / 1e3:.0f} kB mean, {sample['mean_width']:.0f}x"
          f"{sample['mean_height']:.0f} px, {sample['mean_bpp']:.2f} bits/pixel")
    print(f"  packed        {packed['files']} files into {packed['chunks']} chunk(s) in "
          f"{packed['seconds']:.2f} s ({packed['files_per_second']:.0f} files/s, "
          f"{packed['mb_per_second']:.0f} MB/s)")
    print(f"  metadata      {packed['metadata_bytes']} bytes "
          f"({packed['metadata_bytes_per_file']:.0f} bytes per file), labels for "
          f"{packed['classes']} classes")
    print(f"  read back     {with_source} images, {total / 1e6:.0f} MB in {seconds:.2f} s "
          f"({with_source / seconds:.0f} images/s incl. comparing with the source files)")
    print(f"  read pipeline {stats['ranges']} range reads for {stats['samples']} samples "
          f"({stats['engine']}), waited {stats['consumer_wait_seconds']:.2f} s for data")
    unit = stoker.shuffle_unit(ds, window=16, batch_size=images_loader.batch_size)
    chosen = unit["chosen"]
    read_unit = "whole chunks" if unit["block_size"] == 0 else f"blocks of {unit['block_size']} B"
    print(f"  class mixing  {chosen['classes_per_batch']:.1f} classes per batch of "
          f"{images_loader.batch_size} in chunk-shuffle order ({read_unit}), a full shuffle "
          f"{chosen['full_classes_per_batch']:.1f}")
    print(f"  train batches {batches} batches of {images_loader.batch_size} "
          f"{', '.join(f'{s[0]} {s[1]}' for s in sorted(shapes))} in {image_seconds:.2f} s "
          f"({image_stats['samples'] / image_seconds:.0f} images/s on {image_stats['threads']} "
          f"threads; decode {image_stats['decode_seconds']:.2f} s, resize "
          f"{image_stats['resize_seconds']:.2f} s, normalize {image_stats['output_seconds']:.2f} s "
          f"of thread time)")
    print(f"  result        {'every image once, every byte and label identical' if mismatches == 0 else f'{mismatches} MISMATCHES'}")
    print(f"\nTry: stoker ls {dataset}  |  stoker stat {dataset} {ds[0][2]}  |  "
          f"stoker cat {dataset} {ds[0][2]} > x.jpg")
    return 0 if mismatches == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
