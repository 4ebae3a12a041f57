#!/usr/bin/env python3
"""Metadata benchmark driver: a 1.28 M-file snapshot vs the same paths on the file system.

    sudo python3 bench/run_metadata.py [--build-dir build-bench] [--files 1281167]
    sudo python3 bench/run_metadata.py --delete-tree       # remove the cached file tree

Creates (once; ~1 min) a tree of empty files with the ImageNet train paths under
$STOKER_BENCH_CACHE (default /var/tmp/stoker-bench), reuses it while its stamp matches, runs
bench/metadata_bench (Google Benchmark) and prints the result tables of docs/benchmarks.md §1.
Cold variants drop the page/dentry/inode caches and need root; --no-cold skips them.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402
from benchlib import log  # noqa: E402


def tree_ok(tree: Path, files: int) -> bool:
    stamp = tree / ".stoker-fs-tree"
    return stamp.is_file() and stamp.read_text().strip() == f"files={files}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--build-dir", default=str(benchlib.REPO / "build-bench"))
    p.add_argument("--files", type=int, default=1281167)
    p.add_argument("--tree", type=Path, default=None, help="file tree (default: in the cache dir)")
    p.add_argument("--delete-tree", action="store_true", help="delete the cached tree and exit")
    p.add_argument("--no-cold", action="store_true", help="skip the drop_caches variants")
    p.add_argument("--min-time", type=float, default=None, help="override benchmark min time")
    p.add_argument("--repetitions", type=int, default=3,
                   help="repeat every benchmark; the tables show medians (shared, noisy machine)")
    a = p.parse_args()

    tree = a.tree or benchlib.CACHE / f"fs-tree-{a.files}"
    if a.delete_tree:
        log(f"deleting {tree}")
        benchlib.rmtree(tree)
        return 0
    binary = Path(a.build_dir) / "bench" / "metadata_bench"
    if not binary.is_file():
        sys.exit(f"{binary} not found: configure with -DSTOKER_BENCH=ON and build metadata_bench")
    cold = not a.no_cold
    if cold and os.geteuid() != 0:
        sys.exit("cold variants need root (drop_caches); run as root or pass --no-cold")

    if not tree_ok(tree, a.files):
        log(f"creating {a.files} empty files under {tree} (one-time)")
        benchlib.rmtree(tree)
        subprocess.run([str(binary), f"--files={a.files}", f"--create_fs_tree={tree}"], check=True)

    work = benchlib.CACHE / "metadata"
    work.mkdir(parents=True, exist_ok=True)
    out_json = work / "metadata_bench.json"
    cmd = [str(binary), f"--files={a.files}", f"--dataset_dir={work / 'dataset'}",
           f"--fs_tree={tree}", f"--benchmark_out={out_json}", "--benchmark_out_format=json"]
    if cold:
        cmd.append("--cold")
    if a.repetitions > 1:
        cmd += [f"--benchmark_repetitions={a.repetitions}",
                "--benchmark_report_aggregates_only=true"]
    if a.min_time is not None:
        cmd.append(f"--benchmark_min_time={a.min_time}")
    log("running: " + " ".join(cmd))
    subprocess.run(cmd, check=True)

    raw = json.loads(out_json.read_text())
    runs = {}
    for b in raw["benchmarks"]:
        if b.get("error_occurred"):
            sys.exit(f"{b['name']}: {b.get('error_message')}")
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        # "FsLookupWarm/stat/0/min_time:3.000/real_time" -> "FsLookupWarm/stat"
        name = "/".join(part for part in b["run_name"].split("/")
                        if not (part.isdigit() or ":" in part or part == "real_time"))
        runs[(name, b.get("threads", 1))] = b
    result = {"machine": benchlib.machine(), "command": " ".join(sys.argv), "benchmark": raw}
    benchlib.save("metadata", result)
    print_tables(runs, a.files)
    return 0


def ms(b: dict) -> float:
    scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b["time_unit"]]
    return b["real_time"] * scale


def print_tables(runs: dict, files: int) -> None:
    def get(name: str, threads: int = 1):
        return runs.get((name, threads))

    build = get("BuildSnapshot")
    print(f"\nSnapshot: {files} files, {build['snapshot_bytes'] / 1e6:.1f} MB, "
          f"{build['bytes_per_file']:.1f} bytes/file; BuildSnapshot {ms(build):.0f} ms "
          f"(in-memory, mean of {build['iterations']})\n")
    print("| open | time | target |")
    print("|---|---|---|")
    for name, label in [
            ("DatasetOpen/warm/verify_crc", "Dataset::Open, page cache warm, CRC checked"),
            ("DatasetOpen/warm/no_crc", "Dataset::Open, page cache warm, no CRC"),
            ("DatasetOpen/cold/verify_crc", "Dataset::Open after drop_caches, CRC checked")]:
        if b := get(name):
            print(f"| {label} | {ms(b):.1f} ms | < 50 ms |")

    print("\n| lookups (random existing paths) | 1 thread | CPU ns/lookup (1 thread) | 2 threads "
          "| 2T/1T |")
    print("|---|---|---|---|---|")
    rows = [("SnapshotFindFile/mmap", "Snapshot::FindFile (Dataset's mmap)"),
            ("SnapshotFindFile/anon_4k", "Snapshot::FindFile, copy in anonymous 4 KiB pages"),
            ("SnapshotFindFile/anon_thp", "Snapshot::FindFile, copy in anonymous 2 MiB THP"),
            ("FsLookupWarm/stat", "fstatat(), warm dcache"),
            ("FsLookupWarm/stat_open_close", "fstatat()+openat()+close(), warm dcache"),
            ("FsLookupCold/stat", "fstatat(), after drop_caches"),
            ("FsLookupCold/stat_open_close", "fstatat()+openat()+close(), after drop_caches"),
            ("SnapshotFindFile/after_cold_open", "Snapshot::FindFile, right after a cold open")]
    rate, cpu_ns = {}, {}
    for name, label in rows:
        one, two = get(name, 1), get(name, 2)
        if not one:
            continue
        rate[name] = one["items_per_second"]
        # CPU time of one lookup: an iteration does items_per_second * real time lookups.
        cpu_ns[name] = cpu_ms(one) * 1e6 / (one["items_per_second"] * real_s(one))
        if two:
            r2 = f"{two['items_per_second'] / 1e6:.3f} M/s | " \
                 f"{two['items_per_second'] / one['items_per_second']:.2f}x"
        else:
            r2 = "- | -"
        print(f"| {label} | {one['items_per_second'] / 1e6:.4g} M/s | {cpu_ns[name]:,.0f} | {r2} |")

    snap = "SnapshotFindFile/mmap"
    if snap in rate:
        print("\n| ratio, 1 thread | by wall-clock rate | by CPU time | target |")
        print("|---|---|---|---|")
        for name, label, target in [
                ("FsLookupWarm/stat", "FindFile / warm stat()", ">= 20x"),
                ("FsLookupWarm/stat_open_close", "FindFile / warm stat()+open()+close()", ""),
                ("FsLookupCold/stat", "FindFile / cold stat()", ""),
                ("FsLookupCold/stat_open_close", "FindFile / cold stat()+open()+close()", "")]:
            if name in rate:
                print(f"| {label} | {rate[snap] / rate[name]:.1f}x | "
                      f"{cpu_ns[name] / cpu_ns[snap]:.1f}x | {target} |")


def real_s(b: dict) -> float:
    return ms(b) / 1e3


def cpu_ms(b: dict) -> float:
    scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b["time_unit"]]
    return b["cpu_time"] * scale


if __name__ == "__main__":
    sys.exit(main())
