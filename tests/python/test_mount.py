"""`stoker mount`: the read-only FUSE view of a packed dataset, read by unchanged programs
(diff, find, cp, tar, Python's file API, mmap, a torch DataLoader) — docs/mount.md.

Needs a working FUSE (/dev/fuse, fusermount3) and root; skipped otherwise. The CLI is the
installed one (conftest's `stoker_exe`); set STOKER_CLI to test another binary, e.g. a
developer build: STOKER_CLI=build/tools/stoker pytest tests/python/test_mount.py
"""
from __future__ import annotations

import errno
import json
import mmap
import os
import random
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import make_tree


def _fuse_unavailable() -> str | None:
    if not os.path.exists("/dev/fuse"):
        return "FUSE is unavailable: no /dev/fuse"
    if shutil.which("fusermount3") is None:
        return "FUSE is unavailable: no fusermount3 (install the fuse3 package)"
    if os.geteuid() != 0:
        return "needs root: mounts FUSE file systems"
    return None


pytestmark = [pytest.mark.mount, pytest.mark.skipif(_fuse_unavailable() is not None,
                                                     reason=_fuse_unavailable() or "")]

EXIT_ERROR = 1
BIG = 6_000_000  # bytes of the large file: several read requests, many pages


@pytest.fixture(scope="module")
def cli(stoker_exe) -> str:
    exe = os.environ.get("STOKER_CLI", stoker_exe)
    if subprocess.run([exe, "mount", "--help"], capture_output=True).returncode != 0:
        pytest.fail(f"{exe} has no `mount` subcommand: rebuild and reinstall the stoker CLI")
    return exe


# --- Mounting helpers -------------------------------------------------------------------------

