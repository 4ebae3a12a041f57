#!/usr/bin/env python3
"""Reads an image tree twice with unchanged torchvision code — `ImageFolder` + `DataLoader`,
shuffled, worker processes — once through a `stoker mount` and once from the original tree, and
checks that both give the same classes, samples, labels and pixels, batch by batch.

    PYTHON imagefolder_compare.py MOUNTED_TREE ORIGINAL_TREE

Runs in whichever interpreter has torchvision (tests/python/test_mount.py picks it: PyPI's
torchvision does not load beside the project's pinned CPU torch, so CI installs it in a venv of
its own). Prints one JSON line with what it compared; exits non-zero on any difference.
"""
import json
import sys
from pathlib import Path

import torch
import torchvision
from torchvision import datasets, transforms


def batches(root: str, workers: int) -> list:
    tf = transforms.Compose([transforms.Resize((16, 16)), transforms.PILToTensor()])
    folder = datasets.ImageFolder(root, transform=tf)
    order = torch.Generator().manual_seed(7)
    loader = torch.utils.data.DataLoader(folder, batch_size=5, shuffle=True, generator=order,
                                         num_workers=workers)
    return folder, [(x.clone(), y.clone()) for x, y in loader]


def main() -> int:
    mounted, original = sys.argv[1:3]
    on_mount, got = batches(mounted, workers=2)
    on_disk, want = batches(original, workers=0)
    problems = []
    if on_mount.classes != on_disk.classes:
        problems.append(f"classes differ: {on_mount.classes} vs {on_disk.classes}")
    rel = [(str(Path(p).relative_to(mounted)), k) for p, k in on_mount.samples]
    rel_want = [(str(Path(p).relative_to(original)), k) for p, k in on_disk.samples]
    if rel != rel_want:
        problems.append("sample lists differ")
    if len(got) != len(want):
        problems.append(f"{len(got)} batches vs {len(want)}")
    for i, ((x, y), (wx, wy)) in enumerate(zip(got, want)):
        if not (torch.equal(x, wx) and torch.equal(y, wy)):
            problems.append(f"batch {i} differs")
    print(json.dumps({"torchvision": torchvision.__version__, "classes": len(on_mount.classes),
                      "samples": len(on_mount), "batches": len(got), "problems": problems}))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
