#!/usr/bin/env python3
"""Chunk-size sweep: pack time, and chunk-shuffled whole-dataset read time from emulated slow
storage, for --chunk-size 1, 4, 16, 64, 256 MiB; per-file random reads (ImageFolder) as the peer.

    sudo python3 bench/run_chunk_sweep.py [--build-dir build-bench] [--images 20000]

Storage emulation (the host caches the VM's disk, so dropping the page cache alone gives
several GB/s): before every read pass the page/dentry/inode caches are dropped and the reader runs
in a cgroup-v1 blkio group that caps read bytes/s and IOs/s on the root disk:
  hdd  150 MB/s, 150 IOPS     nfs  400 MB/s, 1000 IOPS     (and "none": unthrottled reference)
A chunk-shuffled pass reads every chunk file whole, in a random order, with 4 MiB preads (what the
read pipeline will do); the peer opens and reads whole JPEGs in a random order (time-capped). The
sequential baseline reads one 1 GiB file front to back with the same preads under the same cap.
Needs root. Results: docs/benchmarks.md §3.
"""
from __future__ import annotations

import argparse
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

SETTINGS = {  # name: (bytes/s, IOs/s)
    "hdd": (150_000_000, 150),
    "nfs": (400_000_000, 1000),
    "none": (0, 0),
}
WINDOWS = (16, 64)  # shuffle window sizes (chunks) for the memory table


def read_pass(list_file: Path, read_size: int, time_limit: float) -> dict:
    """Child side: reads every listed file whole, in list order, with preads of read_size into one
    reused buffer. Stops after time_limit seconds (0: never)."""
    paths = list_file.read_text().splitlines()
    buf = bytearray(read_size)
    view = memoryview(buf)
    total = files = 0
    start = time.monotonic()
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            offset = 0
            while n := os.preadv(fd, [view], offset):
                offset += n
        finally:
            os.close(fd)
        total += offset
        files += 1
        if time_limit and time.monotonic() - start > time_limit:
            break
    return {"bytes": total, "files": files, "listed": len(paths),
            "seconds": time.monotonic() - start}


def measure(setting: str, list_file: Path, read_size: int, time_limit: float,
            drop: int = 3) -> dict:
    """One read pass in a fresh blkio group, after dropping the page cache (drop=1) or the page,
    dentry and inode caches (drop=3)."""
    bps, iops = SETTINGS[setting]
    benchlib.drop_caches(drop)
    with benchlib.Throttle(setting, bps, iops) as th:
        out = th.run([sys.executable, __file__, "--read-list", str(list_file),
                      "--read-size", str(read_size), "--time-limit", str(time_limit)])
        ios, io_bytes = th.read_ios()
    r = json.loads(out)
    r.update(ios=ios, io_bytes=io_bytes, mbps=r["bytes"] / r["seconds"] / 1e6)
    return r


def write_list(path: Path, files: list[Path], seed: int) -> Path:
    files = sorted(str(f) for f in files)
    random.Random(seed).shuffle(files)
    path.write_text("\n".join(files) + "\n")
    return path


