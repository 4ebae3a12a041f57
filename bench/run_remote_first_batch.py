#!/usr/bin/env python3
"""Remote open and first batch for one rank of 64 over stoker:// (docs/benchmarks.md §14.7).

    .venv/bin/python bench/run_remote_first_batch.py [--samples 100000,1000000] [--world-size 64]
        [--input tar|tree] [--chunk-size SIZE]

For each size: synthetic tiny samples (the metadata path is what is measured) packed by one
`stoker pack`: with --input tar (bench/run_append.py's make_tar: `key.cls` + a 16-byte `key.bin`
per sample, one tar, so the samples are groups of files), or --input tree (an ImageFolder tree of
16-byte files in 1000 class directories, packed with --chunk-size 16KiB: about 600 files per
chunk, as 64 MiB chunks of ImageNet hold; --chunk-size sets pack's for either input), exported by `stoker serve` on loopback with
--metrics-port. Each step runs in a fresh process (under /usr/bin/time) and is charged the
answer bytes the server sent meanwhile (`stoker_serve_answer_bytes_total`, all types):
  stat    `stoker stat stoker://…/ds <one path>`
  open    stoker.Dataset(uri)
  loader  stoker.Loader(uri, rank=0, world_size=64, batch_size=256, shuffle="chunk", seed=0),
          then next(iter(loader)); the bytes of the next() are split into chunk data (the
          loader's stats()["bytes_read"]) and metadata (the rest)
  full    the same with shuffle="full", whose rank reads from every chunk and so reads every
          file's location, as every loader did before rank plans were built from their own
          chunks (docs/sampler.md, "What a rank reads"): the reference in the same run
Bytes are reported against the dataset's metadata (segments/) and its total size (chunks/,
segments/, versions/); the sizes of the segments' location sections (kinds 2 and 3) and samples
section (kind 11, docs/format.md §3.1) are read from their footers.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import stoker
from benchlib import REPO, du_bytes, machine, save
from run_append import make_tar, timed

HERE = Path(__file__).resolve().parent


def answer_bytes(metrics_url: str) -> int:
    """Answer payload bytes the server has sent so far, all request types together."""
    text = urllib.request.urlopen(metrics_url).read().decode()
    return sum(int(m) for m in re.findall(r'^stoker_serve_answer_bytes_total\{[^}]*\} (\d+)$',
                                          text, re.M))


def section_bytes(segments: Path, kinds: tuple[int, ...]) -> int:
    """Bytes of the sections of these kinds (docs/format.md §3.1) over every segment."""
    total = 0
    for seg in segments.iterdir():
        data = seg.read_bytes()
        footer, _ = struct.unpack_from("<QQ", data, len(data) - 32)
        (count,) = struct.unpack_from("<I", data, footer + 80)
        for i in range(count):
            kind, _, _, size, _ = struct.unpack_from("<IIQQQ", data, footer + 88 + 32 * i)
            total += size if kind in kinds else 0
    return total


def client(step: str, uri: str, metrics_url: str, world_size: str, batch_size: str) -> None:
    """One step in this (fresh) process; prints seconds and answer bytes as one JSON line."""
    before, t = answer_bytes(metrics_url), time.perf_counter()
    if step == "open":
        stoker.Dataset(uri)
        print(json.dumps({"s": time.perf_counter() - t,
                          "bytes": answer_bytes(metrics_url) - before}))
        return
    loader = stoker.Loader(uri, rank=0, world_size=int(world_size), batch_size=int(batch_size),
                           shuffle="full" if step == "full" else "chunk", seed=0)
    built, t_built = answer_bytes(metrics_url), time.perf_counter()
    batch = next(iter(loader))
    first, t_first = answer_bytes(metrics_url), time.perf_counter()
    chunk_bytes = loader.stats()["bytes_read"]
    print(json.dumps({"init_s": t_built - t, "init_bytes": built - before,
                      "batch_s": t_first - t_built, "batch_samples": len(batch),
                      "batch_chunk_bytes": chunk_bytes,
                      "batch_metadata_bytes": first - built - chunk_bytes}))


def tree_path(i: int) -> str:
    return f"c{i % 1000:03d}/s{i:09d}.bin"


def make_tree(root: Path, samples: int) -> None:
    """An ImageFolder tree of `samples` 16-byte files in 1000 class directories."""
    for c in range(min(1000, samples)):
        (root / f"c{c:03d}").mkdir(parents=True)
    for i in range(samples):
        with open(root / tree_path(i), "wb") as f:
            f.write(i.to_bytes(16, "little"))


def measure(a: argparse.Namespace, work: Path, samples: int) -> dict:
    ds = work / "ds"
    chunk_size = ["--chunk-size", a.chunk_size] if a.chunk_size else []
    if a.input == "tar":
        make_tar(work / "data.tar", 0, samples)
        packed, _, _ = timed([a.stoker, "pack", "-q", "--json", *chunk_size,
                              str(work / "data.tar"), str(ds)])
        (work / "data.tar").unlink()
        stat_path = f"s{samples // 2:09d}.bin"
    else:
        make_tree(work / "tree", samples)
        packed, _, _ = timed([a.stoker, "pack", "-q", "--json", *(chunk_size or ["--chunk-size", "16KiB"]),
                              str(work / "tree"), str(ds)])
        subprocess.run(["rm", "-rf", str(work / "tree")], check=True)
        stat_path = tree_path(samples // 2)
    sizes = {d: du_bytes(ds / d) for d in ("chunks", "segments", "versions")}
    row = {"samples": samples, "files": packed["files"], "chunks": packed["chunks"],
           "total_bytes": sum(sizes.values()), "metadata_bytes": sizes["segments"],
           "location_bytes": section_bytes(ds / "segments", (2, 3)),
           "samples_section_bytes": section_bytes(ds / "segments", (11,))}

    secret = work / "secret"
    secret.write_text(os.urandom(24).hex() + "\n")
    secret.chmod(0o600)
    os.environ.pop("STOKER_NODE", None)  # every byte from the server, none from a node cache
    os.environ.update(STOKER_SECRET_FILE=str(secret), PYTHONPATH=str(HERE))
    log = work / "serve.log"
    with open(log, "w") as stderr:  # where the server says which ports it took
        server = subprocess.Popen([a.stoker, "serve", "--listen", "127.0.0.1:0", "--dataset",
                                   f"ds={ds}", "--secret-file", str(secret), "--metrics-port",
                                   "0"], stderr=stderr)
    try:
        while not (ports := re.search(r"on 127\.0\.0\.1:(\d+), metrics on port (\d+)",
                                      log.read_text())):
            if server.poll() is not None:
                sys.exit(f"stoker serve exited: {log.read_text()}")
            time.sleep(0.05)
        port, metrics_port = ports.groups()
        uri, metrics = f"stoker://127.0.0.1:{port}/ds", f"http://127.0.0.1:{metrics_port}/metrics"

        before = answer_bytes(metrics)
        _, row["stat_s"], row["stat_rss"] = timed([a.stoker, "stat", uri, stat_path])
        row["stat_bytes"] = answer_bytes(metrics) - before
        for step in ("open", "loader", "full"):
            result, _, row[f"{step}_rss"] = timed(
                [sys.executable, "-c", "import sys, run_remote_first_batch as r; "
                 "r.client(*sys.argv[1:])", step, uri, metrics, str(a.world_size),
                 str(a.batch_size)])
            row.update({f"{step}_{key}": value for key, value in result.items()})
    finally:
        server.terminate()
        server.wait()
    return row


def share(n: int, row: dict) -> str:
    return (f"{n:,} B ({100 * n / row['metadata_bytes']:.2f} % / "
            f"{100 * n / row['total_bytes']:.2f} %)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", default="100000,1000000", help="comma-separated sizes")
    ap.add_argument("--world-size", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--input", choices=("tar", "tree"), default="tar")
    ap.add_argument("--chunk-size", default=None,
                    help="pack's --chunk-size (default: 16KiB for a tree, pack's own for a tar)")
    ap.add_argument("--stoker", default=str(REPO / "build" / "tools" / "stoker"))
    a = ap.parse_args()
    rows = []
    for samples in map(int, a.samples.split(",")):
        with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
            rows.append(measure(a, Path(tmp), samples))

    lines = [
        ("files / chunks", lambda r: f"{r['files']:,} / {r['chunks']:,}"),
        ("dataset total B (chunks/ segments/ versions/)", lambda r: f"{r['total_bytes']:,}"),
        ("metadata B (segments/)", lambda r: f"{r['metadata_bytes']:,}"),
        ("of which locations (sections 2+3)", lambda r: f"{r['location_bytes']:,}"),
        ("of which samples section (11)", lambda r: f"{r['samples_section_bytes']:,}"),
        ("(a) `stoker stat` of one path", lambda r: share(r["stat_bytes"], r)),
        ("(b) `stoker.Dataset(uri)`", lambda r: share(r["open_bytes"], r)),
        ("(c) `stoker.Loader(...)`", lambda r: share(r["loader_init_bytes"], r)),
        ("(c) first batch: metadata",
         lambda r: share(r["loader_batch_metadata_bytes"], r)),
        ("(c) first batch: chunk data",
         lambda r: f"{r['loader_batch_chunk_bytes']:,} B ({r['loader_batch_samples']} samples)"),
        ("one rank's metadata, open to first batch",
         lambda r: share(r["loader_init_bytes"] + r["loader_batch_metadata_bytes"], r)),
        ("the same with shuffle=\"full\" (every location)",
         lambda r: share(r["full_init_bytes"] + r["full_batch_metadata_bytes"], r)),
        ("ratio full / chunk",
         lambda r: f"{(r['full_init_bytes'] + r['full_batch_metadata_bytes']) / (r['loader_init_bytes'] + r['loader_batch_metadata_bytes']):.1f}x"),
        ("seconds: stat (process) / open / Loader() / first batch",
         lambda r: f"{r['stat_s']:.2f} / {r['open_s']:.2f} / {r['loader_init_s']:.2f} / "
                   f"{r['loader_batch_s']:.2f}"),
        ("client peak RSS MiB: stat / open / loader / full",
         lambda r: f"{r['stat_rss'] / 2**20:.0f} / {r['open_rss'] / 2**20:.0f} / "
                   f"{r['loader_rss'] / 2**20:.0f} / {r['full_rss'] / 2**20:.0f}"),
    ]
    print(f"--input {a.input}: rank 0 of {a.world_size}, batch {a.batch_size}; "
          "bytes the server sent (% of the metadata / % of the dataset)\n")
    print("| | " + " | ".join(f"{r['samples']:,} samples" for r in rows) + " |")
    print("|---|" + "---|" * len(rows))
    for label, cell in lines:
        print(f"| {label} | " + " | ".join(cell(r) for r in rows) + " |", flush=True)
    save(f"remote_first_batch_{a.input}", {"machine": machine(), "world_size": a.world_size,
                                "batch_size": a.batch_size, "rows": rows})


if __name__ == "__main__":
    main()
