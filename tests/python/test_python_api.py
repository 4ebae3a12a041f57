"""The Python API (stoker.Dataset, stoker.pack, stoker.verify) against generated trees."""
from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

import stoker
from conftest import chunk_files, dataset_contents, make_tree, metadata_files, write_tar


def class_of(path: str) -> str:
    return path.split("/", 1)[0]


@pytest.fixture
def packed(tmp_path, tree):
    src, files = tree
    dst = tmp_path / "ds"
    summary = stoker.pack(str(src), str(dst), chunk_size="64KiB")
    return dst, files, summary


def flip_byte_of(dataset: Path, ds: stoker.Dataset, path: str) -> None:
    st = ds.stat(path)
    chunk = dataset / "chunks" / f"{st['chunk']:016x}.chunk"
    with open(chunk, "r+b") as f:
        f.seek(st["offset"] + st["size"] // 2)
        b = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([b[0] ^ 0x40]))


def test_round_trip(packed):
    dst, files, summary = packed
    assert summary["version"] == 1
    assert summary["files"] == summary["files_added"] == len(files)
    assert summary["bytes"] == sum(map(len, files.values()))
    assert summary["chunks"] > 1  # small chunks: the data spans several chunk files
    ds = stoker.Dataset(str(dst))
    classes = sorted({class_of(p) for p in files})
    assert ds.version == 1
    assert ds.classes == classes
    assert len(ds) == ds.num_files == ds.num_samples == len(files)
    assert not ds.grouped
    seen = {}
    for i in range(len(ds)):
        data, label, path = ds[i]
        assert label == classes.index(class_of(path))
        assert ds.find(path) == i
        assert ds.read(path) == ds.read(i) == data
        assert bytes(ds.read_buffer(path)) == data
        st = ds.stat(i)
        assert (st["path"], st["size"], st["index"], st["label"]) == (path, len(data), i, label)
        assert st["class"] == class_of(path)
        assert st == ds.stat(path)
        seen[path] = data
    assert seen == files
    # Negative indices count from the end, like a list.
    assert ds[-1] == ds[len(ds) - 1]
    assert ds[-len(ds)] == ds[0]
    assert ds.read(-1) == ds.read(ds.num_files - 1)


def test_paths_may_be_pathlike_or_bytes(tmp_path, tree):
    """Every path argument takes str, bytes or os.PathLike, as Python's own file APIs do."""
    src, files = tree
    summary = stoker.pack(Path(src), tmp_path / "ds")
    assert summary["files"] == len(files)
    assert stoker.pack([os.fsencode(src)], os.fsencode(tmp_path / "b"))["files"] == len(files)
    for uri in (tmp_path / "ds", os.fsencode(tmp_path / "ds"), str(tmp_path / "ds")):
        ds = stoker.Dataset(uri)
        assert ds.num_files == len(files) and ds.uri == str(tmp_path / "ds")
    assert stoker.verify(tmp_path / "b")["ok"]
    with pytest.raises(TypeError):
        stoker.Dataset(42)
    # A file:// URI is percent-encoded, as Path.as_uri() writes it.
    odd = tmp_path / "with space é%.stoker"
    stoker.pack(Path(src), odd)
    assert stoker.Dataset(odd.as_uri()).num_files == len(files)
    # Versions count from 1: 0 is a mistake, not "the newest".
    with pytest.raises(ValueError, match="version=0: versions count from 1"):
        stoker.Dataset(tmp_path / "ds", version=0)


def test_listdir(packed):
    dst, files, _ = packed
    ds = stoker.Dataset(str(dst))
    assert ds.listdir() == sorted({class_of(p) for p in files})
    expected = sorted(p.split("/")[1] for p in files
                      if p.startswith("class00/") and p.count("/") == 1)
    assert ds.listdir("class00") == ["nested"] + expected
    assert ds.listdir("class00/nested") == sorted(
        p.rsplit("/", 1)[1] for p in files if p.startswith("class00/nested/"))


def test_read_buffer_is_zero_copy_view(packed):
    dst, files, _ = packed
    ds = stoker.Dataset(str(dst))
    path = max(files, key=lambda p: len(files[p]))
    view = ds.read_buffer(path)
    assert isinstance(view, memoryview)
    assert view.readonly and view.nbytes == len(files[path])
    del ds  # the view owns its buffer, not the dataset
    np = pytest.importorskip("numpy")
    arr = np.frombuffer(view, dtype=np.uint8)
    assert arr.tobytes() == files[path]


