#!/usr/bin/env python3
"""Accuracy with many classes: do stoker's default pack + loader settings mix a 1000-class
dataset as well as a full shuffle? Answered by training, with paired seeds.

    .venv/bin/python bench/accuracy_many_classes.py                 # short schedule: 6 epochs
    .venv/bin/python bench/accuracy_many_classes.py --epochs 20     # long schedule
    # options: --configs full,old-default,legacy-auto,tree-default,tar-default --seeds 10
    #          --jobs 2 --model bn|plain --hidden 256 --schedule cosine|constant --lr 0.1
    #          --per-class 130 --test-per-class 20 --noise 2.0 --data-seed 0 --chunk-size 16KiB
    # more seeds later: --seeds 20 --seed-start 10 --configs full,tree-default --add-to EARLIER.json

Data: SYNTHETIC (nothing is downloaded). 1000 classes in 64 dimensions; the class means
mu_c ~ N(0, I_64) are drawn once from a fixed numpy seed (--data-seed); a sample of class c is
x = mu_c + sigma * N(0, I_64) with sigma = --noise (chosen so that a full shuffle reaches well
below 100 % test accuracy after 6 epochs: the task is hard enough for the order of samples to
matter; sigma 2.0: one seed of a full shuffle of the arrays in memory reached 63 % after 6
epochs and 62 % after 20, the Bayes classifier that knows the means 71 %). --per-class 130
training samples per class (130,000) are stored as files of 256 bytes (64 float32,
little-endian) and written twice:
  - an ImageFolder tree train/c0000/000000.bin ... (labels from the class directories),
  - WebDataset tar shards shard-000000.tar ... in CLASS ORDER (members KEY.bin and KEY.cls, the
    class as decimal text; keys zero-padded so that shard order is class order).
Both are kept in $STOKER_BENCH_CACHE/many-classes/data and reused when a stamp file says they
were written with the same parameters. A test set of --test-per-class 20 samples per class
(20,000) from the same distribution is held out: it is never packed and stays in numpy.

Chunk size: --chunk-size 16KiB holds ~61 samples of 256 B, i.e. ~0.47 of a class of 130 -
about what 64 MiB chunks hold of an ImageNet class (~1,300 images of ~110 KB: ~0.45 of a class).
So a class-ordered chunk holds one or two classes, as on ImageNet packed class by class
(tree-path: 2,132 chunks, 1.46 classes per chunk, 54 % of them single-class).

Packed datasets (with the `stoker` CLI, repacked on every run, since the result depends on the
stoker build):
  tree-path     stoker pack train DST --chunk-size 16KiB --order path   (class by class: the old
                default storage order)
  tree-default  stoker pack train DST --chunk-size 16KiB                (the default: files placed
                in chunks in a mixed order)
  tar-default   stoker pack shard-*.tar DST --chunk-size 16KiB          (the default for tar input:
                a bounded-memory mix over many open chunks)

Orders compared, all read only through stoker.Loader(path, batch_size=256, shuffle=MODE,
window=16, seed=SEED, block_size=BLOCK, collate=...):
  full          tree-path, shuffle="full" (the reference: a uniform permutation every epoch)
  old-default   tree-path, shuffle="chunk", block_size=0 (whole chunks: what users got before)
  legacy-auto   tree-path, shuffle="chunk", block_size=None (an existing class-ordered dataset
                read with the default loader: automatic shuffle unit)
  tree-default  tree-default, all loader defaults (shuffle="chunk", window=16, block_size=None)
  tar-default   tar-default, all loader defaults

Model: --model bn (default): MLP 64 -> H -> BatchNorm1d -> ReLU -> H -> BatchNorm1d -> ReLU ->
1000 with H = --hidden 256; --model plain: the same without BatchNorm. SGD (momentum 0.9,
weight decay --weight-decay 5e-4), batch 256, cross-entropy, peak learning rate --lr 0.1 with
cosine decay to 0 over all steps (--schedule cosine) or constant (--schedule constant),
--epochs 6 (short schedule; --epochs 20: long schedule). CPU, one torch thread per run; --jobs
runs in parallel worker processes, each building its own Loader.

Paired seeds: for seed s the model's initial weights depend only on s (torch.manual_seed(s)
before building it) and the loader's seed is s, so every configuration starts from the same
weights for a given seed; differences to `full` are taken seed by seed (mean ± sd, paired t).

Measured per run: final test accuracy, mean distinct classes per full batch of epoch 0 (from
the batches' labels), seconds per epoch, wall seconds. Results: JSON (every run, the command
line, git commit, stoker and torch versions, data parameters, the packed datasets' chunk facts)
in $STOKER_BENCH_CACHE/results/ (default /var/tmp/stoker-bench), a Markdown table on stdout,
progress on stderr.
"""
from __future__ import annotations

