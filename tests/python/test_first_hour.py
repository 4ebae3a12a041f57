"""A new user's first hour (issue 37): an ImageFolder tree of real photos with the usual strays,
packed and trained on as the README says — every message, exit code and label checked."""
from __future__ import annotations

import json
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pytest

import stoker
from conftest import STOKER
from test_image_loader import write_photo_tree

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.skipif(STOKER is None, reason="stoker CLI not built")


def run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run([STOKER, *args], capture_output=True, text=True)
    if check:
        assert out.returncode == 0, out.stderr
    return out


def stray_tree(root: Path, count: int = 24) -> dict[str, bytes]:
    """Real photos in class directories c0..c2, and the strays a real tree has: a README and OS
    litter at the top, a notes file and macOS resource forks inside a class directory."""
    files = write_photo_tree(root, count)
    strays = {"README.txt": b"how this was collected\n", ".DS_Store": b"\0\0\0\1Bud1",
              "Thumbs.db": b"\xd0\xcf", "c0/._img000.jpg": b"\0\5\26\7", "c1/notes.txt": b"x",
              "__MACOSX/c0/._img003.jpg": b"\0\5\26\7"}
    for rel, data in strays.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return files


def test_a_stray_file_at_the_top_keeps_the_labels_and_is_named(tmp_path):
    files = stray_tree(tmp_path / "imgs")
    out = run("pack", str(tmp_path / "imgs"), str(tmp_path / "ds"))
    # Labels from the class directories; the top-level README left out and said; litter too.
    assert "3 classes" in out.stdout
    assert ("left out 1 file beside the class directories (labels come from the directories; "
            "--labels none packs every file): README.txt") in out.stderr
    assert "left out 4 files as OS litter or --exclude: " in out.stderr
    ds = stoker.Dataset(str(tmp_path / "ds"))
    assert ds.classes == ["c0", "c1", "c2"]
    # Every photo and the notes file inside c1 (it is in a class directory), nothing else.
    assert sorted(ds[i][2] for i in range(len(ds))) == sorted([*files, "c1/notes.txt"])
    assert all(ds[i][1] >= 0 for i in range(len(ds)))
    # The same tree appends cleanly (the README is left out again, not refused).
    more = tmp_path / "more"
    (more / "c3").mkdir(parents=True)
    (more / "c3" / "x.jpg").write_bytes(files["c0/img000.jpg"])
    (more / "README.txt").write_text("again")
    out = run("pack", str(more), str(tmp_path / "ds"), "--append")
    assert "README.txt" in out.stderr
    assert stoker.Dataset(str(tmp_path / "ds")).classes == ["c0", "c1", "c2", "c3"]


def test_exclude_patterns_and_json_report(tmp_path):
    stray_tree(tmp_path / "imgs")
    out = run("pack", str(tmp_path / "imgs"), str(tmp_path / "ds"), "--json", "--exclude",
              "*.txt", "--exclude", "c2/*")
    report = json.loads(out.stdout)
    assert out.stderr == ""
    assert report["labels_found"] is True and report["classes"] == 2
    assert report["left_out"]["excluded"]["count"] == 4 + 2 + 8  # litter, two .txt, c2's files
    assert report["left_out"]["outside_class_dirs"]["count"] == 0
    names = [stoker.Dataset(str(tmp_path / "ds"))[i][2] for i in range(report["files"])]
    assert not any(n.endswith(".txt") or n.startswith("c2/") for n in names)
    # Python: the same option, a warning with the same line, and the same report.
    with pytest.warns(UserWarning, match="left out 1 file beside the class directories"):
        summary = stoker.pack(str(tmp_path / "imgs"), str(tmp_path / "py"), exclude=["c1/*"],
                              progress=False)
    assert summary["left_out"]["outside_class_dirs"]["examples"] == ["README.txt"]
    assert stoker.Dataset(str(tmp_path / "py")).classes == ["c0", "c2"]


def test_labels_none_and_a_flat_folder_say_so(tmp_path):
    flat = tmp_path / "flat"
    flat.mkdir()
    (flat / "a.jpg").write_bytes(b"\xff\xd8\xff")
    out = run("pack", str(flat), str(tmp_path / "ds"))
    assert "no labels: the files are not in class directories" in out.stderr
    stray_tree(tmp_path / "imgs")
    out = run("pack", str(tmp_path / "imgs"), str(tmp_path / "none"), "--labels", "none")
    assert "README.txt" not in out.stderr and "0 classes" in out.stdout
    assert "README.txt" in stoker.Dataset(str(tmp_path / "none")).listdir("")


def test_empty_trees_and_datasets_are_refused_as_sources(tmp_path):
    (tmp_path / "empty").mkdir()
    out = run("pack", str(tmp_path / "empty"), str(tmp_path / "ds"), check=False)
    assert out.returncode == 1 and "holds no files to pack" in out.stderr
    (tmp_path / "litter").mkdir()
    (tmp_path / "litter" / ".DS_Store").write_bytes(b"x")
    out = run("pack", str(tmp_path / "litter"), str(tmp_path / "ds"), check=False)
    assert out.returncode == 1 and "as OS litter or --exclude: .DS_Store" in out.stderr
    stray_tree(tmp_path / "imgs", 6)
    run("pack", str(tmp_path / "imgs"), str(tmp_path / "ds"))
    out = run("pack", str(tmp_path / "ds"), str(tmp_path / "again"), check=False)
    assert out.returncode == 1 and "is a stoker dataset, not a tree of files" in out.stderr
    assert not (tmp_path / "again").exists() or not any((tmp_path / "again").iterdir())


def test_image_loader_leaves_out_what_is_no_image_and_says_so_once(tmp_path):
    files = stray_tree(tmp_path / "imgs")
    (tmp_path / "imgs" / "c2" / "empty.txt").write_bytes(b"")
    run("pack", str(tmp_path / "imgs"), str(tmp_path / "ds"))
    loader = stoker.ImageLoader(str(tmp_path / "ds"), batch_size=8, size=32, shuffle="full")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for epoch in range(2):
            loader.set_epoch(epoch)
            labels = np.concatenate([lab.numpy() for _, lab in loader])
            assert len(labels) == len(files) and (labels >= 0).all()
            assert loader.stats()["not_images"] == 2
    said = [str(w.message) for w in caught if "are no images" in str(w.message)]
    assert len(said) == 1, said  # once per loader, not per epoch
    assert "left out 2 file(s)" in said[0]
    assert "c1/notes.txt" in said[0] and "c2/empty.txt" in said[0]


@pytest.mark.parametrize("shuffle", ["full", "sequential", "chunk"])
def test_a_small_memory_budget_is_slower_never_failing(tmp_path, shuffle):
    # Issue 37 item 2: samples queued for decoding held the budget and the read pipeline took
    # that for a consumer that never lets go ("used up by samples still held").
    files = write_photo_tree(tmp_path / "src", 160)
    stoker.pack(str(tmp_path / "src"), str(tmp_path / "ds"), chunk_size="1MiB", progress=False)
    payload = sum(len(b) for b in files.values())
    for budget in ["256KiB", 64 << 10]:
        assert payload > 4 * stoker.byte_size(budget)
        loader = stoker.ImageLoader(str(tmp_path / "ds"), batch_size=16, size=32, threads=2,
                                    memory_budget=budget, shuffle=shuffle)
        seen = np.concatenate([lab.numpy() for _, lab in loader])
        assert len(seen) == len(files)
        assert loader.stats()["peak_bytes_held"] <= max(stoker.byte_size(budget),
                                                        max(len(b) for b in files.values()))