def test_labels_none(tmp_path, tree):
    src, files = tree
    stoker.pack(str(src), str(tmp_path / "ds"), labels="none")
    ds = stoker.Dataset(str(tmp_path / "ds"))
    assert ds.classes == []
    assert {ds[i][1] for i in range(len(ds))} == {-1}
    assert ds.stat(0)["class"] is None


def test_tar_shards_group_samples(tmp_path):
    shard0 = {"s/a.jpg": b"A" * 100, "s/a.cls": b"3\n", "s/a.meta.json": b"{}",
              "s/b.jpg": b"B" * 50, "s/b.cls": b"1"}
    shard1 = {"s/c.jpg": b"C" * 7, "s/c.cls": b"0"}
    write_tar(tmp_path / "0.tar", shard0)
    write_tar(tmp_path / "1.tar", shard1)
    summary = stoker.pack([str(tmp_path / "0.tar"), str(tmp_path / "1.tar")], str(tmp_path / "ds"))
    assert summary["samples"] == 3 and summary["files"] == 7
    ds = stoker.Dataset(str(tmp_path / "ds"))
    assert ds.grouped and len(ds) == 3 and ds.num_files == 7
    samples = {key: (members, label) for members, label, key in (ds[i] for i in range(len(ds)))}
    assert samples == {
        "s/a": ({"jpg": b"A" * 100, "cls": b"3\n", "meta.json": b"{}"}, 3),
        "s/b": ({"jpg": b"B" * 50, "cls": b"1"}, 1),
        "s/c": ({"jpg": b"C" * 7, "cls": b"0"}, 0),
    }
    assert sorted(ds.sample_files(0)) == sorted(f"s/a.{e}" for e in ("jpg", "cls", "meta.json"))


def test_append_adds_version(tmp_path, packed):
    dst, files, _ = packed
    before = chunk_files(dst)
    src2 = tmp_path / "src2"
    more = make_tree(src2, seed=99, classes=4, files_per_class=5, prefix="new-")
    summary = stoker.pack(str(src2), str(dst), chunk_size=65536, append=True)
    assert summary["version"] == 2 and summary["files_added"] == len(more)
    ds = stoker.Dataset(str(dst))
    assert ds.version == 2
    assert dataset_contents(ds) == {**files, **more}
    after = chunk_files(dst)
    assert {k: after[k] for k in before} == before  # old chunks untouched
    assert stoker.verify(str(dst))["ok"]


def test_errors(tmp_path, packed):
    dst, files, _ = packed
    ds = stoker.Dataset(str(dst))
    n = len(ds)
    for bad in (n, -n - 1, 2**40):
        with pytest.raises(IndexError):
            ds[bad]
    with pytest.raises(IndexError):
        ds.read(ds.num_files)
    with pytest.raises(FileNotFoundError, match="no/such.jpg"):
        ds.find("no/such.jpg")
    with pytest.raises(FileNotFoundError):
        ds.read("no/such.jpg")
    with pytest.raises(FileNotFoundError):
        ds.listdir("no-such-dir")
    with pytest.raises(ValueError, match="not a directory"):
        ds.listdir(next(iter(files)))
    with pytest.raises(FileNotFoundError, match=r"is not a stoker dataset \(no versions/\)"):
        stoker.Dataset(str(tmp_path / "nothing-here"))
    with pytest.raises(FileNotFoundError, match="no version 2"):
        stoker.Dataset(str(dst), version=2)
    with pytest.raises(FileExistsError, match="already holds a dataset"):
        stoker.pack(str(tmp_path / "src"), str(dst))
    with pytest.raises(ValueError, match="chunk_size"):
        stoker.pack(str(tmp_path / "src"), str(tmp_path / "x"), chunk_size="lots")
    with pytest.raises(ValueError, match="labels"):
        stoker.pack(str(tmp_path / "src"), str(tmp_path / "x"), labels="maybe")
    with pytest.raises(FileNotFoundError):
        stoker.verify(str(tmp_path / "nothing-here"))


