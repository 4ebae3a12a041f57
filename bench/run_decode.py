#!/usr/bin/env python3
"""Decode + augmentation throughput (issue #4): stoker's ImageLoader against torchvision's
ImageFolder + DataLoader (Pillow, and pillow-simd), NVIDIA DALI's CPU pipeline and FFCV, on
ImageNet-like JPEGs made from real photos, with 1 core and with all cores.

    python3 bench/run_decode.py [--subset 5000] [--systems torchvision,simd,dali,ffcv,stoker]
                                [--cores 1,2] [--modes train,val] [--workers 0,1,2,3,4]

Set-up: `bash bench/setup_peers.sh` creates the peers' virtual environments under
$STOKER_BENCH_CACHE (default /var/tmp/stoker-bench): torchvision does not import beside the
project's torch, and DALI and FFCV need their own packages. stoker runs in the project's .venv.

Data: the sample tree of benchlib.sample_data (--images/--classes/--seed, default the 20,000-image
set), cut to its first classes (sorted, whole classes) until --subset images: a tree of hard links
under $STOKER_BENCH_CACHE/decode/. Its bits per pixel (file bytes * 8 / (w * h)) are recorded.
stoker reads a pack of that tree (`stoker pack`, cached beside it); FFCV converts it to its own
.beton format (re-encoded JPEGs, cached beside it). Every file is read once before measuring: this
measures decode and augmentation, not storage (run_epoch.py measures storage).

Pipelines, batch 256, float32 NCHW output normalized with ImageNet's mean/std:
  train  RandomResizedCrop(224) + RandomHorizontalFlip + ToTensor + Normalize
  val    Resize(256) + CenterCrop(224) + ToTensor + Normalize
(or each system's equivalent operators; see bench/decode_peers/*_peer.py).

Measurement: every configuration runs in a subprocess of the system's interpreter, its CPU
affinity set to the first N CPUs before exec (so its worker processes and threads inherit it).
It pulls a warm-up of --warmup-batches batches, then times one whole pass of the subset from the
start of iteration to the last batch (so pipeline start-up is counted, as in a real epoch).
torchvision and pillow-simd are tuned: each --workers value runs over --tune-images images, and the
best gets the whole pass. DALI, FFCV and stoker use as many threads/workers as cores.
The cost split times each stage of the torchvision pipeline in one single-threaded process
(bench/decode_peers/costsplit.py).

Output: a table on stdout (images/s total and per core, ratio to torchvision with the same cores
and mode) and JSON in $STOKER_BENCH_CACHE/results/decode-<timestamp>.json.
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "decode_peers"))
import benchlib  # noqa: E402
import common  # noqa: E402  (bench/decode_peers/common.py)
from benchlib import CACHE, REPO, log  # noqa: E402

PEERS = HERE / "decode_peers"
# system -> (worker script, venv whose interpreter runs it, what "workers" means for it)
SYSTEMS = {
    "torchvision": ("torchvision_peer.py", CACHE / "venv-tv", "DataLoader num_workers"),
    "simd": ("torchvision_peer.py", CACHE / "venv-simd", "DataLoader num_workers"),
    "dali": ("dali_peer.py", CACHE / "venv-dali", "pipeline num_threads"),
    "ffcv": ("ffcv_peer.py", CACHE / "venv-ffcv", "Loader num_workers"),
    "stoker": ("stoker_peer.py", REPO / ".venv", "ImageLoader threads"),
}
TUNED = ("torchvision", "simd")  # the others run with workers = cores


def subset_tree(src: Path, want: int) -> tuple[Path, int]:
    """The first classes of src (sorted) holding >= `want` images, as hard links (same file
    system, so no copy; a plain copy if linking fails). Cached by name; a stamp marks it done."""
    classes = sorted(e.name for e in os.scandir(src) if e.is_dir())
    chosen, n = [], 0
    for c in classes:
        if want and n >= want:
            break
        files = sorted(os.listdir(src / c))
        chosen.append((c, files))
        n += len(files)
    dst = CACHE / "decode" / f"{src.name}-first{len(chosen)}c"
    stamp = dst.parent / f".{dst.name}.done"
    if stamp.exists() and dst.is_dir():
        return dst, n
    benchlib.rmtree(dst)
    for c, files in chosen:
        (dst / c).mkdir(parents=True)
        for f in files:
            try:
                os.link(src / c / f, dst / c / f)
            except OSError:
                shutil.copy2(src / c / f, dst / c / f)
    stamp.write_text(json.dumps({"images": n, "classes": len(chosen)}) + "\n")
    return dst, n


def tree_summary(root: Path) -> dict:
    files = common.image_files(str(root))
    bpp, sizes, pixels = [], 0, 0
    for path, _ in files:
        wh = common.jpeg_size(path)
        size = os.path.getsize(path)
        sizes += size
        if wh:
            pixels += wh[0] * wh[1]
            bpp.append(size * 8 / (wh[0] * wh[1]))
    return {"images": len(files), "classes": len({lab for _, lab in files}),
            "total_bytes": sizes, "mean_bytes": sizes / len(files),
            "mean_pixels": pixels / len(files), "mean_bpp": sum(bpp) / len(bpp),
            "min_bpp": min(bpp), "max_bpp": max(bpp),
            "bpp_of_totals": sizes * 8 / pixels}


def pack_stoker(tree: Path, cli: str) -> tuple[Path, dict]:
    dst = tree.parent / f"{tree.name}.stoker"
    stamp = tree.parent / f".{dst.name}.done"
    if stamp.exists():
        return dst, json.loads(stamp.read_text())
    benchlib.rmtree(dst)
    cmd = [cli, "pack", "--json", "-q", str(tree), str(dst)]
    log(f"pack: {' '.join(cmd)}")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    summary = json.loads(out) if out.strip() else {}
    stamp.write_text(json.dumps(summary) + "\n")
    return dst, summary


def python_of(venv: Path) -> Path:
    return venv / "bin" / "python"


QUIET = {"wait_s": 60.0, "retries": 2, "threshold": 0.10}  # set from the command line


def wait_quiet(cpuset: list[int]) -> float:
    """Waits (at most QUIET["wait_s"]) until other processes use under QUIET["threshold"] of the
    given CPUs over one second: the machine is shared (builds, fuzzers). Returns the last share."""
    deadline = time.monotonic() + QUIET["wait_s"]
    while True:
        b = cpu_busy_s(cpuset)
        time.sleep(1.0)
        share = (cpu_busy_s(cpuset) - b) / len(cpuset)
        if share < QUIET["threshold"] or time.monotonic() >= deadline:
            return share
        log(f"    waiting: other processes use {100 * share:.0f} % of CPUs {cpuset}")
        time.sleep(4.0)


def run_worker(system: str, python: Path, args: list[str], ncores: int, timeout: float) -> dict:
    """run_worker_once, repeated (after waiting for quiet CPUs) while other processes took more
    than QUIET["threshold"] of the pinned CPUs, up to QUIET["retries"] times; the least
    disturbed run is kept and the others are listed under "disturbed_runs"."""
    runs = []
    for _ in range(1 + QUIET["retries"]):
        r = run_worker_once(system, python, args, ncores, timeout)
        runs.append(r)
        if "error" in r or r["foreign_cpu_share"] <= QUIET["threshold"]:
            break
    best = min(runs, key=lambda r: r.get("foreign_cpu_share", 0.0))
    others = [r for r in runs if r is not best]
    if others:
        best["disturbed_runs"] = others
    return best


def run_worker_once(system: str, python: Path, args: list[str], ncores: int,
                    timeout: float) -> dict:
    """One measurement in a subprocess pinned to the first `ncores` CPUs. Returns its JSON, or
    {"error": ...} with the end of its stderr."""
    script = PEERS / SYSTEMS[system][0]
    cpuset = sorted(os.sched_getaffinity(0))[:ncores]
    quiet_before = wait_quiet(cpuset) if QUIET["wait_s"] > 0 else None
    env = dict(os.environ, OMP_NUM_THREADS=str(ncores), MKL_NUM_THREADS=str(ncores),
               PYTHONUNBUFFERED="1")
    env.pop("PYTHONPATH", None)
    cmd = [str(python), str(script), *args]
    shown = f"taskset -c {','.join(map(str, cpuset))} {' '.join(cmd)}"
    log(f"  {shown}")
    t = time.monotonic()
    busy0, kids0 = cpu_busy_s(cpuset), children_cpu_s()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout,
                           preexec_fn=lambda: os.sched_setaffinity(0, cpuset))
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s", "command": shown}
    except OSError as e:
        return {"error": repr(e), "command": shown}
    wall = time.monotonic() - t
    # CPU time other processes took on the pinned CPUs while this ran (the machine is shared):
    # busy time of those CPUs minus what the worker and its children used.
    foreign = max(0.0, cpu_busy_s(cpuset) - busy0 - (children_cpu_s() - kids0))
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        tail = "\n".join(p.stderr.strip().splitlines()[-15:])
        return {"error": f"exit {p.returncode}: {tail}", "command": shown}
    r = json.loads(lines[-1])
    r.update(command=shown, wall_s=wall, cores=ncores, loadavg_after=os.getloadavg(),
             foreign_cpu_share=foreign / (wall * ncores), foreign_share_before=quiet_before)
    if r["foreign_cpu_share"] > 0.05:
        log(f"    note: other processes used {100 * r['foreign_cpu_share']:.0f} % of the "
            "pinned CPUs during this run")
    return r


def cpu_busy_s(cpuset: list[int]) -> float:
    """Non-idle seconds of the given CPUs since boot (/proc/stat; idle and iowait excluded)."""
    hz = os.sysconf("SC_CLK_TCK")
    total = 0
    with open("/proc/stat") as f:
        for line in f:
            name, *v = line.split()
            if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpuset:
                ticks = [int(x) for x in v]
                total += sum(ticks[:8]) - ticks[3] - ticks[4]
    return total / hz


def children_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def measure(system: str, python: Path, data: Path, mode: str, ncores: int, a) -> dict:
    """The best configuration of one system for (mode, cores): tuning runs, then a whole pass."""
    base = ["--data", str(data), "--mode", mode, "--batch", str(a.batch),
            "--warmup-batches", str(a.warmup_batches), "--seed", str(a.seed),
            "--cache", str(CACHE / "decode")]
    if system in TUNED:
        candidates = [int(w) for w in a.workers.split(",")]
    else:
        candidates = [ncores]
    tuning = []
    best = candidates[0]
    if len(candidates) > 1:
        for w in candidates:
            r = run_worker(system, python, [*base, "--workers", str(w),
                                            "--limit-images", str(a.tune_images)], ncores,
                           a.timeout)
            tuning.append(r)
            log(f"    tune workers={w}: " + (f"{r['images_per_s']:.1f} images/s"
                                           if "error" not in r else r["error"][:300]))
        ok = [r for r in tuning if "error" not in r]
        if not ok:
            return {"system": system, "mode": mode, "cores": ncores, "tuning": tuning,
                    "error": tuning[-1]["error"]}
        best = max(ok, key=lambda r: r["images_per_s"])["workers"]
    runs = []
    for _ in range(a.repeats):
        r = run_worker(system, python, [*base, "--workers", str(best)], ncores, a.timeout)
        runs.append(r)
        if "error" in r:
            break
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return {"system": system, "mode": mode, "cores": ncores, "tuning": tuning,
                "error": runs[-1]["error"], "command": runs[-1].get("command")}
    med = benchlib.median([r["images_per_s"] for r in ok])
    # A normalized batch of photos has a per-pixel std near 1; a constant batch (e.g. all zeros)
    # means the system did not actually produce the images, so its speed means nothing.
    invalid = [r["check"] for r in ok if r.get("check", {}).get("std", 1.0) < 0.05]
    if invalid:
        log(f"    INVALID OUTPUT: last batch {invalid[0]}")
    log(f"    {system} {mode} {ncores} core(s) workers={best}: {med:.1f} images/s")
    return {"system": system, "mode": mode, "cores": ncores, "workers": best,
            "images_per_s": med, "images_per_s_per_core": med / ncores, "runs": runs,
            "foreign_cpu_share": max(r["foreign_cpu_share"] for r in ok), "tuning": tuning,
            "invalid_output": bool(invalid)}


def print_table(results: list[dict], meaning: dict) -> None:
    ref = {(r["mode"], r["cores"]): r["images_per_s"] for r in results
           if r["system"] == "torchvision" and "error" not in r}
    print("| mode | system | cores | workers | images/s | images/s per core | vs torchvision "
          "| CPU taken by others |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        if "error" in r:
            print(f"| {r['mode']} | {r['system']} | {r['cores']} | - | failed | - | - | - |")
            continue
        base = ref.get((r["mode"], r["cores"]))
        ratio = f"{r['images_per_s'] / base:.2f}x" if base else "-"
        if r.get("invalid_output"):
            ratio += " (INVALID: constant output)"
        print(f"| {r['mode']} | {r['system']} | {r['cores']} | {r['workers']} "
              f"({meaning[r['system']]}) | {r['images_per_s']:.0f} | "
              f"{r['images_per_s_per_core']:.0f} | {ratio} | "
              f"{100 * r['foreign_cpu_share']:.0f} % |")


def print_costsplit(cs: list[dict]) -> None:
    for c in cs:
        if "error" in c:
            print(f"\ncost split ({c.get('mode')}): failed: {c['error'][:500]}")
            continue
        print(f"\ncost split, torchvision {c['mode']} pipeline, one thread, {c['images']} images "
              f"(PIL {c['versions']['PIL']}): {c['total_us']:.0f} us/image = "
              f"{c['single_core_images_per_s']:.0f} images/s")
        print("| stage | us/image | share |")
        print("| --- | --- | --- |")
        for k, v in c["per_image_us"].items():
            print(f"| {k} | {v:.0f} | {100 * c['share'][k]:.1f} % |")


def main() -> int:
    p = benchlib.argument_parser(__doc__)
    p.add_argument("--subset", type=int, default=5000,
                   help="use the first classes holding this many images (0: all)")
    p.add_argument("--systems", default="torchvision,simd,dali,ffcv,stoker")
    p.add_argument("--cores", default="1,2", help="CPU counts to pin each run to")
    p.add_argument("--modes", default="train,val")
    p.add_argument("--workers", default="0,1,2,3,4",
                   help="num_workers tried for torchvision and pillow-simd")
    p.add_argument("--tune-images", type=int, default=1280,
                   help="images per tuning run (0: a whole pass each)")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--warmup-batches", type=int, default=2)
    p.add_argument("--repeats", type=int, default=1, help="whole passes of the best config")
    p.add_argument("--costsplit-images", type=int, default=512, help="0: no cost split")
    p.add_argument("--timeout", type=float, default=900, help="seconds per worker run")
    p.add_argument("--quiet-wait", type=float, default=60,
                   help="before each run, wait up to this many seconds for other processes to "
                        "leave the CPUs (0: don't)")
    p.add_argument("--quiet-threshold", type=float, default=0.10,
                   help="share of the pinned CPUs other processes may use")
    p.add_argument("--noisy-retries", type=int, default=2,
                   help="re-runs of a measurement disturbed beyond --quiet-threshold")
    p.add_argument("--stoker-cli", default=str(REPO / ".venv" / "bin" / "stoker"))
    for s, (_, venv, _) in SYSTEMS.items():
        p.add_argument(f"--python-{s}", default=str(python_of(venv)),
                       help=f"interpreter for {s}")
    a = p.parse_args()
    QUIET.update(wait_s=a.quiet_wait, retries=a.noisy_retries, threshold=a.quiet_threshold)
    systems = [s for s in a.systems.split(",") if s]
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        sys.exit(f"unknown systems {sorted(unknown)}; known: {sorted(SYSTEMS)}")
    cores = [int(c) for c in a.cores.split(",")]
    if max(cores) > len(os.sched_getaffinity(0)):
        sys.exit(f"only {len(os.sched_getaffinity(0))} CPUs available")
    modes = [m for m in a.modes.split(",") if m]

    src, _ = benchlib.sample_data(a.images, a.classes, a.seed)
    data, n = subset_tree(src, a.subset)
    summary = tree_summary(data)
    log(f"data: {data}: {summary['images']} images, {summary['classes']} classes, "
        f"mean {summary['mean_bytes'] / 1e3:.1f} KB, mean {summary['mean_bpp']:.2f} bits/pixel")
    log(f"warming the page cache: {benchlib.warm_tree(data):.1f} s")
    inputs = {s: data for s in systems}
    extra: dict = {}
    if "stoker" in systems:
        try:
            inputs["stoker"], extra["stoker_pack"] = pack_stoker(data, a.stoker_cli)
            benchlib.warm_tree(inputs["stoker"])
        except (subprocess.CalledProcessError, OSError) as e:
            extra["stoker_pack_error"] = repr(e) + getattr(e, "stderr", "")
            log(f"stoker pack failed: {extra['stoker_pack_error']}")

    results: list[dict] = []
    errors: dict = {}
    for s in systems:
        python = Path(getattr(a, f"python_{s}"))
        if not python.is_file():
            errors[s] = f"{python} not found: run bash bench/setup_peers.sh"
            log(f"{s}: {errors[s]}")
            continue
        if s == "stoker" and "stoker_pack_error" in extra:
            errors[s] = "pack failed: " + extra["stoker_pack_error"]
            continue
        if s == "ffcv":  # convert once, untimed
            prep = run_worker(s, python, ["--data", str(data), "--cache",
                                          str(CACHE / "decode"), "--prepare-only"],
                              max(cores), a.timeout * 2)
            extra["ffcv_prepare"] = prep
            if "error" in prep:
                errors[s] = "dataset conversion failed: " + prep["error"]
                log(f"ffcv: {errors[s][:500]}")
                continue
        for mode in modes:
            for c in cores:
                log(f"{s} {mode} {c} core(s)")
                r = measure(s, python, inputs[s], mode, c, a)
                results.append(r)
                if "error" in r:
                    log(f"  failed: {r['error'][:500]}")

    costsplit = []
    if a.costsplit_images and "torchvision" in systems and "torchvision" not in errors:
        for mode in modes:
            r = run_worker_costsplit(Path(a.python_torchvision), data, mode, a)
            costsplit.append(r)

    meaning = {s: m for s, (_, _, m) in SYSTEMS.items()}
    print(f"\ndata: {summary['images']} JPEGs, {summary['classes']} classes, mean "
          f"{summary['mean_bytes'] / 1e3:.1f} KB, {summary['mean_bpp']:.2f} bits/pixel; "
          f"batch {a.batch}, float32 NCHW\n")
    print_table(results, meaning)
    print_costsplit(costsplit)
    for s, e in errors.items():
        print(f"\n{s}: not measured: {e[:1000]}")
    benchlib.save("decode", {"args": vars(a), "machine": benchlib.machine(), "data": str(data),
                             "data_summary": summary, "results": results, "errors": errors,
                             "costsplit": costsplit, **extra})
    return 0


def run_worker_costsplit(python: Path, data: Path, mode: str, a) -> dict:
    script = PEERS / "costsplit.py"
    cmd = [str(python), str(script), "--data", str(data), "--mode", mode, "--batch",
           str(a.batch), "--images", str(a.costsplit_images), "--seed", str(a.seed)]
    log(f"cost split: taskset -c 0 {' '.join(cmd)}")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if QUIET["wait_s"] > 0:
        wait_quiet([0])
    t, busy0, kids0 = time.monotonic(), cpu_busy_s([0]), children_cpu_s()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=a.timeout,
                       preexec_fn=lambda: os.sched_setaffinity(0, {0}))
    wall = time.monotonic() - t
    foreign = max(0.0, cpu_busy_s([0]) - busy0 - (children_cpu_s() - kids0))
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        return {"mode": mode, "error": p.stderr[-2000:]}
    r = json.loads(lines[-1])
    r.update(command=f"taskset -c 0 {' '.join(cmd)}", foreign_cpu_share=foreign / wall)
    return r


if __name__ == "__main__":
    sys.exit(main())
