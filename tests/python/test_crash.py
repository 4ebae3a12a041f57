"""kill -9 the packer at random moments: a dataset shows the previous version or the complete new
one, never a partial one, and packing again afterwards succeeds.

`stoker pack` (fresh, and --append onto an existing version) runs on a tree that takes about a
second to pack with small chunks (one fdatasync each); it is SIGKILLed at once, after a random
delay, or within a millisecond and a half of a stage of the publish step (docs/format.md §5):
right after the new segment, or its temporary file `<id>.seg.tmp-<random>`, appears in
segments/ (the segment is synced and linked to its name; the version record comes next), or
right after the new version's record, or its temporary file `<v>.version.tmp-<random>`,
appears in versions/ (synced, then linked to the record's name). A kill may leave orphan
chunks, segments and temporary files, which no version names and readers never see. The
delays come from a fixed seed, so a failure can be replayed (the pack's own timing varies).
"""
from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

import stoker
from conftest import dataset_contents, make_tree, metadata_files

pytestmark = pytest.mark.slow

CHUNK = "128KiB"
RUNS_PER_MODE = 12  # per fresh / append; a third of them aimed at the publish step


@pytest.fixture(scope="module")
def big_tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("crash") / "big"
    files = make_tree(root, seed=42, classes=8, files_per_class=320, min_size=1000,
                      max_size=48_000, prefix="big-")
    return root, files


@pytest.fixture(scope="module")
def base_dataset(tmp_path_factory, stoker_exe):
    work = tmp_path_factory.mktemp("base")
    files = make_tree(work / "src", seed=43, classes=3, files_per_class=10)
    subprocess.run([stoker_exe, "pack", "-q", "--chunk-size", CHUNK, str(work / "src"),
                    str(work / "ds")], check=True, timeout=120)
    return work / "ds", files


def record_name(version: int) -> str:
    return f"{version:016x}.version"


def version_records(dst: Path) -> dict[str, bytes]:
    """The published version records in versions/ (temporary files left out)."""
    return {name: data for name, data in metadata_files(dst)["versions"].items()
            if name.endswith(".version")}


def observed_state(dst: Path, expected: dict, base_records: dict[str, bytes]) -> int | None:
    """The version the dataset shows (None: no dataset), checked against `expected`
    ({version or None: {path: bytes}}) byte for byte, and by stoker.verify. The records of the
    versions before (`base_records`) are unchanged, and no other version exists."""
    records = version_records(dst)
    assert {k: records.get(k) for k in base_records} == base_records, f"{dst}: old records changed"
    if not records:
        assert None in expected, f"{dst}: no dataset, expected one of {sorted(expected)}"
        with pytest.raises(FileNotFoundError):
            stoker.Dataset(str(dst))
        return None
    ds = stoker.Dataset(str(dst))
    assert ds.version in expected, f"{dst}: version {ds.version}, expected one of {list(expected)}"
    assert sorted(records) == [record_name(v) for v in range(1, ds.version + 1)], sorted(records)
    assert ds.num_files == len(expected[ds.version])
    assert dataset_contents(ds) == expected[ds.version]
    report = stoker.verify(str(dst))
    assert report["ok"], report
    return ds.version


def leftovers(dst: Path) -> list[str]:
    """What a kill left in versions/ and segments/ that no version names: temporary files and
    orphan segments (printed, not asserted: it shows which stages the kills hit)."""
    meta = metadata_files(dst)
    records = [data for name, data in meta["versions"].items() if name.endswith(".version")]
    listed = {line.split()[1] + ".seg" for data in records
              for line in data.decode().splitlines() if line.startswith("segment ")}
    return ([f"versions/{n}" for n in meta["versions"] if not n.endswith(".version")] +
            [f"segments/{n}" for n in meta["segments"] if n not in listed])


def listing(d: Path) -> list[str]:
    try:
        return os.listdir(d)
    except FileNotFoundError:
        return []


def publish_marker(dst: Path, mode: str, new_version: int):
    """A function that is true once the publish step has reached `mode`'s stage."""
    if mode == "segment":  # a new segment, or its temporary file, is in segments/
        old = set(listing(dst / "segments"))
        return lambda: any(n not in old for n in listing(dst / "segments"))
    # the new version's record, or its temporary file, is in versions/
    prefix = record_name(new_version)
    return lambda: any(n.startswith(prefix) for n in listing(dst / "versions"))


