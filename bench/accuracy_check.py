#!/usr/bin/env python3
"""Accuracy check: does chunk-wise shuffle train as well as a full shuffle when the data is packed
in class order (the worst case for it)?

    .venv/bin/python bench/accuracy_check.py [--chunk-size 4KiB] [--epochs 20] [--seeds 10]

Data: scikit-learn's digits (load_digits(): 1797 real 8x8 handwritten digits, 10 classes, shipped
inside the package: nothing is downloaded). A fixed stratified 20 % test split (360 images) is
held out; the 1437 training images are written as grayscale PNGs into an ImageFolder tree
`class_k/NNNN.png` and packed with `stoker pack --chunk-size SIZE`. stoker orders files by path, so
the dataset is in class order and a small chunk size makes every chunk hold a few dozen images of
(mostly) one class, like ImageNet packed class directory by class directory.

Training: a small CNN, SGD (momentum 0.9), batch size 32, a fixed number of epochs, on CPU with one
torch thread. The training samples are read only through stoker.Loader, with shuffle "sequential"
(no shuffle: the worst-case reference), "full" and "chunk" with several windows W, each with the
same seeds. The model's initial weights depend only on the seed, so every configuration starts
from the same weights for a given seed (paired comparison). PNGs are decoded once and cached by
path: what is measured is the effect of the ORDER of samples, not decode speed.

Two learning-rate schedules: constant (the last steps weigh as much as the first, so any
class-ordered tail of an epoch shows in the final model) and cosine decay to 0 (what training
recipes use). Results: JSON in $STOKER_BENCH_CACHE/results/, a Markdown table on stdout;
docs/benchmarks.md, section "Accuracy: chunk-wise shuffle vs full shuffle".
"""
from __future__ import annotations

import argparse
import io
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("STOKER_BENCH_CACHE", "/var/tmp/stoker-bench"))


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def png_bytes(image: np.ndarray) -> bytes:
    from PIL import Image
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="PNG")
    return buf.getvalue()


def digits_uint8():
    """(images uint8 [N, 8, 8] in 0..255, labels [N]): the digits' 0..16 levels scaled."""
    from sklearn.datasets import load_digits
    d = load_digits()
    images = np.rint(d.images * (255.0 / 16.0)).astype(np.uint8)
    return images, d.target.astype(np.int64)


def prepare(work: Path, stoker_cli: Path, chunk_size: str, split_seed: int) -> dict:
    """Writes the train tree, packs it and returns the test arrays and dataset facts."""
    from sklearn.model_selection import train_test_split
    images, labels = digits_uint8()
    idx_train, idx_test = train_test_split(np.arange(len(labels)), test_size=0.2,
                                           stratify=labels, random_state=split_seed)
    tree = work / "train"
    dst = work / f"train-{chunk_size}.stoker"
    if tree.exists():
        shutil.rmtree(tree)
    if dst.exists():
        shutil.rmtree(dst)
    for i in sorted(idx_train):
        d = tree / f"class_{labels[i]}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{i:04d}.png").write_bytes(png_bytes(images[i]))
    subprocess.run([str(stoker_cli), "pack", str(tree), str(dst), "--chunk-size", chunk_size,
                    "--threads", "1", "-q"], check=True)
    # The test set round-trips through PNG too (lossless), so both splits see identical pixels.
    from PIL import Image
    test_x = np.stack([np.asarray(Image.open(io.BytesIO(png_bytes(images[i]))))
                       for i in idx_test]).astype(np.float32) / 255.0
    return {"dataset": dst, "test_x": test_x, "test_y": labels[idx_test],
            "n_train": len(idx_train), "n_test": len(idx_test)}


def chunk_facts(ds) -> dict:
    """Chunks, samples per chunk and classes per chunk of the packed dataset."""
    # Chunk ids are 64-bit (version, index) pairs: renumber them 0.. in storage order.
    _, chunk_of = np.unique([ds.stat(i)["chunk"] for i in range(len(ds))], return_inverse=True)
    label_of = np.array([ds[i][1] for i in range(len(ds))])
    per_chunk = np.bincount(chunk_of)
    per_chunk = per_chunk[per_chunk > 0]
    classes = [len(set(label_of[chunk_of == c])) for c in np.unique(chunk_of)]
    chunks_per_class = [len(set(chunk_of[label_of == k])) for k in np.unique(label_of)]
    return {"chunks": len(per_chunk), "samples_per_chunk_mean": float(per_chunk.mean()),
            "samples_per_chunk_min": int(per_chunk.min()),
            "samples_per_chunk_max": int(per_chunk.max()),
            "single_class_chunks": int(sum(c == 1 for c in classes)),
            "chunks_per_class_mean": float(np.mean(chunks_per_class)),
            "label_of": label_of}


def make_model():
    import torch.nn as nn
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),  # 32 x 4 x 4
        nn.Flatten(), nn.Linear(512, 64), nn.ReLU(), nn.Linear(64, 10))


