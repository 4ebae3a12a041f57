"""Datasets written in segment format 2 stay readable, appendable and compactable
(docs/format.md §3.6). `tests/data/format2_dataset` was packed by stoker 0.1.0 before format 3
(commit 6cf04d5): version 1 from a tree of cat/dog/bird text files, version 2 an append of
fish files. Its bytes follow from the formula in `expected()`, so nothing here trusts the reader
it tests."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import stoker

DATA = Path(__file__).resolve().parent.parent / "data" / "format2_dataset"


def expected() -> dict[str, bytes]:
    files = {}
    for cls, n in (("cat", 300), ("dog", 7), ("bird", 2)):
        for i in range(n):
            files[f"{cls}/{cls}{i:04d}.txt"] = f"{cls} number {i}\n".encode() * (1 + i % 3)
    for i in range(5):
        files[f"fish/fish{i:04d}.txt"] = f"fish number {i}\n".encode()
    return files


def contents(path: Path, version: int | None = None) -> dict[str, tuple[int, bytes, int]]:
    """Every file: its index, bytes and label."""
    ds = stoker.Dataset(str(path), version=version)
    out = {}
    for i in range(ds.num_files):
        st = ds.stat(i)
        out[st["path"]] = (i, ds.read(i), st["label"])
    return out


def segment_formats(path: Path) -> list[int]:
    """The format version in each segment file's header, in name order."""
    return [int.from_bytes(seg.read_bytes()[8:12], "little")
            for seg in sorted((path / "segments").iterdir())]


def test_a_format2_dataset_reads_appends_and_compacts(tmp_path, stoker_cli):
    ds = tmp_path / "ds"
    shutil.copytree(DATA, ds)
    assert segment_formats(ds) == [2, 2]
    before = contents(ds)
    assert {p: b for p, (_, b, _) in before.items()} == expected()
    assert stoker_cli("verify", ds).returncode == 0
    v1 = stoker.Dataset(str(ds), version=1)
    assert len(v1) == 309 and list(v1.classes) == ["bird", "cat", "dog"]

    # An append writes a format-3 segment beside the format-2 ones.
    extra = tmp_path / "extra" / "eel"
    extra.mkdir(parents=True)
    (extra / "eel0000.txt").write_bytes(b"eel\n")
    stoker_cli("pack", tmp_path / "extra", ds, "--append", check=True)
    assert sorted(segment_formats(ds)) == [2, 2, 3]
    after = contents(ds)
    assert {p: after[p] for p in before} == before  # identity kept (docs/format.md §1)
    assert after["eel/eel0000.txt"][:2] == (len(before), b"eel\n")
    assert stoker_cli("verify", ds).returncode == 0

    # Compaction merges format-2 and format-3 segments into one format-3 segment.
    out = json.loads(stoker_cli("compact", ds, "--all", "--json", check=True).stdout)
    assert out["segments_after"] == 1, out
    assert stoker.Dataset(str(ds)).version == 4
    assert contents(ds) == after
    assert stoker_cli("verify", ds).returncode == 0
    # Every older version, format 2 included, still reads as it did.
    assert contents(ds, version=2) == before
