#!/usr/bin/env python3
"""One epoch in random order from cold, throttled storage: stoker's loader (chunk-wise shuffle and
full shuffle through the read pipeline) against ImageFolder-style random file reads, with the
medium's sequential bandwidth as the ceiling.

    sudo python3 bench/run_epoch.py [--build-dir build-bench] [--settings hdd,nfs] [--reps 3]

Variants, all on the 20,000-image sample data (benchlib.sample_data) and its pack with the default
64 MiB chunks (created under $STOKER_BENCH_CACHE/epoch when missing):
  seq            every chunk file in storage order, 4 MiB preads (run_chunk_sweep.py's reader):
                 the ceiling;
  chunk W=..     bench/epoch_bench --mode=chunk --window=W, 1 GiB budget (and one diagnostic row
                 with a 2 GiB budget);
  full           bench/epoch_bench --mode=full, 1 GiB budget, and a 16 MiB budget: 16 MiB is to
                 this 2 GB set what 1 GiB is to ImageNet's 140 GB, so its reads are as sparse;
  files N        the unpacked JPEGs in a random order, N readers each doing open + read whole +
                 close (epoch_bench --files_from); also with 8 readers and warm dentries/inodes.
With --defaults, instead (docs/benchmarks.md §4, "Accurate by default"): seq, and stoker.Loader's
defaults before and after mixed storage order became the default, each with the loader's default
budget (2 x W x 64 MiB = 2 GiB):
  old default    the pack in path order (class by class), whole chunks, W=16;
  new default    the pack in mixed order (`stoker pack`'s default now), the loader's automatic
                 shuffle unit (--block=auto: whole chunks on mixed data), W=16;
  class-ordered, new loader   the path-order pack read with the automatic unit (blocks of a
                 chunk, since its chunks hold one class each).
Before every measurement the caches are dropped (drop_caches 3, or 1 for the warm-metadata row)
and every data file is evicted with posix_fadvise(POSIX_FADV_DONTNEED); the variant then runs in
a cgroup-v1 blkio group capping read bytes/s and IOs/s on the root disk (benchlib.Throttle).
Slow variants are stopped after --time-limit seconds and their rates extrapolated.
Needs root. Results: docs/benchmarks.md §4.
"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402
from benchlib import log  # noqa: E402

SETTINGS = {  # name: (bytes/s, IOs/s); the same caps as the chunk-size sweep (§3)
    "hdd": (150_000_000, 150),
    "nfs": (400_000_000, 1000),
    "none": (0, 0),
}
SWEEP = Path(__file__).resolve().parent / "run_chunk_sweep.py"


def evict(paths: list[Path], level: int) -> None:
    """drop_caches, then POSIX_FADV_DONTNEED on every file (belt and braces: both evict)."""
    benchlib.drop_caches(level)
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def resident_bytes(paths: list[Path]) -> int:
    out = subprocess.run(["fincore", "-b", "-n", "-r", "-o", "RES", *map(str, paths)],
                         check=True, capture_output=True, text=True).stdout
    return sum(int(x) for x in out.split())


def main() -> int:
    p = benchlib.argument_parser(__doc__)
    p.add_argument("--settings", default="hdd,nfs")
    p.add_argument("--reps", type=int, default=3, help="rounds; medians reported")
    p.add_argument("--windows", default="1,4,16", help="chunk-mode windows W (chunks)")
    p.add_argument("--readers", default="2,8", help="parallel readers of the files peer")
    p.add_argument("--budget", default="1GiB")
    p.add_argument("--time-limit", type=float, default=40.0,
                   help="stop a variant after this many seconds and extrapolate")
    p.add_argument("--only", default="", help="comma-separated variant names (debugging)")
    p.add_argument("--defaults", action="store_true",
                   help="old vs new default pack order + loader unit (see above)")
    a = p.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (drop_caches, blkio cgroups)")
    # SIGTERM unwinds like Ctrl-C, so blkio groups are removed on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    stoker = benchlib.stoker_binary(a.build_dir)
    epoch_bench = Path(a.build_dir) / "bench" / "epoch_bench"
    if not epoch_bench.is_file():
        sys.exit(f"{epoch_bench} not found: ninja -C {a.build_dir} -j2 epoch_bench stoker")
    src, data = benchlib.sample_data(a.images, a.classes, a.seed)
    work = benchlib.CACHE / "epoch"
    work.mkdir(parents=True, exist_ok=True)

    def pack_once(dataset: Path, order: str) -> dict:
        info = None
        if (dataset / "versions").is_dir():
            info = json.loads(subprocess.run([str(stoker), "info", str(dataset), "--json"],
                                             capture_output=True, text=True).stdout or "null")
        if not info or info.get("files") != data["images"]:
            benchlib.rmtree(dataset)
            log(f"packing {src} into {dataset} (default chunk size, --order {order})")
            subprocess.run([str(stoker), "pack", str(src), str(dataset), "--order", order,
                            "--json"], check=True, capture_output=True)
            info = json.loads(subprocess.run([str(stoker), "info", str(dataset), "--json"],
                                             check=True, capture_output=True, text=True).stdout)
        return info

    # Path order (class by class): what §4 has always measured.
    dataset = work / "c64MiB"
    info = pack_once(dataset, "path")
    mixed = work / "c64MiB-mixed"
    mixed_info = pack_once(mixed, "shuffled") if a.defaults else None
    chunks = sorted((dataset / "chunks").iterdir())
    chunk_list = work / "chunks.list"  # storage order: what "sequential" means here
    chunk_list.write_text("".join(f"{c}\n" for c in chunks))
    jpegs = sorted(src.rglob("*.JPEG"))
    random.Random(a.seed).shuffle(jpegs)
    files_list = work / "files.list"
    files_list.write_text("".join(f"{f}\n" for f in jpegs))
    data_files = chunks + sorted((dataset / "segments").iterdir()) + jpegs
    if a.defaults:
        data_files += sorted((mixed / "chunks").iterdir()) + sorted((mixed / "segments").iterdir())

    eb = [str(epoch_bench), f"--time_limit={a.time_limit}"]
    ds = [f"--dataset={dataset}", f"--seed={a.seed}"]
    variants: list[tuple[str, list[str], int]] = [  # name, argv, drop_caches level
        ("seq", [sys.executable, str(SWEEP), "--read-list", str(chunk_list),
                 "--read-size", str(4 << 20)], 3)]
    for w in (int(x) for x in a.windows.split(",")):
        variants.append((f"chunk W={w}", eb + ds + ["--mode=chunk", f"--window={w}",
                                                    f"--budget={a.budget}"], 3))
    variants.append(("chunk W=16, 2 GiB", eb + ds + ["--mode=chunk", "--window=16",
                                                      "--budget=2GiB"], 3))
    variants.append(("full", eb + ds + ["--mode=full", f"--budget={a.budget}"], 3))
    variants.append(("full, 16 MiB", eb + ds + ["--mode=full", "--budget=16MiB"], 3))
    for n in (int(x) for x in a.readers.split(",")):
        variants.append((f"files {n}", eb + [f"--files_from={files_list}", f"--threads={n}"], 3))
    variants.append(("files 8, meta warm", eb + [f"--files_from={files_list}", "--threads=8"], 1))
    if a.defaults:
        loader = ["--mode=chunk", "--window=16", "--budget=2GiB"]
        variants = [variants[0],
                    ("old default", eb + ds + loader + ["--block=0"], 3),
                    ("new default", eb + [f"--dataset={mixed}", f"--seed={a.seed}"] + loader +
                     ["--block=auto"], 3),
                    ("class-ordered, new loader", eb + ds + loader + ["--block=auto"], 3)]
    if a.only:
        keep = set(a.only.split(","))
        variants = [v for v in variants if v[0] in keep]
    settings = a.settings.split(",")

    # Prime: read everything once, unthrottled and uncounted, so every variant starts from the
    # same state of the host's cache of the virtual disk (see docs/benchmarks.md, "Machine").
    t = time.monotonic()
    for lst in (chunk_list, files_list):
        subprocess.run([sys.executable, str(SWEEP), "--read-list", str(lst)], check=True,
                       capture_output=True)
    log(f"primed in {time.monotonic() - t:.1f} s")

    runs: dict[str, dict[str, list[dict]]] = {s: {v[0]: [] for v in variants} for s in settings}
    resident = []
    started = time.monotonic()
    for rep in range(a.reps):
        order = variants if rep % 2 == 0 else list(reversed(variants))
        for setting in settings:
            bps, iops = SETTINGS[setting]
            for name, argv, level in order:
                if level == 1:  # warm dentries and inodes, then drop only the page cache
                    for f in jpegs:
                        os.stat(f)
                evict(data_files, level)
                resident.append(resident_bytes(chunks + jpegs[:200]))
                with benchlib.Throttle(setting, bps, iops) as th:
                    try:
                        out = th.run(argv)
                    except subprocess.CalledProcessError as e:
                        sys.exit(f"{name} failed ({e.returncode}): {e.stdout}\n{e.stderr}")
                    ios, io_bytes = th.read_ios()
                r = json.loads(out)
                if name == "seq":  # run_chunk_sweep's reader: whole files, not samples
                    r = {"samples": data["images"], "planned": data["images"], "complete": True,
                         "bytes": r["bytes"], "seconds": r["seconds"], "errors": 0}
                    r["bytes_read"] = r["bytes"]
                r.update(ios=ios, io_bytes=io_bytes, load=os.getloadavg()[0])
                runs[setting][name].append(r)
                log(f"[rep {rep + 1} {setting}] {name}: {r['samples']} samples, "
                    f"{r['samples'] / r['seconds']:,.0f}/s, {r['bytes'] / r['seconds'] / 1e6:.0f}"
                    f" MB/s, {r['seconds']:.1f} s, {ios} IOs, load {r['load']:.1f} "
                    f"(+{time.monotonic() - started:.0f} s)")
    errors = sum(r.get("errors", 0) for s in runs.values() for rs in s.values() for r in rs)
    result = {"machine": benchlib.machine(), "command": " ".join(sys.argv), "data": data,
              "dataset": info, "mixed_dataset": mixed_info, "settings": {k: SETTINGS[k] for k in settings},
              "budget": a.budget, "time_limit": a.time_limit, "reps": a.reps,
              "resident_after_evict_max": max(resident), "errors": errors, "runs": runs}
    benchlib.save("epoch", result)
    print_tables(data, settings, variants, runs, max(resident), errors)
    return 0


def summary(rs: list[dict], total_samples: int) -> dict:
    """Medians over repetitions of the per-run rates."""
    med = benchlib.median
    return {
        "sps": med([r["samples"] / r["seconds"] for r in rs]),
        "mbps": med([r["bytes"] / r["seconds"] / 1e6 for r in rs]),
        "epoch_s": med([r["seconds"] * total_samples / r["samples"] for r in rs]),
        "complete": all(r["samples"] == r["planned"] for r in rs),
        "amp": med([r["bytes_read"] / r["bytes"] for r in rs]) if "bytes_read" in rs[0] else None,
        "io_kib": med([r["io_bytes"] / max(r["ios"], 1) / 1024 for r in rs]),
        "ios_per_sample": med([r["ios"] / r["samples"] for r in rs]),
        "wait": med([r["consumer_wait_seconds"] / r["seconds"] for r in rs])
        if "consumer_wait_seconds" in rs[0] else None,
        "peak": max(r["peak_bytes_held"] for r in rs) if "peak_bytes_held" in rs[0] else None,
        "engine": rs[0].get("engine", "-"),
        "runs": [r["samples"] / r["seconds"] for r in rs],
    }


def print_tables(data, settings, variants, runs, resident, errors) -> None:
    print(f"\nData: {benchlib.data_line(data)}")
    print(f"Page cache left after eviction (chunks + 200 JPEGs, max over passes): {resident} B; "
          f"sample errors: {errors}\n")
    n = data["images"]
    for setting in settings:
        bps, iops = SETTINGS[setting]
        cap = f"{bps / 1e6:.0f} MB/s, {iops} IOPS" if bps else "unthrottled"
        s = {name: summary(runs[setting][name], n) for name, _, _ in variants
             if runs[setting][name]}
        seq = s.get("seq")
        peers = [k for k in ("files 2", "files 8", "files 8, meta warm") if k in s]
        print(f"**{setting}** ({cap})\n")
        print("| variant | samples/s | MB/s | epoch s | of sequential | "
              + " | ".join(f"vs {k}" for k in peers)
              + " | bytes read / used | disk IOs / sample | mean IO KiB | consumer waiting "
                "| peak held | runs (samples/s) |")
        print("|---|---|---|---|---|" + "---|" * len(peers) + "---|---|---|---|---|---|")
        for name, _, _ in variants:
            if name not in s:
                continue
            v = s[name]
            of_seq = f"{v['mbps'] / seq['mbps']:.0%}" if seq else "-"
            print(f"| {name} | {v['sps']:,.0f} | {v['mbps']:.0f} | {v['epoch_s']:.1f}"
                  f"{'' if v['complete'] else ' (extrap.)'} | {of_seq} | ", end="")
            print(" | ".join(f"{v['sps'] / s[k]['sps']:.1f}x" for k in peers), end="")
            print(f" | {'-' if v['amp'] is None else format(v['amp'], '.2f')} | "
                  f"{v['ios_per_sample']:.2f} | {v['io_kib']:.0f} | "
                  f"{'-' if v['wait'] is None else format(v['wait'], '.0%')} | "
                  f"{'-' if v['peak'] is None else mib(v['peak'])} | "
                  f"{', '.join(f'{x:,.0f}' for x in v['runs'])} |")
        print()


def mib(n: int) -> str:
    return f"{n / 2**20:.0f} MiB"


if __name__ == "__main__":
    sys.exit(main())