import argparse
import inspect
import io
import json
import math
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("STOKER_BENCH_CACHE", "/var/tmp/stoker-bench"))
WORK = CACHE / "many-classes"
DATA_FORMAT = 1  # bump when the files written change for the same parameters

# config: (packed dataset, shuffle mode, block_size)
CONFIGS = {
    "full": ("tree-path", "full", None),
    "old-default": ("tree-path", "chunk", 0),
    "legacy-auto": ("tree-path", "chunk", None),
    "tree-default": ("tree-default", "chunk", None),
    "tar-default": ("tar-default", "chunk", None),
}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Data


def make_data(classes: int, dim: int, per_class: int, test_per_class: int, noise: float,
              seed: int) -> dict:
    """Class means, training samples [C, per_class, D] and the test set, as float32.

    Independent numpy streams for the means, the training noise and the test noise, so that
    the means and the test set do not change with --per-class."""
    mu = np.random.default_rng([seed, 0]).standard_normal((classes, dim))
    train = mu[:, None, :] + noise * np.random.default_rng([seed, 1]).standard_normal(
        (classes, per_class, dim))
    test = mu[:, None, :] + noise * np.random.default_rng([seed, 2]).standard_normal(
        (classes, test_per_class, dim))
    return {"train": train.astype("<f4"),
            "test_x": test.reshape(-1, dim).astype(np.float32),
            "test_y": np.repeat(np.arange(classes, dtype=np.int64), test_per_class)}


