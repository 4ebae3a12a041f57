"""Several `stoker pack --append` processes on one dataset at once, some of them SIGKILLed at
random moments (docs/format.md §5).

Every writer that exits 0 has all of its files in the newest version, under indices and labels
that no later version changes; a killed writer's files are either all there (it published before
the kill) or none; no version is ever partial; `stoker verify` passes; and `stoker gc` with a zero
grace period then removes exactly the killed writers' leftovers. The kill delays come from a fixed
seed, so a failure can be replayed.
"""
from __future__ import annotations

import json
import random
import signal
import subprocess
import time
from pathlib import Path

import stoker
from conftest import dataset_contents, make_tree

WRITERS = 6
ROUNDS = 3


def pack(stoker_exe: str, src: Path, dst: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([stoker_exe, "pack", "-q", "--json", "--chunk-size", "64KiB", *extra,
                             str(src), str(dst)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def test_concurrent_appends_with_kills_lose_nothing(tmp_path, stoker_exe):
    rng = random.Random(2026)
    base = make_tree(tmp_path / "base", seed=1, classes=2, files_per_class=5)
    subprocess.run([stoker_exe, "pack", "-q", str(tmp_path / "base"), str(tmp_path / "ds")],
                   check=True, timeout=120)
    dst = tmp_path / "ds"
    expected: dict[str, bytes] = dict(base)   # what published versions must hold
    maybe: dict[str, dict[str, bytes]] = {}   # killed writers' files: all or none
    indices = {p: i for i, p in enumerate(sorted(base))}  # path -> index, once published
    landed = 0
    for round_ in range(ROUNDS):
        trees, procs = [], []
        for w in range(WRITERS):
            # Each writer: files of its own in the base's class00, and one in a class that every
            # writer of this round adds, so rebasing writers must agree on that class's label.
            src = tmp_path / f"r{round_}w{w}"
            files = make_tree(src, seed=100 * round_ + w, classes=1, files_per_class=40,
                              min_size=500, max_size=20_000, prefix=f"r{round_}w{w}-")
            shared = src / f"shared{round_}"
            shared.mkdir()
            (shared / f"w{w}.bin").write_bytes(bytes([w]) * 1000)
            files[f"shared{round_}/w{w}.bin"] = bytes([w]) * 1000
            trees.append(files)
            procs.append(pack(stoker_exe, src, dst, "--append"))
        killed = set(rng.sample(range(WRITERS), 2))
        for w in killed:
            time.sleep(rng.uniform(0.0, 0.4))
            procs[w].send_signal(signal.SIGKILL)
        for w, proc in enumerate(procs):
            out, err = proc.communicate(timeout=300)
            if w in killed and proc.returncode == -signal.SIGKILL:
                maybe[f"r{round_}w{w}"] = trees[w]
                continue
            assert proc.returncode == 0, f"writer {w}: {err}"
            summary = json.loads(out)
            assert summary["files_added"] == len(trees[w])
            expected.update(trees[w])
            landed += 1
        ds = stoker.Dataset(str(dst))
        contents = dataset_contents(ds)
        for path, data in expected.items():
            assert contents.get(path) == data, f"round {round_}: {path} lost or wrong"
        for name, files in maybe.items():
            present = [p for p in files if p in contents]
            assert len(present) in (0, len(files)), f"{name} is partly published"
            if present:
                expected.update(files)
        # Indices and labels never change once published.
        for path in contents:
            i = ds.find(path)
            assert indices.setdefault(path, i) == i, f"{path} moved from {indices[path]} to {i}"
        labels = {ds.stat(p)["class"] for p in contents if p.startswith(f"shared{round_}/")}
        assert labels == {f"shared{round_}"}
        assert stoker.verify(str(dst))["ok"]
    assert landed >= ROUNDS * (WRITERS - 2)

    # Every version that was ever published still opens and is a prefix of the next.
    versions = [v["version"] for v in json.loads(subprocess.run(
        [stoker_exe, "versions", "--json", str(dst)], capture_output=True, text=True,
        check=True).stdout)]
    assert versions == list(range(1, len(versions) + 1))
    previous: list[str] = []
    for v in versions:
        old = stoker.Dataset(str(dst), version=v)
        paths = [old.stat(i)["path"] for i in range(old.num_files)]
        assert paths[:len(previous)] == previous
        previous = paths

    # gc with no grace, once no writer runs, removes the killed writers' unpublished
    # leftovers, nothing else.
    gc = json.loads(subprocess.run([stoker_exe, "gc", "--json", "--keep", str(len(versions)),
                                    "--grace", "0", "--writer-timeout", "0", str(dst)],
                                   capture_output=True, text=True,
                                   check=True).stdout)
    assert gc["versions_removed"] == []
    assert all(p.startswith(("chunks/", "segments/", "versions/")) for p in gc["files_removed"])
    assert dataset_contents(stoker.Dataset(str(dst))) == expected
    assert stoker.verify(str(dst))["ok"]
