"""A file of more than 4 GiB (docs/format.md §2, wide chunk index): `stoker pack` streams it into
a chunk of its own without holding it in memory, every reader gets its exact bytes back, and a
flipped byte in it is caught by name. The input is a sparse file, so only the chunk costs disk."""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

pytestmark = pytest.mark.slow

GiB = 1 << 30
SIZE = 4 * GiB + 12345


def mem_available() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


@pytest.mark.skipif(mem_available() < 10 * GiB, reason="`stoker cat` of 4 GiB needs the memory")
def test_a_file_over_4_gib_packs_reads_back_and_is_checked(tmp_path, stoker_cli, stoker_exe):
    if shutil.disk_usage(tmp_path).free < 12 * GiB:
        pytest.skip("needs 12 GiB of free disk for the chunk")
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    (src / "b").mkdir()
    huge = src / "a" / "huge.bin"
    with open(huge, "wb") as f:
        f.write(b"head" * 1000)
        f.seek(SIZE - 4000)
        f.write(b"tail" * 1000)
    (src / "b" / "small.bin").write_bytes(os.urandom(5000))
    ds = tmp_path / "ds"
    stoker_cli("pack", "-q", src, ds, check=True, timeout=900)

    st = json.loads(stoker_cli("stat", ds, "a/huge.bin", "--json", check=True).stdout)
    assert st["size"] == SIZE
    chunk = ds / "chunks" / f"{st['chunk']}.chunk"
    # Alone in its chunk, with a wide (12-byte) index entry: header 32 + index 12 + footer 32.
    assert chunk.stat().st_size == SIZE + 76
    assert stoker_cli("verify", ds, timeout=900).returncode == 0
    cat = subprocess.Popen([stoker_exe, "cat", str(ds), "a/huge.bin"], stdout=subprocess.PIPE)
    cmp = subprocess.run(["cmp", "-", str(huge)], stdin=cat.stdout, capture_output=True,
                         timeout=900)
    cat.stdout.close()
    assert cat.wait(timeout=900) == 0 and cmp.returncode == 0, cmp.stdout

    # A flipped byte past 4 GiB is caught, and named.
    with open(chunk, "r+b") as f:
        f.seek(32 + SIZE - 100)
        b = f.read(1)
        f.seek(32 + SIZE - 100)
        f.write(bytes([b[0] ^ 0x20]))
    bad = stoker_cli("verify", ds, timeout=900)
    assert bad.returncode == 3 and "a/huge.bin" in bad.stdout + bad.stderr
    refused = subprocess.run([stoker_exe, "cat", str(ds), "a/huge.bin"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, timeout=900)
    assert refused.returncode != 0 and "CRC32C" in refused.stderr
