"""Power loss on a real file system: the kernel's view is lost, not just the writer.

`kill -9` (test_crash.py) keeps the page cache, so a missing fsync passes it. Here the dataset
lives on ext4 in an image file on a loop device, mounted with `commit=600` (the journal commits
only when someone syncs). A pack --append, a compact or a gc runs on it, is SIGKILLed at a
random moment (or finishes), and at once the image file is copied: the copy holds exactly what
ext4 had sent to its block device — what fsync made durable, and no dirty page still in the
kernel — as a disk does when the power goes. The copy is then recovered (e2fsck replays the
journal) and mounted, and the dataset must read as the previous version or, whole, as the new
one; `stoker verify` finds nothing wrong and gc and a new pack carry on.

What stands in for a device that loses its volatile cache (dm-flakey, dm-log-writes): a loop
device has no write cache of its own, so this covers the file system's and the kernel's
ordering, not a disk's; docs/architecture.md says so. The in-process model of every crash
point (src/dataset/power_loss_test.cc) covers the orderings one run cannot reach.

Needs root, /dev/loop-control, mkfs.ext4 and e2fsck; skips without them (the CI runs as root).
"""
from __future__ import annotations

import gc
import json
import os
import random
import shutil
import signal
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

import stoker
from conftest import dataset_contents, make_tree

pytestmark = [pytest.mark.slow, pytest.mark.system]

IMAGE_MB = 192
CHUNK = "64KiB"  # many chunks, one fsync each: a kill lands in the middle of the work


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root (losetup, mount)"
    if not os.path.exists("/dev/loop-control"):
        return "no /dev/loop-control"
    for tool in ("losetup", "mkfs.ext4", "e2fsck", "mount", "umount"):
        if shutil.which(tool) is None:
            return f"{tool} not found"
    return None


@contextmanager
def mounted(image: Path, at: Path, options: str):
    loop = subprocess.run(["losetup", "--find", "--show", str(image)], check=True,
                          capture_output=True, text=True).stdout.strip()
    try:
        at.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "ext4", "-o", options, loop, str(at)], check=True)
        try:
            yield at
        finally:
            gc.collect()  # datasets opened on it hold their files open
            if subprocess.run(["umount", str(at)]).returncode != 0:
                subprocess.run(["umount", "--lazy", str(at)], check=True)
    finally:
        subprocess.run(["losetup", "-d", loop], check=True)


def recovered_copy(image: Path, copy: Path) -> None:
    """The image as the disk holds it now (the kernel's dirty pages left out), after the
    journal replay that a mount after a power loss does."""
    shutil.copyfile(image, copy)  # reads the backing file: what ext4 wrote to the loop device
    fsck = subprocess.run(["e2fsck", "-fy", str(copy)], capture_output=True, text=True)
    assert fsck.returncode in (0, 1), f"e2fsck: {fsck.returncode}\n{fsck.stdout}{fsck.stderr}"


@pytest.fixture(scope="module")
def batches(tmp_path_factory):
    if reason := _missing():
        if os.environ.get("STOKER_REQUIRE_LOOP", "") not in ("", "0"):
            pytest.fail(f"STOKER_REQUIRE_LOOP is set but: {reason}")
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("power")
    trees = {}
    for b in range(3):
        trees[b] = make_tree(root / f"b{b}", seed=900 + b, classes=4, files_per_class=150,
                             min_size=2000, max_size=30_000, prefix=f"b{b}-")
    return root, trees


def _expected(trees: dict[int, dict[str, bytes]], upto: int) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for b in range(upto + 1):
        out.update(trees[b])
    return out


def _kill_after(proc: subprocess.Popen, delay: float) -> None:
    deadline = time.monotonic() + delay
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.002)
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)