def main() -> int:
    p = benchlib.argument_parser(__doc__)
    p.add_argument("--sizes", default="1,4,16,64,256", help="chunk sizes in MiB")
    p.add_argument("--settings", default="hdd,nfs,none")
    p.add_argument("--read-size", type=int, default=4 << 20)
    p.add_argument("--peer-seconds", type=float, default=45.0,
                   help="time cap of a per-file read pass")
    p.add_argument("--pack-reps", type=int, default=3,
                   help="pack every size this often, sizes interleaved; median time reported")
    p.add_argument("--keep", action="store_true", help="keep the packed datasets")
    # Child mode (internal): one read pass.
    p.add_argument("--read-list", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--time-limit", type=float, default=0.0, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.read_list:
        print(json.dumps(read_pass(a.read_list, a.read_size, a.time_limit)))
        return 0
    if os.geteuid() != 0:
        sys.exit("needs root (drop_caches, blkio cgroups)")
    # SIGTERM unwinds like Ctrl-C, so blkio groups are removed on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    stoker = benchlib.stoker_binary(a.build_dir)
    src, data = benchlib.sample_data(a.images, a.classes, a.seed)
    sizes = [int(s) for s in a.sizes.split(",")]
    settings = a.settings.split(",")
    work = benchlib.CACHE / "sweep"
    work.mkdir(parents=True, exist_ok=True)

    seq = work / "seq.bin"
    if not seq.is_file() or seq.stat().st_size != 1 << 30:
        log("writing the 1 GiB sequential-baseline file")
        with open(seq.with_suffix(".tmp"), "wb") as f:
            for _ in range(256):
                f.write(os.urandom(4 << 20))
        seq.with_suffix(".tmp").rename(seq)

    # Pack: sizes interleaved, repeated, so a busy phase of the shared machine hits all sizes.
    times: dict[int, list[float]] = {size: [] for size in sizes}
    packs = {}
    for rep in range(a.pack_reps):
        for size in sizes if rep % 2 == 0 else reversed(sizes):
            dest = work / f"c{size}MiB"
            benchlib.rmtree(dest)
            benchlib.warm_tree(src)
            os.sync()
            t = time.monotonic()
            out = subprocess.run([str(stoker), "pack", str(src), str(dest), "--chunk-size",
                                  f"{size}MiB", "--json"], check=True, capture_output=True,
                                 text=True)
            times[size].append(time.monotonic() - t)
            log(f"pack {size} MiB: {times[size][-1]:.1f} s")
            if rep == a.pack_reps - 1:
                chunks = sorted((dest / "chunks").iterdir())
                packs[size] = {"files": json.loads(out.stdout)["files"], "chunks": len(chunks),
                               "bytes": sum(c.stat().st_size for c in chunks),
                               "list": write_list(work / f"c{size}MiB.list", chunks, a.seed)}
    for size in sizes:
        packs[size].update(seconds=benchlib.median(times[size]), runs=times[size])
    jpegs = sorted(src.rglob("*.JPEG"))
    peer_list = write_list(work / "files.list", jpegs, a.seed)
    seq_list = work / "seq.list"
    seq_list.write_text(f"{seq}\n")

    # Read passes. Each data set is first read once unthrottled and uncounted: the host's cache
    # of the virtual disk decides how fast "cold" reads are, and data not read for a while
    # (or never) comes from the host's own disk at ~120 MB/s. Priming makes every setting start
    # from the same host-cache state; the throttles then set the speed.
    reads: dict[str, dict] = {setting: {} for setting in settings}
    passes = [("seq", seq_list, 0.0, 3)] + [(f"{size}", packs[size]["list"], 0.0, 3)
                                              for size in sizes]
    passes += [("files", peer_list, a.peer_seconds, 3),
               ("files_meta_cached", peer_list, a.peer_seconds, 1)]
    for key, list_file, limit, drop in passes:
        if key != "files_meta_cached":
            prime = measure("none", list_file, a.read_size, 0)
            log(f"[prime] {key}: {prime['mbps']:.0f} MB/s (not counted)")
        for setting in settings:
            r = measure(setting, list_file, a.read_size, limit, drop)
            reads[setting][key] = r
            log(f"[{setting}] {key}: {r['files']} files, {r['mbps']:.1f} MB/s, "
                f"{r['seconds']:.1f} s, {r['ios']} IOs")
    if not a.keep:
        for size in sizes:
            benchlib.rmtree(work / f"c{size}MiB")

    for v in packs.values():
        v["list"] = str(v["list"])
    result = {"machine": benchlib.machine(), "command": " ".join(sys.argv), "data": data,
              "settings": {k: SETTINGS[k] for k in settings}, "read_size": a.read_size,
              "packs": packs, "reads": reads}
    benchlib.save("chunk_sweep", result)
    print_tables(data, sizes, settings, packs, reads, a.read_size)
    return 0


def print_tables(data, sizes, settings, packs, reads, read_size) -> None:
    print(f"\nData: {benchlib.data_line(data)}\n")
    print("| chunk size | chunks | files/chunk | pack s (median) | pack runs (s) | pack MB/s "
          "| pack time / 64 MiB's |"
          + "".join(f" window W={w} |" for w in WINDOWS))
    print("|---|---|---|---|---|---|---|" + "---|" * len(WINDOWS))
    for size in sizes:
        pk = packs[size]
        print(f"| {size} MiB | {pk['chunks']} | {pk['files'] / pk['chunks']:.0f} | "
              f"{pk['seconds']:.1f} | {', '.join(f'{x:.1f}' for x in pk['runs'])} | "
              f"{data['total_bytes'] / pk['seconds'] / 1e6:.0f} | "
              f"{pk['seconds'] / packs.get(64, pk)['seconds']:.2f}x |"
              + "".join(f" {w * size} MiB, {w * pk['files'] / pk['chunks']:,.0f} samples |"
                        for w in WINDOWS))
    for setting in settings:
        bps, iops = SETTINGS[setting]
        seq = reads[setting]["seq"]
        cap = f"{bps / 1e6:.0f} MB/s, {iops} IOPS" if bps else "unthrottled"
        print(f"\n**{setting}** ({cap}); sequential 1 GiB with {read_size >> 20} MiB preads: "
              f"{seq['mbps']:.0f} MB/s\n")
        print("| read pattern | MB/s | files/s | time for all | of sequential | disk IOs | "
              "mean IO KiB | seek-charged model |")
        print("|---|---|---|---|---|---|---|---|")
        for size in sizes:
            r = reads[setting][f"{size}"]
            model = additive_model(bps, iops, r["bytes"], packs[size]["chunks"])
            print(f"| chunks {size} MiB, shuffled | {r['mbps']:.0f} | "
                  f"{packs[size]['files'] / r['seconds']:,.0f} | {r['seconds']:.1f} s | "
                  f"{r['mbps'] / seq['mbps']:.0%} | {r['ios']} | "
                  f"{r['io_bytes'] / max(r['ios'], 1) / 1024:.0f} | {model} |")
        for key, label in [("files", "files, random order (ImageFolder), all caches dropped"),
                           ("files_meta_cached", "files, random order, dentries+inodes cached")]:
            r = reads[setting][key]
            full = r["seconds"] * r["listed"] / r["files"]
            model = additive_model(bps, iops, r["bytes"], r["files"])
            print(f"| {label} | {r['mbps']:.1f} | "
                  f"{r['files'] / r['seconds']:,.0f} | {full:.0f} s"
                  f"{'' if r['files'] == r['listed'] else ' (extrapolated)'} | "
                  f"{r['mbps'] / seq['mbps']:.1%} | {r['ios']} | "
                  f"{r['io_bytes'] / max(r['ios'], 1) / 1024:.0f} | {model} |")


def additive_model(bps: int, iops: int, nbytes: int, accesses: int) -> str:
    """Fraction of bandwidth on a disk where every random access costs one IO time (1/IOPS: a
    seek) plus its transfer time; blkio throttling instead charges max(IOs/IOPS, bytes/bps)."""
    if not bps:
        return "-"
    transfer = nbytes / bps
    return f"{transfer / (transfer + accesses / iops):.0%}"


if __name__ == "__main__":
    sys.exit(main())