def test_hostile_source_is_value_error(tmp_path, tree):
    src, _ = tree
    outside = tmp_path / "secret"
    outside.write_bytes(b"x")
    (src / "class00" / "link.jpg").symlink_to(outside)
    with pytest.raises(ValueError, match="link.jpg"):
        stoker.pack(str(src), str(tmp_path / "ds"))
    assert metadata_files(tmp_path / "ds") == {"versions": {}, "segments": {}}
    assert chunk_files(tmp_path / "ds") == {}


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores file permissions")
def test_permission_error(packed):
    dst, _, _ = packed
    ds = stoker.Dataset(str(dst))
    for chunk in (dst / "chunks").iterdir():
        chunk.chmod(0)
    with pytest.raises(PermissionError):
        ds.read(0)


def test_corruption_error(packed):
    dst, files, _ = packed
    ds = stoker.Dataset(str(dst))
    victim = next(p for p, d in files.items() if len(d) > 100)
    flip_byte_of(dst, ds, victim)
    fresh = stoker.Dataset(str(dst))
    with pytest.raises(stoker.CorruptionError, match=victim) as info:
        fresh.read(victim)
    assert isinstance(info.value, OSError)
    assert info.value.code == "Corruption"
    with pytest.raises(stoker.CorruptionError):
        fresh[fresh.find(victim)]
    with pytest.raises(stoker.CorruptionError):
        fresh.read_buffer(victim)
    # Other files still read fine; verify names the victim.
    other = next(p for p in files if p != victim)
    assert fresh.read(other) == files[other]
    report = stoker.verify(str(dst))
    assert not report["ok"]
    assert any(victim == f["path"] for f in report["corrupt_files"])


def test_indices_of_any_size_are_index_errors(packed):
    dst, _, _ = packed
    ds = stoker.Dataset(str(dst))
    for bad in (2**63, -2**70, len(ds)):
        with pytest.raises(IndexError, match=f"sample index {bad} out of range"):
            ds[bad]
        with pytest.raises(IndexError, match="out of range"):
            ds.sample_files(bad)
    with pytest.raises(IndexError, match=f"file index {2**70} out of range"):
        ds.read(2**70)
    assert ds[np.int64(1)] == ds[1] and ds[-1] == ds[len(ds) - 1]
    with pytest.raises(TypeError):
        ds["not an index"]


