"""Shared fixtures for the Python API and CLI tests.

The `stoker` CLI is the one `pip install .` put next to this interpreter (the environment's
scripts directory), else the first on PATH. Trees are generated from a seed with Python's own
PRNG, so every run packs the same bytes.
"""
from __future__ import annotations

import io
import os
import random
import shutil
import subprocess
import sysconfig
import tarfile
from pathlib import Path

import pytest


def find_stoker() -> str | None:
    search = os.pathsep.join([sysconfig.get_path("scripts"), os.environ.get("PATH", "")])
    return shutil.which("stoker", path=search)


STOKER = find_stoker()


def make_tree(root: Path, *, seed: int, classes: int = 3, files_per_class: int = 20,
              min_size: int = 0, max_size: int = 20_000, prefix: str = "") -> dict[str, bytes]:
    """Writes classes/<c>/<name> files of random sizes and bytes; returns {relative path: bytes}.

    Includes the awkward cases: an empty file, names with spaces and dots, a nested directory.
    """
    rng = random.Random(seed)
    tree: dict[str, bytes] = {}
    for c in range(classes):
        for i in range(files_per_class):
            sub = "nested/" if i % 7 == 3 else ""
            name = f"{prefix}img {i:04d}.v{i % 3}.bin" if i % 5 == 0 else f"{prefix}f{i:04d}.jpg"
            rel = f"class{c:02d}/{sub}{name}"
            size = 0 if (c, i) == (0, 1) else rng.randint(min_size, max_size)
            tree[rel] = rng.randbytes(size)
    for rel, data in tree.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return tree


def dataset_contents(ds) -> dict[str, bytes]:
    """Every file of a stoker.Dataset, read through the Python API."""
    out = {}
    for i in range(ds.num_files):
        st = ds.stat(i)
        out[st["path"]] = ds.read(i)
    return out


def pack_small_tree(tmp_path_factory, name: str, seed: int) -> str:
    """A 77-sample labelled dataset in ~20 chunks (so 2, 3 and 4 ranks don't divide it)."""
    import stoker  # here, not at the top: test_sample_data.py runs without the package
    root = tmp_path_factory.mktemp(name)
    make_tree(root / "src", seed=seed, classes=7, files_per_class=11, max_size=4000)
    stoker.pack(str(root / "src"), str(root / "ds"), chunk_size=8192)
    return str(root / "ds")


def sample_index_by_path(uri: str) -> dict[str, int]:
    """{path of a sample's first file: sample index}."""
    import stoker
    ds = stoker.Dataset(uri)
    return {ds.sample_files(i)[0]: i for i in range(len(ds))}


def write_tar(path: Path, members: dict[str, bytes]) -> None:
    """A tar file of regular-file members {name: bytes}, in the given order."""
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def chunk_files(dataset: Path) -> dict[str, bytes]:
    d = dataset / "chunks"
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())} if d.is_dir() else {}


class Runner:
    """Runs the installed CLI; returns the CompletedProcess (text, or bytes with binary=True)."""

    def __init__(self, exe: str):
        self.exe = exe

    def __call__(self, *args, check: bool = False, binary: bool = False, timeout: float = 300,
                 **kwargs) -> subprocess.CompletedProcess:
        proc = subprocess.run([self.exe, *map(str, args)], capture_output=True, text=not binary,
                              timeout=timeout, **kwargs)
        if check and proc.returncode != 0:
            raise AssertionError(f"stoker {' '.join(map(str, args))} exited {proc.returncode}: "
                                 f"{proc.stderr}")
        return proc


@pytest.fixture(scope="session")
def stoker_exe() -> str:
    if STOKER is None:
        pytest.fail("the stoker CLI is not installed: run `.venv/bin/pip install "
                    "--no-build-isolation .` (it installs `stoker` into the venv's bin/)")
    return STOKER


@pytest.fixture(scope="session")
def stoker_cli(stoker_exe) -> Runner:
    return Runner(stoker_exe)


@pytest.fixture
def tree(tmp_path) -> tuple[Path, dict[str, bytes]]:
    root = tmp_path / "src"
    return root, make_tree(root, seed=1234)
