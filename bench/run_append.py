#!/usr/bin/env python3
"""Pack and append at scale with the real `stoker pack` (docs/benchmarks.md §14.3).

    python3 bench/run_append.py [--samples 1000000] [--append 10000] [--stoker .venv/bin/stoker]

Synthetic WebDataset shards of tiny samples (key.cls + a 16-byte key.bin: the metadata path is
what is measured, so payloads are kept tiny, as in the issue's own table), packed into a fresh
dataset, then an append of new samples. Prints peak RSS (/usr/bin/time), seconds, metadata bytes
per file, and the bytes the append wrote as a share of the existing metadata, and a lazy
`stoker stat` of one file.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path


def make_tar(path: Path, first: int, count: int) -> None:
    with tarfile.open(path, "w") as t:
        for i in range(first, first + count):
            for ext, data in (("cls", str(i % 1000).encode()), ("bin", os.urandom(16))):
                info = tarfile.TarInfo(f"s{i:09d}.{ext}")
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))


def timed(argv: list[str]) -> tuple[dict | None, float, int]:
    proc = subprocess.run(["/usr/bin/time", "-f", "%e %M", *argv], capture_output=True, text=True,
                          check=True)
    seconds, rss_kb = proc.stderr.strip().splitlines()[-1].split()
    out = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else None
    return out, float(seconds), int(rss_kb) * 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=1_000_000)
    ap.add_argument("--append", type=int, default=10_000)
    ap.add_argument("--stoker", default=shutil.which("stoker") or ".venv/bin/stoker")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        work = Path(tmp)
        make_tar(work / "base.tar", 0, a.samples)
        make_tar(work / "add.tar", a.samples, a.append)
        ds = work / "ds"
        base, base_s, base_rss = timed([a.stoker, "pack", "-q", "--json", str(work / "base.tar"),
                                        str(ds)])
        add, add_s, add_rss = timed([a.stoker, "pack", "-q", "--json", "--append",
                                     str(work / "add.tar"), str(ds)])
        _, stat_s, stat_rss = timed([a.stoker, "stat", str(ds), f"s{a.samples // 2:09d}.bin"])
        print(f"pack {a.samples} samples ({base['files']} files): {base_s:.1f} s, peak RSS "
              f"{base_rss / 2**20:.0f} MiB, metadata {base['metadata_bytes']} B "
              f"({base['metadata_bytes_per_file']:.1f} B/file)")
        print(f"append {a.append} samples: {add_s:.2f} s, peak RSS {add_rss / 2**20:.0f} MiB, "
              f"wrote a {add['segment_bytes']} B segment = "
              f"{100 * add['segment_bytes'] / base['metadata_bytes']:.2f} % of the existing metadata")
        print(f"stat of one file (lazy open): {stat_s:.2f} s, peak RSS {stat_rss / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