def test_a_truncated_chunk_is_reported_by_the_file_read(packed):
    """Every way of reading a file names it when its chunk is shorter than the metadata says
    (ds[i] too, which checks the chunk before it sizes the buffer)."""
    dst, files, _ = packed
    ds = stoker.Dataset(str(dst))
    victim = next(p for p, d in files.items() if len(d) > 100)
    chunk = dst / "chunks" / f"{ds.stat(victim)['chunk']:016x}.chunk"
    size = chunk.stat().st_size
    with open(chunk, "r+b") as f:
        f.truncate(size // 2)
    fresh = stoker.Dataset(str(dst))
    for read in (lambda: fresh.read(victim), lambda: fresh[fresh.find(victim)],
                 lambda: fresh.read_buffer(victim)):
        with pytest.raises(stoker.CorruptionError, match=f"reading {victim}"):
            read()


def test_pickle_reopens_lazily(tmp_path, packed):
    dst, files, _ = packed
    ds = stoker.Dataset(str(dst))
    clone = pickle.loads(pickle.dumps(ds))
    assert clone.version == 1 and clone.uri == str(dst)
    assert [clone[i] for i in range(len(clone))] == [ds[i] for i in range(len(ds))]
    # A copy pickled before a new version was published reopens its own version (every
    # version stays readable): same length, same samples at the same indices.
    stale = pickle.dumps(ds)
    src2 = tmp_path / "src2"
    more = make_tree(src2, seed=5, classes=1, files_per_class=3, prefix="later-")
    stoker.pack(str(src2), str(dst), append=True)
    assert stoker.Dataset(str(dst)).version == 2
    assert len(stoker.Dataset(str(dst))) == len(files) + len(more)
    old = pickle.loads(stale)
    assert len(old) == len(files) and old.version == 1
    assert [old[i] for i in range(len(old))] == [ds[i] for i in range(len(ds))]
    with pytest.raises(FileNotFoundError):
        old.find(next(iter(more)))
    # Pickling it again keeps version 1; a Dataset opened now (and its pickles) sees version 2.
    assert pickle.loads(pickle.dumps(old)).version == 1
    fresh = pickle.loads(pickle.dumps(stoker.Dataset(str(dst))))
    assert fresh.version == 2 and len(fresh) == len(files) + len(more)
    assert ds.version == 1 and ds[0] == clone[0]  # open objects keep their version


def test_concurrent_reads(packed):
    dst, files, _ = packed
    ds = stoker.Dataset(str(dst))
    paths = sorted(files)
    errors = []

    def reader(offset):
        try:
            for k in range(len(paths)):
                p = paths[(k + offset) % len(paths)]
                assert ds.read(p) == files[p]
        except Exception as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=reader, args=(t * 7,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


GIL_PROBE = textwrap.dedent("""
    import errno, os, sys, threading, time
    import stoker
    dataset, chunk_fifo, dst2, record_fifo, src, index = sys.argv[1:]
    results = {}
    def run(name, fn):
        try:
            fn()
            results[name] = "ok"
        except Exception as e:
            results[name] = type(e).__name__
    # Both calls block in open() on a FIFO until its write end is opened: the reader in ds.read
    # (a chunk file replaced by a FIFO), the writer in pack (which first reads the newest
    # version record of its destination, here a FIFO). This thread opens each write end only
    # once the call is blocked on it: if either call held the GIL while it waits, this thread
    # could never run again, and the probe hangs.
    a = threading.Thread(target=run, args=("read", lambda: stoker.Dataset(dataset).read(int(index))))
    b = threading.Thread(target=run, args=("pack", lambda: stoker.pack(src, dst2)))
    a.start(); b.start()
    time.sleep(0.2)
    for fifo in (chunk_fifo, record_fifo):
        deadline = time.monotonic() + 30
        while True:
            try:  # succeeds only while a reader has the FIFO open, i.e. is blocked opening it
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
                break
            except OSError as e:
                if e.errno != errno.ENXIO or time.monotonic() > deadline:
                    print("never-opened", fifo)
                    os._exit(1)
            time.sleep(0.01)
    a.join(); b.join()
    print(results["read"], results["pack"])
""")


def test_gil_released_while_blocked(tmp_path, packed):
    dst, files, _ = packed
    ds = stoker.Dataset(str(dst))
    index = len(ds) // 2
    chunk_fifo = dst / "chunks" / f"{ds.stat(index)['chunk']:016x}.chunk"
    chunk_fifo.unlink()
    os.mkfifo(chunk_fifo)
    # A destination whose newest version record is a FIFO: pack reads it to refuse packing
    # into an existing dataset. (Chunk and segment names are random: a pack cannot be made
    # to write into a FIFO prepared in advance.)
    dst2 = tmp_path / "ds2"
    record_fifo = dst2 / "versions" / f"{1:016x}.version"
    record_fifo.parent.mkdir(parents=True)
    os.mkfifo(record_fifo)
    proc = subprocess.run(
        [sys.executable, "-c", GIL_PROBE, str(dst), str(chunk_fifo), str(dst2), str(record_fifo),
         str(tmp_path / "src"), str(index)],
        capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # Both fail (a FIFO is neither a chunk file nor a version record), but both returned:
    # neither held the GIL while blocked.
    read_result, pack_result = proc.stdout.split()
    assert read_result == pack_result == "CorruptionError", proc.stdout
    assert os.listdir(dst2 / "versions") == [record_fifo.name]
    assert chunk_files(dst2) == {} and not (dst2 / "segments").exists()


def _bytes_read_by_this_process() -> int:
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))


def test_opening_reads_a_small_part_of_the_metadata_and_loaders_read_the_rest(tmp_path):
    """stoker.Dataset reads the index sections, not every file's location (32 bytes per file
    in memory): one lookup on a big dataset costs a block or two. The loaders read every
    location when they start. (Byte counts of this process's reads, not times.)"""
    src = tmp_path / "src"
    for c in range(20):
        (src / f"c{c:02d}").mkdir(parents=True)
        for i in range(1000):
            (src / f"c{c:02d}" / f"f{i:05d}.bin").write_bytes(b"%05d" % i)
    dst = tmp_path / "ds"
    stoker.pack(str(src), str(dst))
    metadata = sum(p.stat().st_size for p in (dst / "segments").iterdir())
    before = _bytes_read_by_this_process()
    ds = stoker.Dataset(str(dst))
    assert ds.read("c07/f00123.bin") == b"00123"
    assert ds.stat("c19/f00999.bin")["size"] == 5
    looked_up = _bytes_read_by_this_process() - before
    assert looked_up < metadata / 10, (looked_up, metadata)
    before = _bytes_read_by_this_process()
    batch = next(iter(stoker.Loader(ds, batch_size=4, seed=1)))
    assert len(batch) == 4
    assert _bytes_read_by_this_process() - before > metadata / 3
