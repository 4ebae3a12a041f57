#!/usr/bin/env python3
"""Metadata at scale against two peers, in one run per size (docs/benchmarks.md §14.8, issue 13).

    python3 bench/run_metadata_peers.py [--files 1000000,10000000] [--append 10000]
        [--fs-files N,...] [--steps stoker,tar,fs] [--arithmetic 100000000,1000000000]
        [--dir /var/tmp] [--build build] [--out results.json]

For each N (same synthetic ImageNet-shaped paths as bench/synthetic_metadata.h:
"train/nXXXXXXXX/nXXXXXXXX_<i>.JPEG" over 1000 classes, in the same mixed storage order):

  stoker   build/bench/metadata_scale --files=N --format1=0 (segment bytes, open and lookup
           reads, lookup time) and build/bench/compaction_scale --files=N --appends=1
           --append-files=A (bytes an append of A files writes). Synthetic metadata, no chunks.
  tar      a real ustar archive of N members (16-byte payloads: 512 B header + 512 B data block
           each), the index built by scanning its headers, kept two ways: a sorted text file
           "path\\toffset\\tsize\\n" (loaded whole, bisect), and an SQLite table (path primary
           key, WITHOUT ROWID; a B-tree read by pages). Measured: index bytes, scan and build
           time, open (load) time and RSS, lookup time, bytes one cold lookup reads (the text
           index: all of it; SQLite: the pages its reads touch, /proc/self/io rchar), and an
           append of A members (tar bytes written; index bytes rewritten or written).
  fs       N empty files in 1000 class directories on the local file system (files created in
           the tar's order, as an extraction would): create rate, inode + directory bytes, cold
           stat (after dropping caches; bytes read from the disk, /proc/diskstats), warm stat,
           and a cold and a warm listing of one class directory. --fs-files caps N for this
           step (the file system has a fixed number of inodes). Needs root to drop caches.

For each --arithmetic N, the tar and text-index bytes are computed, not written (exact: the
measured sizes are checked against the same formula). Everything written is removed at the
end. Prints one JSON object per N (--out saves them all).
"""
from __future__ import annotations

import argparse
import bisect
import heapq
import json
import math
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402

CLASSES = 1000
PAYLOAD = 16  # bytes per tar member: the metadata path is what is measured
BLOCK = 512


# ---------------------------------------------------------------- synthetic entries


def path_of(i: int) -> str:
    """File i's path, as synthetic_metadata.h's PathOf."""
    c = 1440764 + (i % CLASSES) * 17
    return f"train/n{c:08d}/n{c:08d}_{i}.JPEG"


def storage_order(n: int):
    """The k-th file stored is file (a·k + 12345) mod n, as synthetic_metadata.h's Order."""
    a = (0x9E3779B97F4A7C15 % n) | 1
    while math.gcd(a, n) != 1:
        a += 2
    a %= n
    return lambda k: (a * k + 12345) % n


def payload_of(i: int) -> bytes:
    return i.to_bytes(PAYLOAD, "little")