def _unescape(field: str) -> str:
    """/proc/mounts writes space, tab, newline and backslash as octal escapes."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), field)


def is_mounted(path: Path) -> bool:
    with open("/proc/self/mounts") as f:
        return any(_unescape(line.split()[1]) == str(path) for line in f if line.strip())


class Mount:
    """`stoker mount DATASET MNT` in a subprocess; stderr goes to a log file."""

    def __init__(self, cli: str, dataset: Path, mnt: Path, *extra: str):
        mnt.mkdir(parents=True, exist_ok=True)
        self.mnt = mnt
        self.log_path = mnt.parent / f"{mnt.name}.log"
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen([cli, "mount", str(dataset), str(mnt), *extra],
                                         stdout=subprocess.DEVNULL, stderr=log)
        deadline = time.monotonic() + 20
        while not is_mounted(mnt):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"stoker mount did not mount (exit {self.proc.returncode}): "
                            f"{self.log()}")
            time.sleep(0.01)

    def log(self) -> str:
        return self.log_path.read_text()

    def stop(self, sig: int = signal.SIGTERM) -> int | None:
        """Signals the process and waits; returns its exit code. Never leaves a mount behind."""
        try:
            if self.proc.poll() is None:
                self.proc.send_signal(sig)
                self.proc.wait(timeout=20)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            if is_mounted(self.mnt):
                subprocess.run(["fusermount3", "-u", "-z", str(self.mnt)], capture_output=True)
        return self.proc.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def read_tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


# --- The shared dataset and mount -------------------------------------------------------------

@pytest.fixture(scope="module")
def source(tmp_path_factory) -> tuple[Path, dict[str, bytes]]:
    """make_tree's awkward cases (empty file, spaces, dots, nested) plus unicode names, deep
    nesting and one file of several MB."""
    root = tmp_path_factory.mktemp("mount") / "src"
    files = make_tree(root, seed=4242, classes=3, files_per_class=20, max_size=40_000)
    rng = random.Random(7)
    extra = {
        "class00/ünïcödé 名前 ✓.bin": rng.randbytes(3000),
        "class01/deep/er/still deeper/leaf.txt": b"leaf\n",
        "class01/big file.bin": rng.randbytes(BIG),
        "class02/ß/ empty with leading space": b"",
    }
    for rel, data in extra.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root, {**files, **extra}


@pytest.fixture(scope="module")
def dataset(source, cli) -> Path:
    src, _ = source
    dst = src.parent / "ds"
    subprocess.run([cli, "pack", "-q", "--chunk-size", "64KiB", str(src), str(dst)], check=True)
    return dst


@pytest.fixture(scope="module")
def mounted(dataset, cli):
    with Mount(cli, dataset, dataset.parent / "mnt") as m:
        yield m
    assert m.proc.returncode == 0, m.log()


# --- The tree, as unchanged tools see it ------------------------------------------------------

def test_mounted_line_and_nothing_else(mounted, source):
    _, files = source
    lines = mounted.log().splitlines()
    assert lines == [f"mounted {mounted.proc.args[2]} at {mounted.mnt} ({len(files)} files)"]


def test_diff_finds_no_difference(mounted, source):
    src, _ = source
    proc = subprocess.run(["diff", "-r", str(src), str(mounted.mnt)], capture_output=True)
    assert proc.returncode == 0 and proc.stdout == b"", proc.stdout[:2000]


def test_find_lists_the_same_paths(mounted, source):
    src, files = source

    def find(root):
        out = subprocess.run(["find", ".", "-printf", r"%y %s %P\n"], cwd=root, check=True,
                             capture_output=True).stdout.decode()
        # Directory sizes differ by file system; compare type and path for those.
        return sorted(re.sub(r"^d \d+ ", "d - ", line) for line in out.splitlines())

    listing = find(mounted.mnt)
    assert listing == find(src)
    assert sum(line.startswith("f ") for line in listing) == len(files)


def test_cp_and_tar_reproduce_the_bytes(mounted, source, tmp_path):
    src, files = source
    subprocess.run(["cp", "-r", str(mounted.mnt), str(tmp_path / "copy")], check=True)
    assert read_tree(tmp_path / "copy") == files
    (tmp_path / "untar").mkdir()
    tar = subprocess.run(["tar", "c", "-C", str(mounted.mnt), "."], check=True,
                         capture_output=True).stdout
    subprocess.run(["tar", "x", "-C", str(tmp_path / "untar")], input=tar, check=True)
    assert read_tree(tmp_path / "untar") == files


def test_stat_sizes_modes_and_inodes(mounted, source):
    _, files = source
    inodes = set()
    for rel, data in files.items():
        st = os.stat(mounted.mnt / rel)
        assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o444, rel
        assert st.st_size == len(data) and st.st_nlink == 1, rel
        assert os.stat(mounted.mnt / rel).st_ino == st.st_ino  # stable
        inodes.add(st.st_ino)
    dirs = {str(parent) for rel in files for parent in Path(rel).parents} - {"."}
    for rel in dirs:
        st = os.stat(mounted.mnt / rel)
        assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o555, rel
        inodes.add(st.st_ino)
    assert os.stat(mounted.mnt).st_ino == 1  # FUSE's root inode
    inodes.add(1)
    assert len(inodes) == len(files) + len(dirs) + 1  # all distinct
    # Names that do not exist: ENOENT, also below a file.
    with pytest.raises(FileNotFoundError):
        os.stat(mounted.mnt / "class00" / "no such file")
    with pytest.raises(NotADirectoryError):
        os.stat(mounted.mnt / "class01" / "big file.bin" / "x")
    vfs = os.statvfs(mounted.mnt)
    assert vfs.f_files == len(inodes) and vfs.f_bfree == 0
    assert vfs.f_blocks * vfs.f_frsize >= sum(map(len, files.values()))


def test_writes_are_refused(mounted):
    m = mounted.mnt
    some_file = m / "class01" / "big file.bin"
    attempts = [
        lambda: open(some_file, "r+b"),
        lambda: open(some_file, "ab"),
        lambda: open(m / "class00" / "new file", "wb"),
        lambda: os.mkdir(m / "newdir"),
        lambda: os.unlink(some_file),
        lambda: os.rename(some_file, m / "class01" / "renamed"),
        lambda: os.truncate(some_file, 0),
        lambda: os.chmod(some_file, 0o666),
        lambda: os.symlink("x", m / "link"),
    ]
    for attempt in attempts:
        with pytest.raises(OSError) as info:
            attempt()
        assert info.value.errno in (errno.EROFS, errno.EACCES), info.value
    assert os.stat(some_file).st_size == BIG


# --- Reading: the Python file API, mmap, many threads -----------------------------------------

def test_random_ranges_equal_the_source(mounted, source):
    _, files = source
    rng = random.Random(11)
    for rel in ["class01/big file.bin", "class00/ünïcödé 名前 ✓.bin", *sorted(files)[::9]]:
        data = files[rel]
        with open(mounted.mnt / rel, "rb", buffering=0) as f:
            for _ in range(30):
                off = rng.randrange(len(data) + 10)
                n = rng.choice([1, 100, 4096, 65536, 1 << 20, 3 << 20])
                f.seek(off)
                assert f.read(n) == data[off:off + n], (rel, off, n)
                assert os.pread(f.fileno(), n, off) == data[off:off + n], (rel, off, n)
            f.seek(0)
            assert f.read() == data
            assert f.read(10) == b""  # at the end


def test_mmap_reads_the_bytes(mounted, source):
    _, files = source
    with open(mounted.mnt / "class01" / "big file.bin", "rb") as f:
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            assert len(mm) == BIG
            big = files["class01/big file.bin"]
            assert mm[BIG // 3:BIG // 3 + 100_000] == big[BIG // 3:BIG // 3 + 100_000]
            assert mm[:] == big


def test_many_threads_read_every_file(mounted, source):
    _, files = source

    def read(rel):
        return rel, (mounted.mnt / rel).read_bytes()

    with ThreadPoolExecutor(8) as pool:
        for rel, data in pool.map(read, sorted(files) * 2):
            assert data == files[rel], rel


# --- Other trees, errors, shutdown -------------------------------------------------------------

def test_streamed_large_file(dataset, source, cli):
    """Files above --buffer-limit are checked by streaming, then read in place."""
    _, files = source
    big = files["class01/big file.bin"]
    with Mount(cli, dataset, dataset.parent / "mnt-stream", "--buffer-limit", "1MiB") as m:
        assert (m.mnt / "class01" / "big file.bin").read_bytes() == big
        rng = random.Random(5)
        with open(m.mnt / "class01" / "big file.bin", "rb", buffering=0) as f:
            for _ in range(20):
                off, n = rng.randrange(BIG), rng.choice([1, 4096, 1 << 20])
                assert os.pread(f.fileno(), n, off) == big[off:off + n]
        assert (m.mnt / "class00" / "f0002.jpg").read_bytes() == files["class00/f0002.jpg"]
    assert m.proc.returncode == 0, m.log()


def _location(cli, dataset, rel) -> tuple[str, int, int]:
    st = json.loads(subprocess.run([cli, "stat", str(dataset), rel, "--json"], check=True,
                                   capture_output=True).stdout)
    return st["chunk"], st["offset"], st["size"]


def _flip_byte(dataset: Path, chunk: str, offset: int) -> None:
    path = dataset / "chunks" / f"{chunk}.chunk"
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x5A
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("buffer_limit", ["64MiB", "1MiB"])
def test_corrupt_file_gives_eio_and_others_still_read(dataset, source, cli, tmp_path,
                                                      buffer_limit):
    _, files = source
    bad_ds = tmp_path / "ds"
    shutil.copytree(dataset, bad_ds)
    big = "class01/big file.bin"
    big_chunk, big_offset, _ = _location(cli, bad_ds, big)
    # Files land in chunks in a mixed order: damage a file that shares its chunk with another
    # (same_chunk), and find one in a third chunk (other_chunk).
    by_chunk: dict[str, list[str]] = {}
    for rel in sorted(files):
        if rel != big and len(files[rel]) > 100:
            by_chunk.setdefault(_location(cli, bad_ds, rel)[0], []).append(rel)
    chunk = next(c for c, names in sorted(by_chunk.items()) if len(names) >= 2)
    small, same_chunk = by_chunk[chunk][:2]
    other_chunk = next(names[0] for c, names in sorted(by_chunk.items())
                       if c not in (chunk, big_chunk))
    _, offset, size = _location(cli, bad_ds, small)
    _flip_byte(bad_ds, chunk, offset + size // 2)
    _flip_byte(bad_ds, big_chunk, big_offset + BIG - 7)  # near the end: found only by the CRC

    with Mount(cli, bad_ds, tmp_path / "mnt", "--buffer-limit", buffer_limit) as m:
        for rel in (small, big):
            with pytest.raises(OSError) as info:
                (m.mnt / rel).read_bytes()
            assert info.value.errno == errno.EIO, rel
            with open(m.mnt / rel, "rb", buffering=0) as f:  # any range, not just the bad one
                with pytest.raises(OSError) as info:
                    f.read(10)
                assert info.value.errno == errno.EIO
        # Per file: the rest of the damaged chunk and other chunks read fine.
        assert (m.mnt / same_chunk).read_bytes() == files[same_chunk]
        assert (m.mnt / other_chunk).read_bytes() == files[other_chunk]
        assert os.stat(m.mnt / small).st_size == len(files[small])  # metadata still there
        diff = subprocess.run(["diff", "-rq", str(source[0]), str(m.mnt)], capture_output=True)
        assert diff.returncode != 0
    assert m.proc.returncode == 0
    log = m.log()
    assert f"{small}: CRC32C mismatch" in log and f"{big}: CRC32C mismatch" in log, log
    assert same_chunk not in log and other_chunk not in log


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "fusermount3"])
def test_shutdown_unmounts_cleanly(dataset, cli, tmp_path, how):
    m = Mount(cli, dataset, tmp_path / "mnt")
    try:
        assert sorted(os.listdir(m.mnt)) == ["class00", "class01", "class02"]
        if how == "fusermount3":
            subprocess.run(["fusermount3", "-u", str(m.mnt)], check=True)
            m.proc.wait(timeout=20)
        else:
            m.proc.send_signal(getattr(signal, how))
            m.proc.wait(timeout=20)
        assert m.proc.returncode == 0, m.log()
        assert not is_mounted(m.mnt)
        assert os.listdir(m.mnt) == []
    finally:
        m.stop()


def test_a_sigint_ignored_at_start_stays_ignored(dataset, cli, tmp_path):
    """A shell starts `&` jobs with SIGINT ignored: the mount leaves it ignored (as libfuse's own
    handlers do) and stops on SIGTERM."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    proc = subprocess.Popen([cli, "mount", str(dataset), str(mnt)], stderr=subprocess.DEVNULL,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        deadline = time.monotonic() + 20
        while not is_mounted(mnt):
            assert proc.poll() is None and time.monotonic() < deadline, "did not mount"
            time.sleep(0.01)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.5)
        assert proc.poll() is None and is_mounted(mnt)
        assert sorted(os.listdir(mnt)) == ["class00", "class01", "class02"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        assert not is_mounted(mnt)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if is_mounted(mnt):
            subprocess.run(["fusermount3", "-u", "-z", str(mnt)], check=False)


def _gone(pid: int) -> bool:
    """Exited (a zombie counts: its parent, the `stoker mount` command, is gone already)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _wait_gone(pid: int, seconds: float = 20) -> bool:
    deadline = time.monotonic() + seconds
    while not _gone(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.mark.parametrize("how", ["fusermount3", "SIGTERM"])
def test_background_mount_returns_once_mounted(dataset, source, cli, tmp_path, how):
    """--background: the command exits 0 once the tree is there (its captured output closed,
    so this does not hang), a separate process serves it until unmounted, messages go to
    --log-file."""
    mnt, log = tmp_path / "mnt", tmp_path / "mount.log"
    mnt.mkdir()
    proc = subprocess.run([cli, "mount", "--background", str(dataset), str(mnt),
                           "--log-file", str(log)], capture_output=True, text=True, timeout=60)
    pid = None
    try:
        assert proc.returncode == 0, proc.stderr
        assert is_mounted(mnt)
        pid = int(re.search(r"served by process (\d+)", proc.stderr)[1])
        assert os.getsid(pid) == pid  # its own session: the terminal's signals do not reach it
        assert read_tree(mnt) == source[1]
        assert "mounted" in log.read_text()
        if how == "fusermount3":
            subprocess.run(["fusermount3", "-u", str(mnt)], check=True)
        else:
            os.kill(pid, signal.SIGTERM)
        assert _wait_gone(pid)
        assert not is_mounted(mnt)
    finally:
        if is_mounted(mnt):
            subprocess.run(["fusermount3", "-u", "-z", str(mnt)], capture_output=True)
        if pid is not None and not _gone(pid):
            os.kill(pid, signal.SIGKILL)


def test_background_mount_errors_come_back_to_the_command(dataset, cli, tmp_path):
    (tmp_path / "mnt").mkdir()
    bad = subprocess.run([cli, "mount", "--background", str(tmp_path / "no-dataset"),
                          str(tmp_path / "mnt")], capture_output=True, text=True, timeout=60)
    assert bad.returncode == EXIT_ERROR and "no-dataset" in bad.stderr
    assert not is_mounted(tmp_path / "mnt")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep").write_text("x")
    busy = subprocess.run([cli, "mount", "--background", str(dataset), str(tmp_path / "full")],
                          capture_output=True, text=True, timeout=60)
    assert busy.returncode == EXIT_ERROR and "not empty" in busy.stderr
    unlogged = subprocess.run([cli, "mount", str(dataset), str(tmp_path / "mnt"), "--log-file",
                               str(tmp_path / "log")], capture_output=True, text=True)
    assert unlogged.returncode == 2 and "--background" in unlogged.stderr
    assert not is_mounted(tmp_path / "mnt")


def test_errors_are_clear(dataset, cli, tmp_path):
    def mount(ds, mnt, *extra):
        proc = subprocess.run([cli, "mount", str(ds), str(mnt), *extra], capture_output=True,
                              text=True, timeout=30)
        assert not is_mounted(Path(mnt))
        return proc

    proc = mount(dataset, tmp_path / "missing")
    assert proc.returncode == EXIT_ERROR and "missing" in proc.stderr
    assert "No such file or directory" in proc.stderr
    (tmp_path / "file").write_text("x")
    proc = mount(dataset, tmp_path / "file")
    assert proc.returncode == EXIT_ERROR and "not a directory" in proc.stderr
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep").write_text("x")
    proc = mount(dataset, tmp_path / "full")
    assert proc.returncode == EXIT_ERROR and "not empty" in proc.stderr
    (tmp_path / "empty").mkdir()
    proc = mount(tmp_path / "no-dataset", tmp_path / "empty")
    assert proc.returncode == EXIT_ERROR and "no-dataset" in proc.stderr
    proc = mount(dataset, tmp_path / "empty", "-o", "no_such_option")
    assert proc.returncode == EXIT_ERROR and "no_such_option" in proc.stderr
    # --allow-non-empty mounts over the entries, and they are back afterwards.
    with Mount(cli, dataset, tmp_path / "full", "--allow-non-empty") as m:
        assert sorted(os.listdir(m.mnt)) == ["class00", "class01", "class02"]
    assert os.listdir(tmp_path / "full") == ["keep"]


# --- Unchanged training code ------------------------------------------------------------------

@pytest.fixture(scope="module")
def image_dataset(tmp_path_factory, cli):
    """An ImageFolder tree of small JPEGs and PNGs, packed."""
    Image = pytest.importorskip("PIL.Image")
    import numpy as np
    root = tmp_path_factory.mktemp("mount-images")
    rng = np.random.default_rng(3)
    for c in range(3):
        for i in range(8):
            pixels = rng.integers(0, 256, (24 + i, 32, 3), dtype=np.uint8)
            ext = "png" if i % 4 == 0 else "jpg"
            path = root / "src" / f"class {c}" / f"img{i:02d}.{ext}"
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(pixels).save(path)
    subprocess.run([cli, "pack", "-q", str(root / "src"), str(root / "ds")], check=True)
    return root / "src", root / "ds"


def _load_all(loader):
    return [(x.clone(), y.clone()) for x, y in loader]


def _torchvision_python() -> str | None:
    """An interpreter with torchvision: this one, or STOKER_TORCHVISION_PYTHON (scripts/test
    makes a venv for it, since PyPI's torchvision does not load beside the pinned CPU torch)."""
    for python in (sys.executable, os.environ.get("STOKER_TORCHVISION_PYTHON", "")):
        if python and subprocess.run([python, "-c", "import torchvision.datasets"],
                                     capture_output=True).returncode == 0:
            return python
    return None


@pytest.mark.system
def test_torchvision_imagefolder_dataloader(image_dataset, cli, tmp_path):
    """Unchanged torchvision code over the mount: ImageFolder + a shuffling DataLoader with
    worker processes gives the same classes, samples and pixels as on the original tree."""
    python = _torchvision_python()
    if python is None:
        if os.environ.get("STOKER_REQUIRE_TORCHVISION", "") not in ("", "0"):
            pytest.fail("STOKER_REQUIRE_TORCHVISION is set but no interpreter imports "
                        "torchvision (set STOKER_TORCHVISION_PYTHON)")
        pytest.skip("torchvision is not installed (set STOKER_TORCHVISION_PYTHON)")
    src, ds = image_dataset
    script = Path(__file__).resolve().parents[1] / "mount" / "imagefolder_compare.py"
    with Mount(cli, ds, tmp_path / "mnt") as m:
        proc = subprocess.run([python, str(script), str(m.mnt), str(src)],
                              capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report == {**report, "classes": 3, "samples": 24, "batches": 5, "problems": []}


def test_torch_dataloader_reads_files_by_path(image_dataset, cli, tmp_path):
    """Without torchvision: a map-style Dataset that lists classes and decodes files by path
    with PIL, as ImageFolder does, in DataLoader worker processes."""
    torch = pytest.importorskip("torch")
    Image = pytest.importorskip("PIL.Image")
    import numpy as np
    src, ds = image_dataset

    class ByPath(torch.utils.data.Dataset):
        def __init__(self, root):
            classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
            self.samples = [(os.path.join(root, c, f), k) for k, c in enumerate(classes)
                            for f in sorted(os.listdir(os.path.join(root, c)))]

        def __len__(self):
            return len(self.samples)

        def __getitem__(self, i):
            path, label = self.samples[i]
            with open(path, "rb") as f:
                img = Image.open(f).convert("RGB").resize((16, 16))
            return torch.from_numpy(np.asarray(img).copy()), label

    with Mount(cli, ds, tmp_path / "mnt") as m:
        got = _load_all(torch.utils.data.DataLoader(ByPath(str(m.mnt)), batch_size=5,
                                                    num_workers=2))
    want = _load_all(torch.utils.data.DataLoader(ByPath(str(src)), batch_size=5))
    assert sum(len(y) for _, y in got) == 24 and len(got) == len(want)
    for (x, y), (wx, wy) in zip(got, want):
        assert torch.equal(x, wx) and torch.equal(y, wy)
