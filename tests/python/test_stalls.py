"""Stall attribution (issue 17 item 1): every loader measures how much of the wall time the
consumer spent waiting for its batches (starved_fraction) and which stage was short. A consumer
that computes for 50 ms per batch on a fast dataset is not starved; one that computes nothing on
a throttled store is, and the blame lands on storage; one that reads slowly decoded images
blames decoding."""
from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import stoker

STAGES = {"storage", "cache", "decode", "queue", "feeders"}


@pytest.fixture(scope="module")
def columns_ds(tmp_path_factory):
    path = tmp_path_factory.mktemp("stalls") / "d.stoker"
    rng = np.random.default_rng(0)
    with stoker.Writer(path, columns={"x": "ndarray:uint8", "tokens": "tokens:uint16"},
                       progress=False) as w:
        for _ in range(400):
            w.write({"x": rng.integers(0, 255, 2000, dtype=np.uint8),
                     "tokens": rng.integers(0, 50000, 300, dtype=np.uint16)})
    return path


def check_shape(stats: dict) -> None:
    assert set(stats["stall_seconds"]) == STAGES
    assert all(v >= 0 for v in stats["stall_seconds"].values())
    assert abs(sum(stats["stall_seconds"].values()) - stats["waiting_seconds"]) < 1e-6
    assert 0 <= stats["starved_fraction"] <= 1


def consume(loader, compute: float, batches: int | None = None) -> dict:
    for i, _ in enumerate(loader):
        time.sleep(compute)
        if batches is not None and i + 1 == batches:
            break
    stats = loader.stats()
    check_shape(stats)
    return stats


def test_a_busy_consumer_is_not_starved(columns_ds):
    for loader in (stoker.Loader(columns_ds, batch_size=32, seed=1),
                   stoker.TokenLoader(columns_ds, seq_len=256, batch_size=16, seed=1)):
        stats = consume(loader, 0.05, batches=10)
        assert stats["starved_fraction"] < 0.2, stats
        assert stats["wall_seconds"] >= 0.45


def test_a_slow_transform_is_blamed_on_decoding(columns_ds):
    def slow(sample):
        time.sleep(0.002)
        return sample

    stats = consume(stoker.Loader(columns_ds, batch_size=32, transform=slow), 0.0, batches=6)
    assert stats["starved_fraction"] > 0.8, stats
    assert stats["stall_seconds"]["decode"] > 0.8 * stats["waiting_seconds"], stats


def test_decode_bound_images_blame_decoding(tmp_path):
    pytest.importorskip("torch")
    from PIL import Image
    rng = np.random.default_rng(2)
    path = tmp_path / "big.stoker"
    with stoker.Writer(path, columns={"image": "jpeg"}, progress=False) as w:
        for _ in range(24):
            buf = io.BytesIO()  # noise decodes slowly: ~1 MB per image
            Image.fromarray(rng.integers(0, 255, (700, 900, 3), dtype=np.uint8)).save(
                buf, "JPEG", quality=95)
            w.write({"image": buf.getvalue()})
    loader = stoker.ImageLoader(path, batch_size=4, size=64, threads=1, train=False)
    stats = consume(loader, 0.0)
    assert stats["starved_fraction"] > 0.8, stats
    assert stats["stall_seconds"]["decode"] > 0.7 * stats["waiting_seconds"], stats


def test_starvation_is_logged_with_the_stage(columns_ds, caplog):
    def slow(sample):
        time.sleep(0.001)
        return sample

    stoker.stall_report(every=0.05, threshold=0.5)
    try:
        with caplog.at_level(logging.WARNING, logger="stoker"):
            consume(stoker.Loader(columns_ds, batch_size=16, transform=slow), 0.0, batches=8)
    finally:
        stoker.stall_report()
    lines = [r.getMessage() for r in caplog.records if "step time waiting" in r.getMessage()]
    assert lines and "decoding" in lines[0] and "threads" in lines[0], lines
    with pytest.raises(ValueError):
        stoker.stall_report(every=0)
    with pytest.raises(ValueError):
        stoker.stall_report(threshold=2)


# -- a throttled store: reads capped by a blkio cgroup -------------------------------------------

BLKIO = Path("/sys/fs/cgroup/blkio")


def disk_of(path: Path) -> str:
    dev = os.stat(path).st_dev
    major, minor = os.major(dev), os.minor(dev)
    sys_dev = Path(f"/sys/dev/block/{major}:{minor}")
    if (sys_dev / "partition").exists():
        major, minor = (int(x) for x in (sys_dev.resolve().parent / "dev").read_text().split(":"))
    return f"{major}:{minor}"


@pytest.mark.system
def test_a_throttled_store_is_blamed_on_storage(tmp_path):
    if os.geteuid() != 0 or not (BLKIO / "blkio.throttle.read_bps_device").exists():
        pytest.skip("needs root and cgroup v1 blkio throttling")
    disk = disk_of(tmp_path)
    if not Path(f"/sys/dev/block/{disk}").exists():
        pytest.skip("tmp_path is not on a block device")
    path = tmp_path / "d.stoker"
    with stoker.Writer(path, columns={"x": "bytes"}, progress=False, chunk_size="1MiB") as w:
        for _ in range(160):
            w.write({"x": os.urandom(50_000)})
    # Out of the page cache, so that every read reaches the (throttled) disk.
    os.sync()
    for f in path.rglob("*"):
        if f.is_file():
            fd = os.open(f, os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)
    group = BLKIO / f"stoker-test-{os.getpid()}"
    group.mkdir()
    try:
        (group / "blkio.throttle.read_bps_device").write_text(f"{disk} {2 << 20}\n")
        script = textwrap.dedent(f"""
            import json, stoker
            loader = stoker.Loader({str(path)!r}, batch_size=16, memory_budget="4MiB",
                                   io_depth=2)
            for batch in loader:
                pass
            print(json.dumps(loader.stats()))
            """)
        procs = group / "cgroup.procs"
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                             check=True, timeout=120,
                             preexec_fn=lambda: procs.write_text(f"{os.getpid()}\n")).stdout
    finally:
        for _ in range(50):
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)
    stats = json.loads(out.strip().splitlines()[-1])
    check_shape(stats)
    assert stats["wall_seconds"] > 2, stats  # 8 MB at 2 MiB/s
    assert stats["starved_fraction"] > 0.8, stats
    assert stats["stall_seconds"]["storage"] > 0.8 * stats["waiting_seconds"], stats
