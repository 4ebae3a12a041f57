"""Shared fixtures for the Python API and CLI tests.

The `stoker` CLI is the one `pip install .` put next to this interpreter (the environment's
scripts directory), else the first on PATH. Trees are generated from a seed with Python's own
PRNG, so every run packs the same bytes.
"""
from __future__ import annotations

import io
import os
import pty
import random
import shutil
import signal
import socket
import subprocess
import sysconfig
import tarfile
from pathlib import Path

import pytest

# A shell starts background jobs with SIGINT ignored, and an ignored signal stays ignored in
# every process started from here (stoker mount, serve, node), so tests that stop one with
# SIGINT would wait in vain. A handler of our own is reset to the default in each child.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# With no S3 credentials configured, stoker (as the AWS SDKs) asks the EC2 instance metadata
# service at 169.254.169.254. Tests reach only loopback and their own namespaces: never that
# address (a test that needs the service points AWS_EC2_METADATA_SERVICE_ENDPOINT at loopback).
os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")


# Test tiers (CONTRIBUTING.md). The quick tier, which runs in under 2 minutes on a 2-core
# machine, is
#   pytest tests/python -m "not slow and not netns and not s3 and not slurm and not mount"
# and the full tier (scripts/test, CI) runs everything. Every marker used in tests/python is
# registered here, so `--strict-markers` passes. A test that needs something missing still
# skips (or fails under the STOKER_REQUIRE_* variables) as before: markers only select.
MARKERS = {
    "slow": "takes over ~5 s on a 2-core machine (a module-scoped fixture counts for the "
            "module); left out of the quick tier",
    "netns": "builds network namespaces (tests/netns/testbed.py): needs root and `ip netns`",
    "s3": "needs the Ceph RADOS Gateway test server (scripts/s3-server, tests/s3/rgw.py)",
    "slurm": "needs the private Slurm cluster (tests/slurm/cluster.py: slurmctld, slurmd, munge)",
    "mount": "mounts with FUSE (stoker mount): needs /dev/fuse, fusermount3 and root",
    "system": "needs a host program or data beyond the build and .venv (strace, Debian's "
              "wallpaper photos, the torchvision venv); skips without it",
}


def pytest_configure(config):
    for name, doc in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {doc}")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that the kernel hands out now (free until someone binds it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


def metadata_files(dataset: Path) -> dict[str, dict[str, bytes]]:
    """{"versions": {name: bytes}, "segments": {name: bytes}}: every file under a dataset's
    versions/ and segments/ (format 2, docs/format.md), temporary files included."""
    out = {}
    for sub in ("versions", "segments"):
        d = dataset / sub
        out[sub] = {p.name: p.read_bytes() for p in sorted(d.iterdir())} if d.is_dir() else {}
    return out


def run_on_pty(argv: list[str]) -> tuple[int, str]:
    """Runs argv with stderr on a pseudo-terminal; returns (exit code, what the terminal got)."""
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=follower)
    finally:
        os.close(follower)
    out = b""
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        out += data
    os.close(leader)
    proc.stdout.read()
    return proc.wait(timeout=120), out.decode(errors="replace")


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


# --- S3: a real Ceph RADOS Gateway on loopback (scripts/s3-server, tests/s3/rgw.py) ------------
# Tests that need it use the fixtures below and mark themselves with `s3_skip`. With
# STOKER_REQUIRE_S3=1 (CI) a missing gateway is an error, not a skip.
import sys as _sys  # noqa: E402
import uuid as _uuid  # noqa: E402

_sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "s3"))
import rgw  # noqa: E402


def _s3_unavailable() -> str | None:
    reason = rgw.available()
    if reason is None:
        try:
            import boto3  # noqa: F401
        except ImportError:
            reason = "boto3 is not installed (scripts/setup installs it)"
    if reason and os.environ.get("STOKER_REQUIRE_S3", "") not in ("", "0"):
        raise RuntimeError(f"STOKER_REQUIRE_S3 is set but: {reason}")
    return reason


S3_UNAVAILABLE = _s3_unavailable()
s3_skip = pytest.mark.skipif(S3_UNAVAILABLE is not None, reason=S3_UNAVAILABLE or "")


@pytest.fixture(scope="session")
def s3_server():
    """{endpoint, access_key, secret_key, region, env}: the gateway, started once per session."""
    info = rgw.start()
    yield info
    rgw.stop()


@pytest.fixture(scope="session")
def s3(s3_server):
    """A boto3 client (path-style, us-east-1): the independent S3 client of the tests."""
    return rgw.boto3_client(s3_server)


def temporary_bucket(s3, prefix: str):
    """Yields a fresh bucket's name; empties and removes it afterwards, whatever is left in it."""
    name = f"{prefix}-{_uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    yield name
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=name):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if keys:
            s3.delete_objects(Bucket=name, Delete={"Objects": keys})
    for up in s3.list_multipart_uploads(Bucket=name).get("Uploads", []):
        s3.abort_multipart_upload(Bucket=name, Key=up["Key"], UploadId=up["UploadId"])
    s3.delete_bucket(Bucket=name)


@pytest.fixture
def bucket(s3):
    """A fresh bucket for one test."""
    yield from temporary_bucket(s3, "test")