def pack_and_kill(argv: list[str], dst: Path, new_version: int, rng: random.Random,
                  mode: str, duration: float) -> int:
    """Starts argv, SIGKILLs it per `mode`; returns its exit status (-9 if killed)."""
    marker = publish_marker(dst, mode, new_version) if mode in ("segment", "version") else None
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        if marker is not None:
            # Poll until the publish step has reached the stage, then kill within a
            # millisecond and a half (the whole step, fsyncs included, takes about a
            # millisecond on a fast disk): before, during or after the record's creation.
            while proc.poll() is None and not marker():
                time.sleep(0.0001)
            time.sleep(rng.uniform(0, 0.0015))
        else:
            time.sleep(rng.uniform(0, 1.2 * duration) if mode == "random" else 0)
        proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode in (0, -signal.SIGKILL), err
    return proc.returncode


def modes(rng: random.Random) -> list[str]:
    out = ["immediate"] + ["segment", "version"] * (RUNS_PER_MODE // 6)
    out += ["random"] * (RUNS_PER_MODE - len(out))
    rng.shuffle(out)
    return out


def run_crash_series(tmp_path, stoker_exe, big_tree, *, base=None):
    src, big_files = big_tree
    rng = random.Random(20240601 if base is None else 20240602)
    old_version = None if base is None else 1
    old = {} if base is None else base[1]
    new_version = 1 if base is None else 2
    expected = {old_version: old, new_version: {**old, **big_files}}
    base_records = {} if base is None else version_records(base[0])
    assert sorted(base_records) == ([] if base is None else [record_name(1)])
    argv = [stoker_exe, "pack", "-q", "--chunk-size", CHUNK]
    if base is not None:
        argv.append("--append")

    def fresh_destination(name: str) -> Path:
        dst = tmp_path / name
        if base is not None:
            shutil.copytree(base[0], dst)
        return dst

    # An uninterrupted run: the reference result, and how long a pack takes here.
    dst = fresh_destination("reference")
    start = time.monotonic()
    subprocess.run(argv + [str(src), str(dst)], check=True, timeout=300)
    duration = time.monotonic() - start
    assert observed_state(dst, expected, base_records) == new_version

    outcomes = {"previous": 0, "new": 0}
    by_mode: dict[str, list[str]] = {}
    for run, mode in enumerate(modes(rng)):
        dst = fresh_destination(f"run{run}")
        rc = pack_and_kill(argv + [str(src), str(dst)], dst, new_version, rng, mode, duration)
        context = f"run {run} ({mode}, exit {rc})"
        version = observed_state(dst, expected, base_records)
        if rc == 0:
            assert version == new_version, context
        left = sorted({n.split("/")[0] + (" tmp" if ".tmp-" in n else "")
                       for n in leftovers(dst)})
        by_mode.setdefault(mode, []).append(("previous" if version == old_version else "new") +
                                            (f" (left: {', '.join(left)})" if left else ""))
        if version == old_version:
            outcomes["previous"] += 1
            # Packing again after the crash succeeds and publishes the next version exactly.
            proc = subprocess.run(argv + [str(src), str(dst)], capture_output=True, text=True,
                                  timeout=300)
            assert proc.returncode == 0, f"{context}: re-run failed: {proc.stderr}"
            assert observed_state(dst, expected, base_records) == new_version, context
        else:
            outcomes["new"] += 1
        shutil.rmtree(dst)
    print(f"pack takes {duration:.2f} s; outcome of each kill: {by_mode}")  # shown with -s / -rP
    # The "immediate" run always dies before publishing.
    assert outcomes["previous"] >= 1, outcomes


def test_kill_fresh_pack(tmp_path, stoker_exe, big_tree):
    run_crash_series(tmp_path, stoker_exe, big_tree)


def test_kill_append(tmp_path, stoker_exe, big_tree, base_dataset):
    run_crash_series(tmp_path, stoker_exe, big_tree, base=base_dataset)
