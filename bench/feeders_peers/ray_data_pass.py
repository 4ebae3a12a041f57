#!/usr/bin/env python3
"""The feeders benchmark's peer (issue 39): Ray Data decoding and augmenting JPEGs for a trainer.

Run with venv-ray's python (`bash bench/setup_peers.sh ray`):

    /var/tmp/stoker-bench/venv-ray/bin/python bench/feeders_peers/ray_data_pass.py ROOT \\
        --cpus C [--batch 256] [--size 224] [--images N] [--warmup-batches 2]

This is the PyTorch user's way today to put other machines' CPUs to work on the input pipeline:
a Ray cluster whose workers run the transform, the trainer iterating over the stream.

  ray.data.read_binary_files(the first N files of ROOT in sorted order, include_paths=True)
    .map_batches(per image: PIL decode -> convert("RGB") -> RandomResizedCrop(size,
                 scale=(0.08, 1), ratio=(3/4, 4/3)) with torchvision's parameter draw (10 tries,
                 then the central-crop fallback) -> Image.resize((size, size), BILINEAR, box=crop)
                 -> horizontal flip with p=0.5 -> uint8 HWC numpy; label = the class directory's
                 index among ROOT's sorted subdirectories, as ImageFolder numbers them)
    .iter_torch_batches(batch_size=256) -> {"image": uint8 NHWC tensor, "label": int64 tensor}

Decoding happens inside map_batches (the files are read as bytes), so decode is part of the
measured transform, as in every other system the benchmark runs. The Ray run is one pass: the
first --warmup-batches batches absorb the worker processes' start-up and imports; the clock runs
from the moment the last warm-up batch is in hand to the moment the last batch is. ray.init and
the dataset's construction are timed apart (init_s, plan_s, warmup_s).

CPU: the caller limits the whole run (driver, raylet, GCS, workers: they all inherit the
driver's cgroup) to C CPUs with a cgroup-v1 cpu quota. Ray schedules by logical CPUs and cannot
see that quota (it reads the root cgroup's, not this process's), so it would count the machine's
cores. --cpus C gives ray.init(num_cpus=max(1, ceil(C))): at least one task can run; with a
fractional C, ceil lets the tasks use the quota's whole fraction (two tasks in 1.25 CPU) instead
of leaving 0.25 CPU idle, at the cost of one extra worker time-sliced by the kernel; more logical
CPUs than that would only add processes contending for the same quota. --ray-cpus overrides it.

Prints one JSON line on stdout: images, seconds, images_per_second (the timed part), ray_version,
cpus (C), batches (timed), and more (ray_num_cpus, init_s, warmup_s, first_batch_s, total_*,
check: shape/dtype of the last batch). Logs go to stderr. Ray's dashboard, usage statistics and
progress bars are off; nothing is downloaded. ray.shutdown() ends every process Ray started, and
the session directory (a fresh one under /tmp) is removed.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time

# Before Ray is imported (its processes inherit the environment).
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"          # no usage reporting (would send data out)
os.environ.setdefault("RAY_DISABLE_DOCKER_CPU_WARNING", "1")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")  # never look for uv / fetch envs
os.environ.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning")

EXTENSIONS = (".jpg", ".jpeg")


def log(msg: str) -> None:
    print(f"ray_data_pass: {msg}", file=sys.stderr, flush=True)


def list_images(root: str, limit: int) -> tuple[list[str], dict[str, int]]:
    """(the first `limit` JPEG paths in sorted order, class directory name -> label).
    Classes are ROOT's sorted subdirectories (ImageFolder's numbering); files are sorted by their
    path relative to ROOT, i.e. class by class."""
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
    labels = {c: i for i, c in enumerate(classes)}
    rel = []
    for c in classes:
        for dirpath, _, names in os.walk(os.path.join(root, c), followlinks=True):
            rel.extend(os.path.relpath(os.path.join(dirpath, n), root) for n in names
                       if n.lower().endswith(EXTENSIONS))
    rel.sort()
    if limit > 0:
        rel = rel[:limit]
    return [os.path.join(os.path.abspath(root), r) for r in rel], labels


def make_transform(root: str, labels: dict[str, int], size: int):
    """The map_batches function: {"bytes", "path"} numpy batch -> {"image", "label"}."""
    root = os.path.abspath(root)
    scale = (0.08, 1.0)
    ratio = (3.0 / 4.0, 4.0 / 3.0)
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))

    def crop_params(rng, width: int, height: int) -> tuple[int, int, int, int]:
        """torchvision.transforms.RandomResizedCrop.get_params, in numpy: (top, left, h, w)."""
        area = height * width
        for _ in range(10):
            target_area = area * rng.uniform(scale[0], scale[1])
            aspect = math.exp(rng.uniform(log_ratio[0], log_ratio[1]))
            w = int(round(math.sqrt(target_area * aspect)))
            h = int(round(math.sqrt(target_area / aspect)))
            if 0 < w <= width and 0 < h <= height:
                i = int(rng.integers(0, height - h + 1))
                j = int(rng.integers(0, width - w + 1))
                return i, j, h, w
        in_ratio = width / height  # fallback: central crop
        if in_ratio < min(ratio):
            w = width
            h = int(round(w / min(ratio)))
        elif in_ratio > max(ratio):
            h = height
            w = int(round(h * max(ratio)))
        else:
            w, h = width, height
        return (height - h) // 2, (width - w) // 2, h, w

    def transform(batch: dict) -> dict:
        import io

        import numpy as np
        from PIL import Image

        rng = np.random.default_rng()
        data, paths = batch["bytes"], batch["path"]
        n = len(data)
        out = np.empty((n, size, size, 3), dtype=np.uint8)
        lab = np.empty(n, dtype=np.int64)
        for k in range(n):
            img = Image.open(io.BytesIO(data[k])).convert("RGB")
            width, height = img.size
            i, j, h, w = crop_params(rng, width, height)
            img = img.resize((size, size), Image.BILINEAR, box=(j, i, j + w, i + h))
            if rng.random() < 0.5:
                img = img.transpose(Image.FLIP_LEFT_RIGHT)
            out[k] = np.asarray(img)
            p = str(paths[k])
            cls = os.path.relpath(p, root).split(os.sep, 1)[0] if p.startswith(root) else \
                os.path.basename(os.path.dirname(p))
            lab[k] = labels[cls]
        return {"image": out, "label": lab}

    return transform


def ray_processes() -> list[str]:
    """Processes other than this one that look like Ray's (for the leftover check)."""
    out = []
    me = os.getpid()
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == me:
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if ("ray/core/src" in cmd or "ray::" in cmd or "default_worker.py" in cmd
                or "raylet" in cmd or "gcs_server" in cmd or "ray/dashboard" in cmd
                or "ray/_private" in cmd):
            out.append(f"{pid} {cmd[:120]}")
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("root", help="JPEG tree (ImageFolder layout: class dirs of .jpg/.jpeg files)")
    p.add_argument("--cpus", type=float, required=True,
                   help="CPU the whole Ray run may use (its cgroup's quota, set by the caller)")
    p.add_argument("--ray-cpus", type=int, default=0,
                   help="logical CPUs for ray.init (default: max(1, ceil(--cpus)))")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--images", type=int, default=0, help="the first N files in sorted order (0: all)")
    p.add_argument("--warmup-batches", type=int, default=2)
    p.add_argument("--map-batch", type=int, default=0,
                   help="images per map_batches call (its batch_size); 0: a whole read block "
                        "(batch_size=None), which lets Ray fuse the read and the transform")
    p.add_argument("--object-store-mb", type=int, default=1024,
                   help="Ray's object store (shared memory); 0: Ray's default (30%% of RAM)")
    p.add_argument("--stats", action="store_true", help="log the dataset's execution stats")
    a = p.parse_args()

    files, labels = list_images(a.root, a.images)
    if not files:
        sys.exit(f"no .jpg/.jpeg files under {a.root}")
    ray_cpus = a.ray_cpus or max(1, math.ceil(a.cpus))

    import logging

    import ray
    import ray.data

    # Ray 2.60 turns token authentication on for a new local cluster (writing ~/.ray/auth_token
    # once) and says so at WARNING on every start: keep its default, drop the message.
    logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(
        logging.ERROR)
    before = set(ray_processes())  # another Ray on this machine is not ours to report
    t0 = time.perf_counter()
    temp_dir = tempfile.mkdtemp(prefix="stoker-ray-", dir="/tmp")  # short: Ray's socket paths
    init_kwargs = dict(num_cpus=ray_cpus, num_gpus=0, include_dashboard=False,
                       logging_level=logging.WARNING, log_to_driver=False,
                       configure_logging=True, _temp_dir=temp_dir)
    if a.object_store_mb:
        init_kwargs["object_store_memory"] = a.object_store_mb << 20
    result = None
    try:
        ray.init(**init_kwargs)
        init_s = time.perf_counter() - t0
        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False
        ctx.enable_operator_progress_bars = False
        ctx.print_on_execution_start = False
        ctx.verbose_stats_logs = False
        logging.getLogger("ray").setLevel(logging.WARNING)
        logging.getLogger("ray.data").setLevel(logging.WARNING)
        logging.getLogger("ray.data._internal.progress").setLevel(logging.ERROR)  # "disabled"

        t1 = time.perf_counter()
        ds = (ray.data.read_binary_files(files, include_paths=True)
              .map_batches(make_transform(a.root, labels, a.size), batch_size=a.map_batch or None,
                           batch_format="numpy"))
        plan_s = time.perf_counter() - t1

        images = batches = 0
        total_images = total_batches = 0
        first_batch_s = warmup_s = None
        last = None
        t_iter = time.perf_counter()
        t_start = t_iter if a.warmup_batches <= 0 else None
        for batch in ds.iter_torch_batches(batch_size=a.batch):
            now = time.perf_counter()
            n = len(batch["label"])
            total_images += n
            total_batches += 1
            if first_batch_s is None:
                first_batch_s = now - t_iter
            if t_start is None:  # still warming up
                if total_batches >= a.warmup_batches:
                    t_start = now
                    warmup_s = now - t_iter
                continue
            images += n
            batches += 1
            last = batch
        t_end = time.perf_counter()
        seconds = (t_end - t_start) if t_start is not None and batches else 0.0
        check = None
        if last is not None:
            x, y = last["image"], last["label"]
            check = {"shape": list(x.shape), "dtype": str(x.dtype).replace("torch.", ""),
                     "labels_dtype": str(y.dtype).replace("torch.", ""),
                     "labels_min": int(y.min()), "labels_max": int(y.max()),
                     "mean": round(float(x.float().mean()), 2)}
        if a.stats:
            log(ds.stats())
        result = {"images": images, "seconds": seconds,
                  "images_per_second": images / seconds if seconds > 0 else 0.0,
                  "ray_version": ray.__version__, "cpus": a.cpus, "batches": batches,
                  "ray_num_cpus": ray_cpus, "batch": a.batch, "size": a.size,
                  "warmup_batches": a.warmup_batches, "init_s": round(init_s, 3),
                  "plan_s": round(plan_s, 3),
                  "warmup_s": round(warmup_s, 3) if warmup_s is not None else None,
                  "first_batch_s": round(first_batch_s, 3) if first_batch_s is not None else None,
                  "total_images": total_images, "total_batches": total_batches,
                  "total_s": round(t_end - t_iter, 3), "check": check}
        if 0 < batches < 4:
            # The pipeline runs ahead of the trainer while the warm-up batches are awaited, so
            # the first timed batches are often ready already: a short timed part overstates.
            log(f"only {batches} timed batch(es): the figure overstates the rate; use more "
                "images (thousands) or a smaller --batch")
        if not batches:
            log(f"no batch after the {a.warmup_batches} warm-up batches: "
                f"{total_images} images make {total_batches} batches of {a.batch}")
    finally:
        t2 = time.perf_counter()
        ray.shutdown()
        shutdown_s = time.perf_counter() - t2
        left = []
        for _ in range(50):  # workers exit a moment after the raylet
            left = [x for x in ray_processes() if x not in before]
            if not left:
                break
            time.sleep(0.1)
        if left:
            log("processes left after ray.shutdown(): " + "; ".join(left))
        shutil.rmtree(temp_dir, ignore_errors=True)
    result["shutdown_s"] = round(shutdown_s, 3)
    result["leftover_processes"] = len(left)
    print(json.dumps(result), flush=True)
    return 0 if result["batches"] else 1


if __name__ == "__main__":
    sys.exit(main())
