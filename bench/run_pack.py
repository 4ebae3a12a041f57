#!/usr/bin/env python3
"""Packing benchmark: `stoker pack` vs `tar -cf` on the same ImageNet-like tree, same run.

    python3 bench/run_pack.py [--build-dir build-bench] [--images 20000] [--classes 100] [--reps 3]

The source tree (real photographs, ImageNet size and bits per pixel) comes from
scripts/make_sample_data.py and is cached under $STOKER_BENCH_CACHE (default /var/tmp/stoker-bench).
Every timed run starts with the source in the page cache (read whole just before) and writes to
the same ext4 disk. `stoker pack` syncs its chunks and metadata, so tar is timed both alone and
followed by an fsync of the archive (`sync FILE`), the fair peer. Each repetition alternates the
order of the tools; the tables report medians. docs/benchmarks.md §2 has the results.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402
from benchlib import log  # noqa: E402


def timed(argv: list[str]) -> tuple[float, str]:
    t = time.monotonic()
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    return time.monotonic() - t, out


def main() -> int:
    p = benchlib.argument_parser(__doc__)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1, help="untimed repetitions first")
    p.add_argument("--chunk-size", default="64MiB")
    a = p.parse_args()

    stoker = benchlib.stoker_binary(a.build_dir)
    src, data = benchlib.sample_data(a.images, a.classes, a.seed)
    out = benchlib.CACHE / "pack-out"
    runs: dict[str, list[float]] = {"stoker pack": [], "tar -cf": [], "tar -cf + fsync": []}
    stoker_json = []
    for rep in range(-a.warmup, a.reps):
        order = ["stoker", "tar"] if rep % 2 == 0 else ["tar", "stoker"]
        for tool in order:
            benchlib.rmtree(out)
            out.mkdir(parents=True)
            warm = benchlib.warm_tree(src)
            os.sync()  # earlier runs' dirty pages must not be written during this one
            if tool == "stoker":
                secs, text = timed([str(stoker), "pack", str(src), str(out / "ds"),
                                    "--chunk-size", a.chunk_size, "--json"])
                if rep >= 0:
                    runs["stoker pack"].append(secs)
                    stoker_json.append(json.loads(text))
            else:
                tar = out / "data.tar"
                secs, _ = timed(["tar", "-cf", str(tar), "-C", str(src), "."])
                fsync, _ = timed(["sync", str(tar)])
                if rep >= 0:
                    runs["tar -cf"].append(secs)
                    runs["tar -cf + fsync"].append(secs + fsync)
            label = f"rep {rep + 1}/{a.reps}" if rep >= 0 else "warm-up (not counted)"
            log(f"{label} {tool}: {secs:.2f} s (source re-warmed in {warm:.1f} s)")
    benchlib.rmtree(out)

    files, nbytes = data["images"], data["total_bytes"]
    med = {k: benchlib.median(v) for k, v in runs.items()}
    result = {"machine": benchlib.machine(), "command": " ".join(sys.argv), "data": data,
              "runs_seconds": runs, "median_seconds": med, "stoker_json": stoker_json}

    print(f"\nData: {benchlib.data_line(data)}")
    last = stoker_json[-1]
    print(f"stoker pack: {last['chunks']} chunks of <= {a.chunk_size}, metadata "
          f"{last['metadata_bytes']} bytes ({last['metadata_bytes_per_file']:.0f} B/file)\n")
    # Paired: each repetition's peer time over the same repetition's stoker time, so slow
    # phases of the shared machine hit both sides of a ratio.
    paired = {k: benchlib.median([t / s for t, s in zip(v, runs["stoker pack"])])
              for k, v in runs.items()}
    result["paired_time_ratio"] = paired
    benchlib.save("pack", result)
    print(f"| tool | median s (of {a.reps}) | runs (s) | files/s | MB/s | "
          "time / stoker's (median of per-rep ratios) |")
    print("|---|---|---|---|---|---|")
    for k, secs in med.items():
        runs_s = ", ".join(f"{x:.2f}" for x in runs[k])
        print(f"| {k} | {secs:.2f} | {runs_s} | {files / secs:,.0f} | {nbytes / secs / 1e6:.0f} | "
              f"{paired[k]:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