def train_one(dataset: Path, decoded: dict, test_x, test_y, *, mode: str, window: int, seed: int,
              epochs: int, lr: float, schedule: str, batch_size: int) -> dict:
    import torch
    import stoker

    torch.manual_seed(seed)  # same initial weights for every configuration of this seed
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)

    def transform(item):
        _, label, path = item
        return decoded[path], label

    def collate(items):
        return (torch.stack([x for x, _ in items]),
                torch.tensor([y for _, y in items], dtype=torch.int64))

    loader = stoker.Loader(str(dataset), batch_size=batch_size, shuffle=mode, seed=seed,
                           window=window, transform=transform, collate=collate,
                           rank=0, world_size=1)
    total_steps = epochs * len(loader)
    step = 0
    classes_per_batch = []
    diverged = False
    loss_fn = torch.nn.CrossEntropyLoss()
    model.train()
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for x, y in loader:
            loss = benchlib.sgd_step(model, opt, loss_fn, x, y, lr=lr, step=step,
                                     total_steps=total_steps, schedule=schedule)
            step += 1
            diverged = diverged or not math.isfinite(loss)
            if epoch == 0:
                classes_per_batch.append(len(torch.unique(y)))
    model.eval()
    with torch.no_grad():
        pred = model(torch.from_numpy(test_x).unsqueeze(1)).argmax(1).numpy()
    return {"accuracy": float((pred == test_y).mean()), "steps": step, "diverged": diverged,
            "classes_per_batch_epoch0": float(np.mean(classes_per_batch))}


def summarize(rows: list[dict], schedule: str, configs: list[tuple[str, int]]) -> list[dict]:
    full = {r["seed"]: r["accuracy"] for r in rows
            if r["schedule"] == schedule and r["mode"] == "full"}
    out = []
    for mode, window in configs:
        sel = [r for r in rows if r["schedule"] == schedule and r["mode"] == mode and
               r["window"] == window]
        acc = [100 * r["accuracy"] for r in sel]
        diff = [100 * (r["accuracy"] - full[r["seed"]]) for r in sel if r["seed"] in full]
        out.append({
            "schedule": schedule, "mode": mode, "window": window, "runs": len(acc),
            "mean": statistics.mean(acc), "std": statistics.stdev(acc) if len(acc) > 1 else 0.0,
            "min": min(acc), "max": max(acc),
            "paired_diff_mean": statistics.mean(diff) if diff else 0.0,
            "paired_diff_std": statistics.stdev(diff) if len(diff) > 1 else 0.0,
            "classes_per_batch": statistics.mean(r["classes_per_batch_epoch0"] for r in sel),
            "diverged": sum(r["diverged"] for r in sel),
        })
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stoker", default=str(REPO / ".venv" / "bin" / "stoker"),
                    help="the stoker CLI used to pack")
    ap.add_argument("--chunk-size", default="4KiB")
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--windows", default="1,2,4,8,16,32", help="chunk-mode windows W")
    ap.add_argument("--modes", default="sequential,full,chunk")
    ap.add_argument("--schedules", default="constant,cosine")
    ap.add_argument("--lr", type=float, default=0.02)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--split-seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    args = ap.parse_args()

    import torch
    import stoker
    torch.set_num_threads(args.threads)
    work = CACHE / "accuracy"
    work.mkdir(parents=True, exist_ok=True)
    prep = prepare(work, Path(args.stoker), args.chunk_size, args.split_seed)
    ds = stoker.Dataset(str(prep["dataset"]))
    facts = chunk_facts(ds)
    label_of = facts.pop("label_of")
    decoded = {}
    from PIL import Image
    for i in range(len(ds)):
        data, _, path = ds[i]
        decoded[path] = torch.from_numpy(
            np.asarray(Image.open(io.BytesIO(data)), dtype=np.float32) / 255.0).unsqueeze(0)
    log(f"stoker from {stoker.__file__}")
    log(f"train {prep['n_train']} images, test {prep['n_test']}; {facts}; "
        f"storage order is class order: {bool(np.all(np.diff(label_of) >= 0))}")

    windows = [int(w) for w in args.windows.split(",")]
    modes = args.modes.split(",")
    configs = ([(m, 1) for m in ("sequential", "full") if m in modes] +
               [("chunk", w) for w in windows if "chunk" in modes])
    rows = []
    start = time.monotonic()
    for schedule in args.schedules.split(","):
        for mode, window in configs:
            for seed in range(args.seeds):
                r = train_one(prep["dataset"], decoded, prep["test_x"], prep["test_y"], mode=mode,
                              window=window, seed=seed, epochs=args.epochs, lr=args.lr,
                              schedule=schedule, batch_size=args.batch_size)
                r.update(schedule=schedule, mode=mode, window=window, seed=seed)
                rows.append(r)
            accs = [100 * r["accuracy"] for r in rows[-args.seeds:]]
            log(f"[{time.monotonic() - start:6.0f} s] {schedule:8s} {mode:10s} W={window:<3d} "
                f"acc {statistics.mean(accs):.2f} ± {statistics.pstdev(accs):.2f}")

    summary = []
    for schedule in args.schedules.split(","):
        summary += summarize(rows, schedule, configs)
    result = {"args": vars(args), "facts": facts, "n_train": prep["n_train"],
              "n_test": prep["n_test"], "torch": torch.__version__, "rows": rows,
              "summary": summary, "seconds": time.monotonic() - start}
    out = CACHE / "results" / f"accuracy-{args.chunk_size}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    log(f"wrote {out}")

    print("| schedule | shuffle | W | runs | test accuracy % mean ± std | min – max | "
          "vs full, same seed (mean ± std, points) | classes per batch of 32 (epoch 0) | "
          "diverged |")
    print("|---|---|---|---|---|---|---|---|---|")
    for s in summary:
        w = s["window"] if s["mode"] == "chunk" else "–"
        print(f"| {s['schedule']} | {s['mode']} | {w} | {s['runs']} | "
              f"{s['mean']:.2f} ± {s['std']:.2f} | {s['min']:.2f} – {s['max']:.2f} | "
              f"{s['paired_diff_mean']:+.2f} ± {s['paired_diff_std']:.2f} | "
              f"{s['classes_per_batch']:.1f} | {s['diverged']} |")


if __name__ == "__main__":
    main()