def write_tree(tree: Path, train: np.ndarray) -> None:
    """train/cCCCC/IIIIII.bin, class directory by class directory (os.open/os.write: fast)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    for c in range(train.shape[0]):
        d = tree / f"c{c:04d}"
        d.mkdir(parents=True)
        for i in range(train.shape[1]):
            fd = os.open(d / f"{i:06d}.bin", flags, 0o644)
            try:
                os.write(fd, train[c, i].tobytes())
            finally:
                os.close(fd)


def write_shards(out: Path, train: np.ndarray, shards: int) -> list[Path]:
    """WebDataset shards in class order: KEY.bin (256 B) + KEY.cls (decimal class)."""
    classes, per_class, _ = train.shape
    out.mkdir(parents=True)
    paths = []
    for s, part in enumerate(np.array_split(np.arange(classes * per_class), shards)):
        path = out / f"shard-{s:06d}.tar"
        with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
            for g in part:
                c, i = divmod(int(g), per_class)
                key = f"{g:07d}"
                for ext, payload in (("bin", train[c, i].tobytes()), ("cls", str(c).encode())):
                    info = tarfile.TarInfo(f"{key}.{ext}")
                    info.size, info.mtime, info.mode = len(payload), 0, 0o644
                    tar.addfile(info, io.BytesIO(payload))
        paths.append(path)
    return paths


def prepare_data(args, data: dict) -> tuple[Path, list[Path]]:
    """The tree and the shards in WORK/data, reused when the stamp matches the parameters."""
    root = WORK / "data"
    stamp_path = root / "stamp.json"
    stamp = {"format": DATA_FORMAT, "classes": args.classes, "dim": args.dim,
             "per_class": args.per_class, "noise": args.noise, "data_seed": args.data_seed,
             "shards": args.shards}
    tree, shard_dir = root / "train", root / "shards"
    shards = [shard_dir / f"shard-{s:06d}.tar" for s in range(args.shards)]
    try:
        if json.loads(stamp_path.read_text()) == stamp and tree.is_dir() and all(
                p.is_file() for p in shards):
            log(f"reusing {root} ({stamp})")
            return tree, shards
    except (OSError, ValueError):
        pass
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    t = time.monotonic()
    write_tree(tree, data["train"])
    log(f"wrote {args.classes * args.per_class} files into {tree} in {time.monotonic() - t:.0f} s")
    t = time.monotonic()
    shards = write_shards(shard_dir, data["train"], args.shards)
    log(f"wrote {len(shards)} tar shards into {shard_dir} in {time.monotonic() - t:.0f} s")
    stamp_path.write_text(json.dumps(stamp))  # last: a stamp means the data is complete
    return tree, shards


def pack_commands(stoker_cli: str, tree: Path, shards: list[Path], chunk_size: str) -> dict:
    """{name: (DST, command)} for the three packed datasets."""
    packed = WORK / "packed"
    dst = {name: packed / f"{name}.stoker" for name in ("tree-path", "tree-default", "tar-default")}
    opts = ["--chunk-size", chunk_size, "-q"]
    return {
        "tree-path": (dst["tree-path"], [stoker_cli, "pack", str(tree), str(dst["tree-path"]),
                                         "--order", "path", *opts]),
        "tree-default": (dst["tree-default"],
                         [stoker_cli, "pack", str(tree), str(dst["tree-default"]), *opts]),
        "tar-default": (dst["tar-default"],
                        [stoker_cli, "pack", *map(str, shards), str(dst["tar-default"]), *opts]),
    }


def pack(dst: Path, cmd: list[str]) -> dict:
    """Packs afresh (the result depends on the stoker build) and returns `stoker info --json`."""
    if dst.exists():
        shutil.rmtree(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    t = time.monotonic()
    subprocess.run(cmd, check=True)
    seconds = time.monotonic() - t
    info = json.loads(subprocess.run([cmd[0], "info", str(dst), "--json"], check=True,
                                     capture_output=True, text=True).stdout)
    return {"path": str(dst), "command": cmd, "pack_seconds": seconds, "info": info}


def chunk_facts(path: str) -> dict:
    """How the packed dataset's chunks hold classes (from the .bin files' chunk and label)."""
    import stoker
    ds = stoker.Dataset(path)
    chunk, label = [], []
    for f in range(ds.num_files):
        st = ds.stat(f)
        if st["path"].endswith(".bin"):
            chunk.append(st["chunk"])
            label.append(st["label"])
    _, chunk_of = np.unique(np.array(chunk, dtype=object).astype(str), return_inverse=True)
    label_of = np.array(label)
    order = np.lexsort((label_of, chunk_of))
    c, l = chunk_of[order], label_of[order]
    new_pair = np.r_[True, (c[1:] != c[:-1]) | (l[1:] != l[:-1])]
    classes_per_chunk = np.bincount(c[new_pair])
    per_chunk = np.bincount(chunk_of)
    chunks_per_class = np.bincount(l[new_pair])
    return {"chunks": int(len(per_chunk)), "samples": int(len(label_of)),
            "samples_per_chunk_mean": float(per_chunk.mean()),
            "classes_per_chunk_mean": float(classes_per_chunk.mean()),
            "single_class_chunks": int((classes_per_chunk == 1).sum()),
            "chunks_per_class_mean": float(chunks_per_class[chunks_per_class > 0].mean())}


# ---------------------------------------------------------------------------------------------
# Training (in worker processes)

_TEST: dict = {}


def _init_worker(test_x: np.ndarray, test_y: np.ndarray) -> None:
    _TEST["x"], _TEST["y"] = test_x, test_y


def collate(items):
    """(bytes, label, path) from tree datasets or ({ext: bytes}, label, key) from tar ones ->
    (float32 [B, 64], int64 [B])."""
    import torch
    blobs = [d["bin"] if isinstance(d, dict) else d for d, _, _ in items]
    x = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(items), -1)
    y = np.fromiter((label for _, label, _ in items), dtype=np.int64, count=len(items))
    return torch.from_numpy(x.astype(np.float32)), torch.from_numpy(y)


def make_model(kind: str, dim: int, hidden: int, classes: int):
    import torch.nn as nn
    if kind == "bn":
        return nn.Sequential(nn.Linear(dim, hidden), nn.BatchNorm1d(hidden), nn.ReLU(),
                             nn.Linear(hidden, hidden), nn.BatchNorm1d(hidden), nn.ReLU(),
                             nn.Linear(hidden, classes))
    return nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, classes))


def train_one(task: dict) -> dict:
    import torch
    import stoker
    torch.set_num_threads(1)
    start = time.monotonic()
    seed, epochs, lr = task["seed"], task["epochs"], task["lr"]
    torch.manual_seed(seed)  # the same initial weights for every configuration of this seed
    model = make_model(task["model"], task["dim"], task["hidden"], task["classes"])
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9,
                          weight_decay=task["weight_decay"])
    loader = stoker.Loader(task["dataset"], batch_size=task["batch_size"], shuffle=task["shuffle"],
                           window=task["window"], seed=seed, block_size=task["block_size"],
                           collate=collate, rank=0, world_size=1)
    total_steps = epochs * len(loader)
    loss_fn = torch.nn.CrossEntropyLoss()
    step, diverged, classes_per_batch, epoch_seconds = 0, False, [], []
    model.train()
    for epoch in range(epochs):
        t = time.monotonic()
        loader.set_epoch(epoch)
        for x, y in loader:
            if epoch == 0 and len(y) == task["batch_size"]:
                classes_per_batch.append(len(np.unique(y.numpy())))
            if len(y) < 2 and task["model"] == "bn":
                continue  # BatchNorm needs two samples (never with the default sizes)
            loss = benchlib.sgd_step(model, opt, loss_fn, x, y, lr=lr, step=step,
                                     total_steps=total_steps, schedule=task["schedule"])
            step += 1
            diverged = diverged or not math.isfinite(loss)
        epoch_seconds.append(time.monotonic() - t)
    model.eval()
    with torch.no_grad():
        pred = model(torch.from_numpy(_TEST["x"])).argmax(1).numpy()
    return {"config": task["config"], "seed": seed,
            "accuracy": float((pred == _TEST["y"]).mean()), "steps": step,
            "diverged": diverged,
            "classes_per_batch_epoch0": float(np.mean(classes_per_batch))
            if classes_per_batch else float("nan"),
            "epoch_seconds": epoch_seconds, "wall_seconds": time.monotonic() - start}


# ---------------------------------------------------------------------------------------------
# Summary


def summarize(rows: list[dict], configs: list[str]) -> list[dict]:
    full = {r["seed"]: r["accuracy"] for r in rows if r["config"] == "full"}
    out = []
    for name in configs:
        sel = sorted((r for r in rows if r["config"] == name), key=lambda r: r["seed"])
        if not sel:
            continue
        acc = [100 * r["accuracy"] for r in sel]
        diff = [100 * (r["accuracy"] - full[r["seed"]]) for r in sel if r["seed"] in full]
        d_mean = statistics.mean(diff) if diff else float("nan")
        d_std = statistics.stdev(diff) if len(diff) > 1 else float("nan")
        if name == "full" or len(diff) < 2:
            t = float("nan")
        elif d_std == 0:
            t = 0.0 if d_mean == 0 else math.copysign(math.inf, d_mean)
        else:
            t = d_mean / (d_std / math.sqrt(len(diff)))
        dataset, shuffle, block = CONFIGS[name]
        out.append({
            "config": name, "dataset": dataset, "shuffle": shuffle, "block_size": block,
            "runs": len(sel), "mean": statistics.mean(acc),
            "std": statistics.stdev(acc) if len(acc) > 1 else float("nan"),
            "min": min(acc), "max": max(acc), "paired_runs": len(diff),
            "paired_diff_mean": d_mean, "paired_diff_std": d_std, "paired_t": t,
            "classes_per_batch": statistics.mean(r["classes_per_batch_epoch0"] for r in sel),
            "epoch_seconds": statistics.mean(s for r in sel for s in r["epoch_seconds"]),
            "diverged": sum(r["diverged"] for r in sel),
        })
    return out


def fmt(v: float, spec: str) -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


# ---------------------------------------------------------------------------------------------


def default_cli() -> str:
    venv = REPO / ".venv" / "bin" / "stoker"
    return str(venv) if venv.exists() else (shutil.which("stoker") or str(venv))


def git(*cmd: str) -> str | None:
    try:
        return subprocess.run(["git", "-C", str(REPO), *cmd], check=True, capture_output=True,
                              text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--stoker", default=default_cli(), help="the stoker CLI used to pack")
    ap.add_argument("--configs", default=",".join(CONFIGS),
                    help="comma list of: " + ", ".join(CONFIGS))
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--per-class", type=int, default=130, help="training samples per class")
    ap.add_argument("--test-per-class", type=int, default=20, help="held-out samples per class")
    ap.add_argument("--noise", type=float, default=2.0, help="sigma of the within-class noise")
    ap.add_argument("--data-seed", type=int, default=0)
    ap.add_argument("--shards", type=int, default=10, help="WebDataset tar shards")
    ap.add_argument("--chunk-size", default="16KiB")
    ap.add_argument("--window", type=int, default=16, help="chunk-shuffle window W")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--model", choices=("bn", "plain"), default="bn")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--lr", type=float, default=0.1, help="peak learning rate")
    ap.add_argument("--weight-decay", type=float, default=5e-4)
    ap.add_argument("--schedule", choices=("cosine", "constant"), default="cosine")
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--seeds", type=int, default=10, help="seeds S .. S+N-1, paired")
    ap.add_argument("--seed-start", type=int, default=0,
                    help="S: the first seed (runs are deterministic, so more seeds can be added "
                         "by a later run)")
    ap.add_argument("--add-to", nargs="*", default=[], metavar="RESULT_JSON",
                    help="earlier results with the same settings to summarize with (their runs "
                         "of a (config, seed) this run also made are left out)")
    ap.add_argument("--jobs", type=int, default=2, help="runs in parallel (one torch thread each)")
    args = ap.parse_args()

    configs = [c for c in args.configs.split(",") if c]
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown:
        ap.error(f"unknown --configs {unknown}; known: {', '.join(CONFIGS)}")

    import torch
    import stoker
    if "block_size" not in inspect.signature(stoker.Loader).parameters:
        sys.exit(f"error: the installed stoker ({stoker.__file__}) has no Loader(block_size=...); "
                 "this benchmark compares block_size=0 with block_size=None and needs a stoker "
                 "build that has it (bash scripts/setup).")
    if not Path(args.stoker).exists() and not shutil.which(args.stoker):
        sys.exit(f"error: no stoker CLI at {args.stoker} (use --stoker PATH)")
    log(f"stoker from {stoker.__file__}, CLI {args.stoker}")

    start = time.monotonic()
    data = make_data(args.classes, args.dim, args.per_class, args.test_per_class, args.noise,
                     args.data_seed)
    tree, shards = prepare_data(args, data)
    commands = pack_commands(args.stoker, tree, shards, args.chunk_size)
    datasets = {}
    for name in dict.fromkeys(CONFIGS[c][0] for c in configs):
        datasets[name] = pack(*commands[name])
        datasets[name]["chunk_facts"] = chunk_facts(datasets[name]["path"])
        log(f"packed {name} in {datasets[name]['pack_seconds']:.1f} s: "
            f"{datasets[name]['chunk_facts']}")

    tasks = [{"config": c, "seed": s, "dataset": datasets[CONFIGS[c][0]]["path"],
              "shuffle": CONFIGS[c][1], "block_size": CONFIGS[c][2], "window": args.window,
              "batch_size": args.batch_size, "model": args.model, "hidden": args.hidden,
              "dim": args.dim, "classes": args.classes, "lr": args.lr,
              "weight_decay": args.weight_decay, "schedule": args.schedule,
              "epochs": args.epochs}
             for s in range(args.seed_start, args.seed_start + args.seeds) for c in configs]  # seed-major: partial runs are paired
    rows = []
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(args.jobs, initializer=_init_worker,
                  initargs=(data["test_x"], data["test_y"])) as pool:
        for r in pool.imap_unordered(train_one, tasks):
            rows.append(r)
            log(f"[{time.monotonic() - start:6.0f} s] {len(rows)}/{len(tasks)} "
                f"{r['config']:12s} seed {r['seed']}: acc {100 * r['accuracy']:.2f} %, "
                f"{r['classes_per_batch_epoch0']:.1f} classes/batch, "
                f"{statistics.mean(r['epoch_seconds']):.1f} s/epoch")
    for earlier in args.add_to:
        # Runs of an earlier result with the same settings and other seeds join the summary.
        prev = json.loads(Path(earlier).read_text())
        same = {k: v for k, v in prev["args"].items() if k not in ("seeds", "seed_start",
                                                                  "configs", "jobs", "add_to")}
        mine = {k: v for k, v in vars(args).items() if k in same}
        if same != mine:
            sys.exit(f"{earlier} was run with other settings: {same} vs {mine}")
        seeds = {(r["config"], r["seed"]) for r in rows}
        rows += [r for r in prev["rows"] if (r["config"], r["seed"]) not in seeds]
    configs = [c for c in CONFIGS if any(r["config"] == c for r in rows)]
    rows.sort(key=lambda r: (configs.index(r["config"]), r["seed"]))
    summary = summarize(rows, configs)

    result = {
        "command": [sys.executable, *sys.argv], "args": vars(args),
        "git_commit": git("rev-parse", "HEAD"), "git_dirty": bool(git("status", "--porcelain")),
        "stoker_version": getattr(stoker, "__version__", None),
        "stoker_cli_version": subprocess.run([args.stoker, "--version"], capture_output=True,
                                             text=True).stdout.strip() or None,
        "stoker_module": stoker.__file__, "torch": torch.__version__, "numpy": np.__version__,
        "data": {"synthetic": True, "classes": args.classes, "dim": args.dim,
                 "per_class": args.per_class, "train_samples": args.classes * args.per_class,
                 "test_per_class": args.test_per_class,
                 "test_samples": args.classes * args.test_per_class, "noise": args.noise,
                 "data_seed": args.data_seed, "sample_bytes": 4 * args.dim,
                 "shards": args.shards, "chunk_size": args.chunk_size},
        "datasets": datasets, "configs": {c: dict(zip(("dataset", "shuffle", "block_size"),
                                                       CONFIGS[c])) for c in configs},
        "rows": rows, "summary": summary, "seconds": time.monotonic() - start,
    }
    out = CACHE / "results" / (f"accuracy-many-classes-{args.epochs}ep-"
                               f"{time.strftime('%Y%m%d-%H%M%S')}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    log(f"wrote {out}")

    print(f"| config | classes per batch of {args.batch_size} (epoch 0) | "
          "test accuracy % (mean ± sd) | vs full, same seed (mean ± sd, points) | paired t | "
          "runs | s per epoch |")
    print("|---|---|---|---|---|---|---|")
    for s in summary:
        diff = ("–" if s["config"] == "full" else
                f"{fmt(s['paired_diff_mean'], '+.2f')} ± {fmt(s['paired_diff_std'], '.2f')}")
        print(f"| {s['config']} | {s['classes_per_batch']:.1f} | "
              f"{s['mean']:.2f} ± {fmt(s['std'], '.2f')} | {diff} | "
              f"{fmt(s['paired_t'], '+.2f')} | {s['runs']} | {s['epoch_seconds']:.1f} |")


if __name__ == "__main__":
    main()