# (name, command after the setup, versions before, version after)
OPERATIONS = {
    "append": ("pack --append", 1, 2),
    "compact": ("compact --all", 2, 3),
    "gc": ("gc --keep 1 --grace 0s", 3, 3),
}


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_power_loss_leaves_a_whole_version(batches, tmp_path, stoker_exe, operation):
    root, trees = batches
    rng = random.Random(f"power-{operation}")
    what, before_version, after_version = OPERATIONS[operation]
    # Kill points from a fixed seed (the run's own timing varies); the last run is not killed.
    delays = [rng.uniform(0.0, 1.2) for _ in range(5)] + [None]
    for run, delay in enumerate(delays):
        # New files each run: a loop device reattached to a rewritten image may serve blocks
        # it cached from the previous one.
        for old in tmp_path.glob("*.img"):
            old.unlink()
        image, after = tmp_path / f"disk-{run}.img", tmp_path / f"after-{run}.img"
        with open(image, "wb") as f:
            f.truncate(IMAGE_MB << 20)
        subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True)
        mnt, copy_at = tmp_path / "mnt", tmp_path / "copy"
        with mounted(image, mnt, "commit=600") as m:
            ds = m / "ds"
            # The setup, made durable whole: version 1 (and 2 for compact and gc).
            subprocess.run([stoker_exe, "pack", "-q", "--chunk-size", CHUNK,
                            str(root / "b0"), str(ds)], check=True)
            if operation != "append":
                subprocess.run([stoker_exe, "pack", "-q", "--append", "--chunk-size", CHUNK,
                                str(root / "b1"), str(ds)], check=True)
            if operation == "gc":
                subprocess.run([stoker_exe, "compact", "--all", str(ds)], check=True,
                               stdout=subprocess.DEVNULL)
            subprocess.run(["sync", "-f", str(ds)], check=True)
            upto = 0 if operation == "append" else 1
            want_before = _expected(trees, upto)
            want_after = _expected(trees, upto + 1) if operation == "append" else want_before

            if operation == "append":
                argv = [stoker_exe, "pack", "-q", "--append", "--chunk-size", CHUNK,
                        str(root / "b1"), str(ds)]
            elif operation == "compact":
                argv = [stoker_exe, "compact", "--all", str(ds)]
            else:
                argv = [stoker_exe, "gc", "--keep", "1", "--grace", "0s", str(ds)]
            proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            if delay is None:
                assert proc.wait(timeout=120) == 0, proc.stderr.read().decode()
            else:
                _kill_after(proc, delay)
            # The power goes now: what the disk holds is what the copy holds.
            recovered_copy(image, after)
        label = f"{operation} run {run} (killed after {delay:.3f} s)" if delay is not None \
            else f"{operation} run {run} (finished)"
        with mounted(after, copy_at, "rw") as m:
            ds = m / "ds"
            newest = stoker.Dataset(str(ds)).version
            assert newest in (before_version, after_version), label
            if delay is None:
                assert newest == after_version, f"{label}: a finished {what} was not durable"
            want = want_after if newest == after_version else want_before
            assert dataset_contents(stoker.Dataset(str(ds))) == want, label
            # Every version still listed reads whole: no record outlived a file it names.
            listed = json.loads(subprocess.run([stoker_exe, "versions", "--json", str(ds)],
                                               check=True, capture_output=True,
                                               text=True).stdout)
            for v in listed:
                old = stoker.Dataset(str(ds), version=v["version"])
                assert len(dataset_contents(old)) == old.num_files, label
            verify = subprocess.run([stoker_exe, "verify", str(ds)], capture_output=True,
                                    text=True)
            assert verify.returncode == 0, f"{label}: {verify.stdout}{verify.stderr}"
            # gc and a new writer carry on.
            subprocess.run([stoker_exe, "gc", "--grace", "0s", "--writer-timeout", "0s", str(ds)],
                           check=True, stdout=subprocess.DEVNULL)
            subprocess.run([stoker_exe, "pack", "-q", "--append", "--chunk-size", CHUNK,
                            str(root / "b2"), str(ds)], check=True)
            assert dataset_contents(stoker.Dataset(str(ds))) == {**want, **trees[2]}, label