# ---------------------------------------------------------------- measuring helpers


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def io_counter(field: str) -> int:
    """rchar/wchar of this process: bytes through read/write system calls, cached or not."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def disk_sectors_read(dir_: Path) -> int:
    """Sectors (512 B) read so far from the disk holding dir_ (/proc/diskstats; whole disk,
    all processes: other work on the machine adds to it)."""
    dev = os.stat(dir_).st_dev
    major, minor = os.major(dev), os.minor(dev)
    for line in Path("/proc/diskstats").read_text().splitlines():
        f = line.split()
        if int(f[0]) == major and int(f[1]) == minor:
            return int(f[5])
    return 0


def run_json(argv: list[str]) -> dict:
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


# ---------------------------------------------------------------- stoker (format 2)


def measure_stoker(build: Path, n: int, append: int, dir_: Path) -> dict:
    start = time.monotonic()
    scale = run_json([str(build / "bench/metadata_scale"), f"--files={n}", "--format1=0",
                      f"--dir={dir_}"])["format2"]
    scale_s = time.monotonic() - start
    comp = run_json([str(build / "bench/compaction_scale"), f"--files={n}", "--appends=1",
                     f"--append-files={append}", f"--dir={dir_}"])
    return {"bytes": scale["bytes"], "bytes_per_file": scale["bytes"] / n,
            "build_s": scale["build_s"], "build_peak_rss_bytes": scale["build_peak_rss_bytes"],
            "run_s": scale_s, "open_s": scale["open_s"], "open_read_bytes": scale["open_read_bytes"],
            "lookup_read_bytes": scale["lookup_read_bytes"],
            "stat_read_bytes": scale["open_read_bytes"] + scale["lookup_read_bytes"],
            "lookup_us": scale["lookup_us"],
            "cold_path_lookup_read_bytes_2_segments": comp["before"]["cold_path_lookup_read_bytes"],
            "append_bytes": comp["append"]["bytes"]}


# ---------------------------------------------------------------- tar + an index


def header_template() -> tuple[bytearray, int]:
    """A ustar header for a PAYLOAD-byte regular file with an empty name, and the checksum of
    everything but the name (the checksum field counted as spaces)."""
    h = bytearray(BLOCK)
    h[100:108] = b"0000644\0"
    h[108:116] = b"0000000\0"
    h[116:124] = b"0000000\0"
    h[124:136] = b"%011o\0" % PAYLOAD
    h[136:148] = b"%011o\0" % 1700000000
    h[148:156] = b" " * 8
    h[156:157] = b"0"
    h[257:263] = b"ustar\0"
    h[263:265] = b"00"
    h[265:269] = b"root"
    h[297:301] = b"root"
    return h, sum(h)


def write_members(out, first: int, count: int, order) -> None:
    """Writes members for files first + order(k), k < count (name, 16-byte payload)."""
    template, base_sum = header_template()
    pad = bytes(BLOCK - PAYLOAD)
    for k in range(count):
        i = first + order(k)
        name = path_of(i).encode()
        h = bytearray(template)
        h[0:len(name)] = name
        h[148:156] = b"%06o\0 " % (base_sum + sum(name))
        out.write(h)
        out.write(payload_of(i))
        out.write(pad)


def close_archive(out) -> None:
    """The end-of-archive marker (two zero blocks), padded to 10240-byte records as tar does."""
    out.write(bytes(2 * BLOCK))
    out.write(bytes(-out.tell() % 10240))


def count_digits(lo: int, step: int, n: int) -> int:
    """Sum of len(str(lo + step * k)) for 0 <= k < n, by ranges of equal length."""
    total, d = 0, 1
    while True:
        below = max(0, min(n, -(-(10**d - lo) // step)))  # k with lo + step·k < 10^d
        done = max(0, min(n, -(-(10**(d - 1) - lo) // step))) if d > 1 else 0
        total += d * (below - done)
        if below >= n:
            return total
        d += 1


def text_index_bytes(n: int) -> int:
    """The sorted text index's exact size for n members, without writing anything: a line is
    the path (31 bytes + the file number's digits), a tab, the data offset of the k-th member
    (1024·k + 512), a tab, "16" and a newline."""
    return 31 * n + count_digits(0, 1, n) + count_digits(BLOCK, 2 * BLOCK, n) + 5 * n


def write_tar(path: Path, n: int) -> int:
    """Writes the archive; returns the offset of its end-of-archive marker."""
    with open(path, "wb", buffering=8 << 20) as out:
        write_members(out, 0, n, storage_order(n))
        end = out.tell()
        close_archive(out)
    return end


def scan_tar(path: Path, start: int = 0) -> tuple[list[bytes], int]:
    """Reads the archive's headers in order from `start` (a member's header; what an indexer
    does); returns one index line "path\\toffset\\tsize" per member (offset of its data) and
    the end-of-archive offset."""
    lines: list[bytes] = []
    pos = start  # archive offset of buf[0]
    buf = b""
    p = 0
    with open(path, "rb", buffering=0) as f:
        f.seek(start)
        while True:
            if p + BLOCK > len(buf):
                more = f.read(16 << 20)
                if not more:
                    raise ValueError("archive ends without an end-of-archive marker")
                pos += p
                buf = buf[p:] + more
                p = 0
            h = buf[p:p + BLOCK]
            if h[0] == 0:
                return lines, pos + p
            name = h[0:100].split(b"\0", 1)[0]
            size = int(h[124:136].strip(b" \0"), 8)
            lines.append(b"%s\t%d\t%d" % (name, pos + p + BLOCK, size))
            p += BLOCK + -(-size // BLOCK) * BLOCK


def load_text_index(path: Path) -> list[bytes]:
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    lines.pop()  # after the final newline
    return lines


def find_text(lines: list[bytes], name: bytes) -> tuple[int, int] | None:
    key = name + b"\t"
    j = bisect.bisect_left(lines, key)
    if j == len(lines) or not lines[j].startswith(key):
        return None
    offset, size = lines[j][len(key):].split(b"\t")
    return int(offset), int(size)


def write_text_index(path: Path, lines) -> int:
    with open(path, "wb", buffering=8 << 20) as f:
        for line in lines:
            f.write(line)
            f.write(b"\n")
        return f.tell()


def rows_of(lines):
    for line in lines:
        name, offset, size = line.split(b"\t")
        yield name.decode(), int(offset), int(size)


def build_sqlite(path: Path, lines: list[bytes]) -> None:
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=OFF")
    db.execute("PRAGMA synchronous=OFF")
    db.execute("CREATE TABLE files (path TEXT PRIMARY KEY, offset INTEGER, size INTEGER) "
               "WITHOUT ROWID")
    db.executemany("INSERT INTO files VALUES (?, ?, ?)", rows_of(lines))
    db.commit()
    db.close()


def sqlite_cold_lookup_bytes(path: Path, names: list[str]) -> int:
    """Median bytes a fresh connection reads to answer one lookup (its header, schema and the
    B-tree pages on the way: what a range-reading remote client would move)."""
    out = []
    for name in names:
        before = io_counter("rchar")
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        row = db.execute("SELECT offset, size FROM files WHERE path = ?", (name,)).fetchone()
        db.close()
        out.append(io_counter("rchar") - before)
        assert row is not None
    return int(statistics.median(out))


def measure_tar(n: int, append: int, dir_: Path, lookups: int, drop: bool) -> dict:
    r: dict = {}
    rng = random.Random(42)
    probe = [rng.randrange(n) for _ in range(lookups)]
    with tempfile.TemporaryDirectory(prefix="peers-tar-", dir=dir_) as tmp:
        work = Path(tmp)
        tar, text, db = work / "data.tar", work / "data.idx", work / "data.sqlite"
        start = time.monotonic()
        end = write_tar(tar, n)
        r["write_s"] = time.monotonic() - start
        r["tar_bytes"] = tar.stat().st_size
        r["header_bytes_per_file"] = BLOCK
        with tarfile.open(tar) as t:  # the archive is one tar reads
            first = t.next()
            assert first is not None and first.name == path_of(storage_order(n)(0))
            assert t.extractfile(first).read() == payload_of(storage_order(n)(0))

        if drop:
            benchlib.drop_caches()
        start = time.monotonic()
        lines, scanned_end = scan_tar(tar)
        r["scan_s"] = time.monotonic() - start
        assert scanned_end == end and len(lines) == n
        start = time.monotonic()
        lines.sort()
        r["text_index_bytes"] = write_text_index(text, lines)
        assert r["text_index_bytes"] == text_index_bytes(n)
        r["text_index_build_s"] = r["scan_s"] + time.monotonic() - start
        start = time.monotonic()
        build_sqlite(db, lines)
        r["sqlite_build_s"] = r["scan_s"] + time.monotonic() - start
        r["sqlite_bytes"] = db.stat().st_size
        del lines

        # Open: load the whole text index (cold: after dropping caches), then lookups.
        if drop:
            benchlib.drop_caches()
        rss0 = rss_bytes()
        start = time.monotonic()
        index = load_text_index(text)
        r["text_open_s"] = time.monotonic() - start
        r["text_open_rss_bytes"] = rss_bytes() - rss0
        names = [path_of(i).encode() for i in probe]
        start = time.monotonic()
        found = [find_text(index, name) for name in names]
        r["text_lookup_us"] = (time.monotonic() - start) * 1e6 / lookups
        with open(tar, "rb") as f:  # the index points at each member's bytes
            for i, (offset, size) in zip(probe[:20], found[:20]):
                f.seek(offset)
                assert f.read(size) == payload_of(i)

        if drop:
            benchlib.drop_caches()
        start = time.monotonic()
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        conn.execute("SELECT offset, size FROM files WHERE path = ?", (names[0].decode(),))
        r["sqlite_cold_open_lookup_s"] = time.monotonic() - start
        for key in ("sqlite_first_lookups_us", "sqlite_lookup_us"):  # from disk, then warm
            start = time.monotonic()
            for name, want in zip(names, found):
                got = conn.execute("SELECT offset, size FROM files WHERE path = ?",
                                   (name.decode(),)).fetchone()
                assert got == want
            r[key] = (time.monotonic() - start) * 1e6 / lookups
        conn.close()
        r["sqlite_stat_read_bytes"] = sqlite_cold_lookup_bytes(db, [path_of(i) for i in probe[:50]])

        # Append: new members after the last one (over the end-of-archive marker), then the
        # index: the text index rewritten whole, the SQLite index updated in place.
        with open(tar, "r+b", buffering=8 << 20) as out:
            out.seek(end)
            write_members(out, n, append, storage_order(append))
            new_end = out.tell()
            close_archive(out)
            r["append_tar_bytes"] = out.tell() - end
        r["append_header_bytes"] = append * BLOCK
        added, scanned_end = scan_tar(tar, end)
        assert scanned_end == new_end and len(added) == append
        added.sort()
        start = time.monotonic()
        r["append_text_index_bytes"] = write_text_index(work / "data.idx.new",
                                                         heapq.merge(index, added))
        os.replace(work / "data.idx.new", text)
        r["append_text_index_s"] = time.monotonic() - start
        del index
        conn = sqlite3.connect(db)
        before_w, before_size = io_counter("wchar"), db.stat().st_size
        start = time.monotonic()
        with conn:
            conn.executemany("INSERT INTO files VALUES (?, ?, ?)", rows_of(added))
        r["append_sqlite_s"] = time.monotonic() - start
        r["append_sqlite_written_bytes"] = io_counter("wchar") - before_w
        r["append_sqlite_growth_bytes"] = db.stat().st_size - before_size
        conn.close()
    return r


# ---------------------------------------------------------------- the file system's own stat


def dir_bytes(root: Path) -> int:
    total = 0
    for d, _, _ in os.walk(root):
        total += os.stat(d).st_blocks * 512
    return total


def cold_stat(paths: list[str], dir_: Path, drop: bool) -> tuple[float, int]:
    """Median seconds and disk bytes of one stat after dropping every cache."""
    times, reads = [], []
    for p in paths:
        if drop:
            benchlib.drop_caches()
        sectors = disk_sectors_read(dir_)
        start = time.monotonic()
        os.stat(p)
        times.append(time.monotonic() - start)
        reads.append((disk_sectors_read(dir_) - sectors) * 512)
    return statistics.median(times), int(statistics.median(reads))


def measure_fs(n: int, dir_: Path, lookups: int, cold_repeats: int, drop: bool) -> dict:
    r: dict = {"files": n}
    rng = random.Random(43)
    root = Path(tempfile.mkdtemp(prefix="peers-fs-", dir=dir_))
    try:
        tree = root / "train"
        for c in range(CLASSES):
            d = 1440764 + c * 17
            (tree / f"n{d:08d}").mkdir(parents=True)
        order = storage_order(n)
        prefix = str(root) + "/"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
        start = time.monotonic()
        for k in range(n):
            os.close(os.open(prefix + path_of(order(k)), flags, 0o644))
        r["create_s"] = time.monotonic() - start
        start = time.monotonic()
        os.sync()
        r["sync_s"] = time.monotonic() - start
        r["dir_bytes"] = dir_bytes(root)
        st = os.statvfs(root)
        r["inode_bytes"] = 256  # mke2fs.conf default; tune2fs cannot open the disk in this VM
        r["fs_total_inodes"] = st.f_files

        probe = [prefix + path_of(rng.randrange(n)) for _ in range(lookups)]
        r["cold_stat_s"], r["cold_stat_disk_bytes"] = cold_stat(probe[:cold_repeats], dir_, drop)
        for p in probe:  # warm the dentries and inodes
            os.stat(p)
        start = time.monotonic()
        for p in probe:
            os.stat(p)
        r["warm_stat_us"] = (time.monotonic() - start) * 1e6 / lookups

        one = tree / f"n{1440764 + 17 * rng.randrange(CLASSES):08d}"
        if drop:
            benchlib.drop_caches()
        sectors = disk_sectors_read(dir_)
        start = time.monotonic()
        r["list_entries"] = sum(1 for _ in os.scandir(one))
        r["cold_list_s"] = time.monotonic() - start
        r["cold_list_disk_bytes"] = (disk_sectors_read(dir_) - sectors) * 512
        start = time.monotonic()
        sum(1 for _ in os.scandir(one))
        r["warm_list_s"] = time.monotonic() - start
    finally:
        start = time.monotonic()
        subprocess.run(["rm", "-rf", str(root)], check=True)
        r["remove_s"] = time.monotonic() - start
    return r


# ---------------------------------------------------------------- driver


def ints(s: str) -> list[int]:
    return [int(float(x)) for x in s.split(",") if x]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=ints, default=[1_000_000, 10_000_000])
    ap.add_argument("--fs-files", type=ints, default=None,
                    help="files for the file-system step, one per --files (default: the same; 0 skips it)")
    ap.add_argument("--append", type=int, default=10_000)
    ap.add_argument("--lookups", type=int, default=2000)
    ap.add_argument("--cold-repeats", type=int, default=5)
    ap.add_argument("--steps", default="stoker,tar,fs")
    ap.add_argument("--dir", type=Path, default=Path("/var/tmp"))
    ap.add_argument("--build", type=Path, default=benchlib.REPO / "build")
    ap.add_argument("--arithmetic", type=ints, default=[100_000_000, 1_000_000_000],
                    help="sizes for which tar and text-index bytes are only computed")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    drop = os.geteuid() == 0
    if not drop:
        benchlib.log("not root: caches are not dropped, so 'cold' numbers are warm")
    steps = a.steps.split(",")
    fs_files = a.fs_files or a.files
    results = []
    for n, fs_n in zip(a.files, fs_files):
        r: dict = {"files": n, "append": a.append, "synthetic": True,
                   "loadavg_start": os.getloadavg()}
        if "stoker" in steps:
            benchlib.log(f"{n}: stoker")
            r["stoker"] = measure_stoker(a.build, n, a.append, a.dir)
        if "tar" in steps:
            benchlib.log(f"{n}: tar + index")
            r["tar"] = measure_tar(n, a.append, a.dir, a.lookups, drop)
        if "fs" in steps and fs_n > 0:
            benchlib.log(f"{fs_n}: file system")
            r["fs"] = measure_fs(fs_n, a.dir, a.lookups, a.cold_repeats, drop)
        r["loadavg_end"] = os.getloadavg()
        print(json.dumps(r), flush=True)
        results.append(r)
    for n in a.arithmetic:  # bytes only: checked against the measured sizes above
        r = {"files": n, "arithmetic": True, "tar": {
            "header_bytes_per_file": BLOCK, "text_index_bytes": text_index_bytes(n),
            "append_text_index_bytes": text_index_bytes(n + a.append),
            "append_tar_bytes": -(-(n + a.append + 1) * 2 * BLOCK // 10240) * 10240 - n * 2 * BLOCK}}
        print(json.dumps(r), flush=True)
        results.append(r)
    if a.out:
        a.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
