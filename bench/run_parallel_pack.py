#!/usr/bin/env python3
"""A distributed pack with N = 1, 2, 4 writers (`pack --part K/N`, then `commit`), compared with
one plain `stoker pack` of the same shards (docs/benchmarks.md §14.6).

    .venv/bin/python bench/run_parallel_pack.py [--samples 400000] [--shards 8] [--writers 1,2,4]

Synthetic WebDataset shards of tiny samples (bench/run_append.py's make_tar: the metadata path is
what is measured). For each N, N writers run at once, writer K packing its contiguous share of
the shards into parts/jN/ of a fresh dataset; then `stoker commit --job jN` publishes them as one
version. Reported: wall seconds of the parts phase (with the CPU seconds of all its writers
together) and of the commit, peak RSS of each writer and of the commit (/usr/bin/time), bytes on
disk (parts/ before the commit; chunks/, segments/, versions/ after), and whether the result
equals the plain pack: the same path and label at every file index, the same samples and
classes (checked through stoker.Dataset).
"""
from __future__ import annotations

import argparse
import hashlib
import resource
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import stoker
from benchlib import REPO, du_bytes, machine, save
from run_append import make_tar, timed


def fingerprint(ds_path: Path) -> str:
    """A hash of what a reader sees: every file's index, path and label, samples and classes."""
    ds = stoker.Dataset(str(ds_path))
    h = hashlib.sha256(f"{ds.num_samples}\n{ds.classes}\n".encode())
    for i in range(ds.num_files):
        st = ds.stat(i)
        h.update(f"{i}\t{st['path']}\t{st['label']}\n".encode())
    return h.hexdigest()


def cpu_seconds() -> float:
    """User + system CPU seconds of all the child processes waited for so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def sizes(ds: Path) -> dict:
    """Bytes under each of the dataset's directories, and how many segment files it holds."""
    out = {d: du_bytes(ds / d) for d in ("chunks", "segments", "versions", "parts")
           if (ds / d).is_dir()}
    out["segment_files"] = len(list((ds / "segments").glob("*"))) if "segments" in out else 0
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=400_000)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--writers", default="1,2,4")
    ap.add_argument("--stoker", default=str(REPO / "build" / "tools" / "stoker"))
    a = ap.parse_args()
    per_shard = a.samples // a.shards
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        work = Path(tmp)
        shards = [work / f"shard-{k:02d}.tar" for k in range(a.shards)]
        for k, shard in enumerate(shards):
            make_tar(shard, k * per_shard, per_shard)

        plain = work / "plain"
        cpu = cpu_seconds()
        out, seconds, rss = timed([a.stoker, "pack", "-q", "--json", *map(str, shards), str(plain)])
        reference = fingerprint(plain)
        rows = [{"writers": "plain pack", "files": out["files"], "parts_s": seconds,
                 "parts_cpu_s": cpu_seconds() - cpu,
                 "writer_rss_mib": [rss / 2**20], "sizes": sizes(plain), "equal": True}]

        for n in map(int, a.writers.split(",")):
            ds, job = work / f"ds{n}", f"j{n}"
            argvs = [[a.stoker, "pack", "-q", "--json",
                      *map(str, shards[k * a.shards // n:(k + 1) * a.shards // n]), str(ds),
                      "--part", f"{k}/{n}", "--job", job] for k in range(n)]
            start, cpu = time.monotonic(), cpu_seconds()
            with ThreadPoolExecutor(n) as pool:
                parts = list(pool.map(timed, argvs))
            parts_s, parts_cpu_s = time.monotonic() - start, cpu_seconds() - cpu
            parts_bytes = sizes(ds)
            out, commit_s, commit_rss = timed([a.stoker, "commit", str(ds), "--job", job, "--json"])
            rows.append({"writers": n, "files": out["files"], "parts_s": parts_s,
                         "parts_cpu_s": parts_cpu_s,
                         "writer_s": [s for _, s, _ in parts],
                         "writer_rss_mib": [r / 2**20 for _, _, r in parts],
                         "parts_bytes": parts_bytes.get("parts", 0), "commit_s": commit_s,
                         "commit_rss_mib": commit_rss / 2**20, "sizes": sizes(ds),
                         "equal": fingerprint(ds) == reference})

    print(f"{a.samples} samples in {a.shards} shards; {rows[0]['files']} files\n")
    print("| writers | parts phase s (CPU s) | commit s | total s | peak RSS per writer MiB |"
          " commit RSS MiB | parts/ B | chunks/ B | segments/ B (files) | versions/ B |"
          " equals plain pack |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        parted = "commit_s" in r  # the plain pack has no parts and no commit
        s = r["sizes"]
        cells = [r["writers"], f"{r['parts_s']:.2f} ({r['parts_cpu_s']:.2f})",
                 f"{r['commit_s']:.2f}" if parted else "–",
                 f"{r['parts_s'] + r.get('commit_s', 0):.2f}",
                 ", ".join(f"{m:.0f}" for m in r["writer_rss_mib"]),
                 f"{r['commit_rss_mib']:.0f}" if parted else "–",
                 f"{r['parts_bytes']:,}" if parted else "–",
                 f"{s['chunks']:,}", f"{s['segments']:,} ({s['segment_files']})",
                 f"{s['versions']:,}", "yes" if r["equal"] else "**NO**"]
        print("| " + " | ".join(map(str, cells)) + " |", flush=True)
    save("parallel_pack", {"machine": machine(), "samples": a.samples, "shards": a.shards,
                           "rows": rows})


if __name__ == "__main__":
    main()
