"""A new user's first hour (issue 37): an ImageFolder tree of real photos with the usual strays,
packed and trained on as the README says — every message, exit code and label checked."""
from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import stoker
from conftest import STOKER, free_port
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
        # The other loaders over the same budget: stoker.Loader, and both through a Mix.
        plain = stoker.Loader(str(tmp_path / "ds"), batch_size=16, shuffle=shuffle,
                              memory_budget=budget)
        assert sum(len(batch) for batch in plain) == len(files)
        mix = stoker.Mix([str(tmp_path / "ds"), str(tmp_path / "ds")], weights=[0.5, 0.5])
        mixed = stoker.ImageLoader(mix, batch_size=16, size=32, threads=2, shuffle=shuffle,
                                   memory_budget=budget)
        assert sum(len(labels) for _, labels, _ in mixed) > 0


def big_tree(root: Path, files: int = 1500, size: int = 24_000) -> None:
    """Enough small chunks (one fsync each) that a pack runs for a while."""
    rng = np.random.default_rng(5)
    for i in range(files):
        d = root / f"c{i % 4}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i:05d}.bin").write_bytes(rng.bytes(size))


def start_pack_and_wait_for_chunks(src: Path, dst: Path, chunks: int = 3) -> subprocess.Popen:
    proc = subprocess.Popen([STOKER, "pack", str(src), str(dst), "--chunk-size", "64KiB",
                             "--threads", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if (dst / "chunks").is_dir() and len(list((dst / "chunks").glob("*.chunk"))) >= chunks:
            return proc
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.002)
    raise AssertionError("the pack wrote no chunks")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_during_pack_removes_what_it_wrote(tmp_path, sig):
    big_tree(tmp_path / "src")
    dst = tmp_path / "ds"
    proc = start_pack_and_wait_for_chunks(tmp_path / "src", dst)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, (out, err)
    name = "SIGINT (Ctrl-C)" if sig == signal.SIGINT else "SIGTERM"
    assert f"stoker pack: Cancelled: interrupted by {name}: nothing published" in err
    assert list((dst / "chunks").glob("*")) == []
    assert list((dst / "gc" / "writers").glob("*")) == []
    # gc knows the never-published directory; a new pack into it works.
    gc = run("gc", str(dst))
    assert "removed 0 version(s) and 0 file(s)" in gc.stdout
    run("pack", str(tmp_path / "src"), str(dst), "-q")
    assert run("verify", str(dst)).returncode == 0


def test_gc_cleans_what_a_killed_pack_left(tmp_path):
    big_tree(tmp_path / "src")
    dst = tmp_path / "ds"
    proc = start_pack_and_wait_for_chunks(tmp_path / "src", dst)
    proc.kill()
    proc.wait()
    left = list((dst / "chunks").glob("*.chunk"))
    [lease] = list((dst / "gc" / "writers").glob("*.lease"))
    assert left
    out = run("gc", str(dst), "--json")
    report = json.loads(out.stdout)
    assert report["writers_gone"][0]["writer"] == lease.stem
    assert report["writers_gone"][0]["process"].startswith(f"pid {proc.pid} on ")
    assert report["files_never_published"] == len(left) and report["files_pending"] == 0
    assert list((dst / "chunks").glob("*")) == [] and not lease.exists()
    # Killed again, then packed anew into the same directory: gc removes the first pack's
    # leftovers at once, without the 24 h grace period (no version was ever removed).
    proc = start_pack_and_wait_for_chunks(tmp_path / "src", dst)
    proc.kill()
    proc.wait()
    orphans = set((dst / "chunks").glob("*.chunk"))
    run("pack", str(tmp_path / "src"), str(dst), "-q")
    out = run("gc", str(dst))
    assert f"removed {len(orphans)} file(s) that no version ever used" in out.stdout
    assert "its process is gone" in out.stdout
    assert not orphans & set((dst / "chunks").glob("*.chunk"))
    assert run("verify", str(dst)).returncode == 0


def test_a_server_restart_does_not_end_training(tmp_path, monkeypatch):
    make = write_photo_tree(tmp_path / "src", 12)
    stoker.pack(str(tmp_path / "src"), str(tmp_path / "ds"), progress=False)
    secret = tmp_path / "secret"
    secret.write_text("a secret for the restart test\n")
    secret.chmod(0o600)
    monkeypatch.setenv("STOKER_SECRET_FILE", str(secret))
    port = free_port()

    def serve() -> subprocess.Popen:
        proc = subprocess.Popen([STOKER, "serve", "--listen", f"127.0.0.1:{port}", "--dataset",
                                 f"photos={tmp_path / 'ds'}", "--secret-file", str(secret)],
                                stderr=subprocess.PIPE, text=True)
        assert "serving 1 dataset(s)" in proc.stderr.readline()
        return proc

    server = serve()
    uri = f"stoker://127.0.0.1:{port}/photos"
    ds = stoker.Dataset(uri)
    paths = sorted(make)
    assert ds[0][0] == make[ds[0][2]]
    server.terminate()
    server.wait()
    # The server is back after a second: the next read waits for it instead of failing.
    restarted: list[subprocess.Popen] = []
    timer = threading.Timer(1.0, lambda: restarted.append(serve()))
    timer.start()
    try:
        start = time.monotonic()
        assert ds[5][0] == make[ds[5][2]]
        assert time.monotonic() - start >= 0.9
        loader = stoker.ImageLoader(uri, batch_size=4, size=32, shuffle="full")
        assert sum(len(labels) for _, labels in loader) == len(paths)
    finally:
        timer.join()
        for proc in restarted:
            proc.terminate()
            proc.wait()
    # Down for good: the error says what was tried, and for how long.
    monkeypatch.setenv("STOKER_RECONNECT_TIMEOUT", "2s")
    start = time.monotonic()
    out = run("cat", uri, paths[0], check=False)
    assert out.returncode == 1
    assert time.monotonic() - start >= 1.9
    assert re.search(r"could not be reached: \d+ tries over 2\.\d s \(tried for up to 2 s: "
                     r"\$STOKER_RECONNECT_TIMEOUT\), the last: .*[Cc]onnection refused",
                     out.stderr), out.stderr


def test_a_fixed_shape_refuses_other_shapes_and_batches_keep_their_type(tmp_path):
    # Issue 37 item 6: an (8,) array among (16,) ones was taken, and that batch became a list.
    with stoker.Writer(tmp_path / "a.stoker", columns={"x": "ndarray:float32:16",
                                                        "v": "ndarray:float32"}) as w:
        for i in range(5):
            w.write({"x": np.full(16, i, np.float32), "v": np.zeros(16 if i else 8, np.float32)})
        with pytest.raises(ValueError, match=r"sample 5: column 'x': shape 8, but the column "
                                             r"holds 16 \(ndarray:float32:16\)"):
            w.write({"x": np.zeros(8, np.float32), "v": np.zeros(8, np.float32)})
    ds = stoker.Dataset(tmp_path / "a.stoker")
    assert ds.columns == {"v": "ndarray:float32", "x": "ndarray:float32:16"}
    assert len(ds) == 5  # the refused sample is not in it
    for batch in stoker.Loader(ds, batch_size=2, shuffle="sequential"):
        assert isinstance(batch["x"], np.ndarray) and batch["x"].shape[1:] == (16,)
        assert isinstance(batch["v"], list)  # any shape: a list in every batch
    for bad in ["ndarray:float32:0", "ndarray:float32:16x", "ndarray:float32:axb",
                "tokens:uint16:16"]:
        with pytest.raises(ValueError, match="column 'x'"):
            stoker.Writer(tmp_path / "b.stoker", columns={"x": bad})
    with stoker.Writer(tmp_path / "c.stoker", columns={"img": "ndarray:uint8:4x4x3"}) as w:
        w.write({"img": np.zeros((4, 4, 3), np.uint8)})
        with pytest.raises(ValueError, match=r"shape 4x3x3, but the column holds 4x4x3"):
            w.write({"img": np.zeros((4, 3, 3), np.uint8)})


def test_json_is_always_one_document_and_messages_are_true(tmp_path):
    stray_tree(tmp_path / "imgs", 6)
    ds = str(tmp_path / "ds")
    run("pack", str(tmp_path / "imgs"), ds, "-q")
    # Errors under --json: one JSON document on stdout, exit codes unchanged.
    for args, code, rc in [(["info", str(tmp_path / "missing"), "--json"], "NotFound", 1),
                           (["pack", str(tmp_path / "imgs"), ds, "x", "--json"], "InvalidArgument", 2),
                           (["pack", str(tmp_path / "imgs"), "y", "--chunk-size", "0", "--json"],
                            "InvalidArgument", 2),
                           (["pack", str(tmp_path / "imgs"), "y", "--chunk-size", "64XB", "--json"],
                            "Usage", 2),
                           (["cat", ds, "c0", "--json"], "InvalidArgument", 1),
                           (["gc", ds, "--grace", "5", "--json"], "InvalidArgument", 2)]:
        out = run(*args, check=False)
        assert out.returncode == rc, (args, out.stderr)
        assert json.loads(out.stdout)["error"]["code"] == code, (args, out.stdout)
    out = run("cat", ds, "c0", check=False)
    assert out.stdout == "" and out.stderr == (
        f"stoker cat: InvalidArgument: c0 is a directory of the dataset, not a file: "
        f"`stoker ls {ds} c0` lists it\n")
    assert "'5' is not a duration" in run("gc", ds, "--grace", "5", check=False).stderr
    # cat --json: the bytes as base64 beside the file's facts.
    import base64
    doc = json.loads(run("cat", ds, "c0/img000.jpg", "--json").stdout)
    assert base64.b64decode(doc["base64"]) == (tmp_path / "imgs" / "c0" / "img000.jpg").read_bytes()
    assert doc["path"] == "c0/img000.jpg" and doc["class"] == "c0"
    # info --json: columns as a dict ({} for files).
    assert json.loads(run("info", ds, "--json").stdout)["columns"] == {}
    # verify --json: corrupt files as {"path", "message"}; the text names each once.
    chunk = next((tmp_path / "ds" / "chunks").glob("*.chunk"))
    data = bytearray(chunk.read_bytes())
    data[len(data) // 3] ^= 0xFF
    chunk.write_bytes(bytes(data))
    out = run("verify", ds, "--json", check=False)
    assert out.returncode == 3
    report = json.loads(out.stdout)
    assert report["corrupt_files"] and all(set(f) == {"path", "message"}
                                           for f in report["corrupt_files"])
    text = run("verify", ds, check=False).stdout
    assert "CORRUPT chunk  chunk " not in text
    assert f"CORRUPT chunk  chunks/{chunk.name}: " in text or "CORRUPT file   " in text
    # A message of several lines keeps its lines (not "\x0a").
    (tmp_path / "imgs2").mkdir()
    out = run("pack", str(tmp_path / "imgs2"), str(tmp_path / "z"), check=False)
    assert "\\x0a" not in out.stderr


def test_versions_say_unknown_rather_than_guess_after_gc(tmp_path):
    stray_tree(tmp_path / "imgs", 6)
    ds = str(tmp_path / "ds")
    run("pack", str(tmp_path / "imgs"), ds, "-q", "--chunk-size", "16KiB")
    more = tmp_path / "more"
    (more / "c9").mkdir(parents=True)
    (more / "c9" / "a.jpg").write_bytes(b"\xff\xd8\xff")
    run("pack", str(more), ds, "--append", "-q")
    run("compact", ds, "--all")
    run("gc", ds, "--keep", "1")
    [v] = json.loads(run("versions", ds, "--json").stdout)
    assert v["files_added"] is None  # a compaction added none; nothing left tells it so
    assert run("versions", ds).stdout.splitlines()[1].split()[5] == "-"


def test_the_first_hour_walkthrough(tmp_path, monkeypatch):
    """The README's quick start, as a new user walks it, on a tree with the usual strays, a
    damaged photo and a Parquet file of images; then Ctrl-C and a server restart."""
    imgs = tmp_path / "imgs"
    files = stray_tree(imgs, 30)
    first = files["c1/img001.jpg"]
    (imgs / "c1" / "damaged.jpg").write_bytes(first[: len(first) // 2])
    ds = str(tmp_path / "photos.stoker")
    # pack: labels from the class directories, the strays said, nothing silent.
    out = run("pack", str(imgs), ds)
    assert re.search(r"packed 32 files .* 32 samples, 3 classes", out.stdout), out.stdout
    assert out.stderr.splitlines() == [
        "stoker pack: left out 1 file beside the class directories (labels come from the "
        "directories; --labels none packs every file): README.txt; left out 4 files as OS "
        "litter or --exclude: .DS_Store, Thumbs.db, __MACOSX, ..."]
    assert "labels     from first-level directories, 3 classes" in run("info", ds).stdout
    assert run("verify", ds).stdout.endswith("checked: OK\n")
    assert run("ls", ds, "c1").stdout.splitlines()[:2] == ["damaged.jpg", "img001.jpg"]
    cat = subprocess.run([STOKER, "cat", ds, "c0/img000.jpg"], capture_output=True)
    assert cat.returncode == 0 and cat.stdout == files["c0/img000.jpg"]
    # Training: every label a class, the README.txt-like file left out and said once, the
    # damaged photo an error naming it (a bad image, not a storage corruption), or skipped.
    with pytest.raises(ValueError, match="c1/damaged.jpg") as raised:
        for _ in stoker.ImageLoader(ds, batch_size=8, size=32, shuffle="sequential"):
            pass
    assert not isinstance(raised.value, stoker.CorruptionError)
    train = stoker.ImageLoader(ds, batch_size=8, size=32, train=True, on_error="skip", seed=0)
    with pytest.warns(UserWarning, match=r"left out 1 file\(s\) .*c1/notes.txt"):
        labels = np.concatenate([lab.numpy() for _, lab in train])
    assert len(labels) == len(files) and set(labels.tolist()) <= {0, 1, 2}
    assert [e[2].split(": ")[1] for e in train.errors] == ["c1/damaged.jpg"]
    # Parquet images: JPEG bytes found by signature, the label column named on the CLI.
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq
    names = sorted(n for n in files if n.endswith(".jpg"))
    table = pa.table({"image": [files[n] for n in names],
                      "y": [int(n[1]) for n in names]})
    pq.write_table(table, tmp_path / "photos.parquet")
    out = run("pack", str(tmp_path / "photos.parquet"), str(tmp_path / "pq.stoker"), "--label",
              "y", "--json")
    assert "Warning" not in out.stderr
    summary = json.loads(out.stdout)
    assert summary["samples"] == len(names) and summary["classes"] == 3
    assert stoker.Dataset(tmp_path / "pq.stoker").columns["image"] == "jpeg?"
    pq_labels = np.concatenate([lab.numpy() for _, lab in stoker.ImageLoader(
        str(tmp_path / "pq.stoker"), batch_size=8, size=32, image="image", label="y")])
    assert sorted(pq_labels.tolist()) == sorted(int(n[1]) for n in names)
    # JPEGs and PNGs mixed stay bytes, which ImageLoader decodes by signature when named.
    mixed = pa.table({"image": [files[n] for n in sorted(files)]})
    pq.write_table(mixed, tmp_path / "mixed.parquet")
    run("pack", str(tmp_path / "mixed.parquet"), str(tmp_path / "mixed.stoker"), "-q")
    assert stoker.Dataset(tmp_path / "mixed.stoker").columns == {"image": "bytes?"}
    assert sum(len(lab) for _, lab in stoker.ImageLoader(
        str(tmp_path / "mixed.stoker"), batch_size=8, size=32, image="image")) == len(files)
    # Ctrl-C during a big pack: exit 130, nothing published, nothing left behind.
    big_tree(tmp_path / "big", files=800)
    proc = start_pack_and_wait_for_chunks(tmp_path / "big", tmp_path / "big.stoker")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted by SIGINT (Ctrl-C): nothing published" in err
    assert list((tmp_path / "big.stoker" / "chunks").iterdir()) == []
    # Served to another machine: a server restart does not end the epoch.
    secret = tmp_path / "secret"
    secret.write_text("the first hour of a new user\n")
    secret.chmod(0o600)
    monkeypatch.setenv("STOKER_SECRET_FILE", str(secret))
    port = free_port()
    argv = [STOKER, "serve", "--listen", f"127.0.0.1:{port}", "--dataset", f"photos={ds}",
            "--secret-file", str(secret)]
    server = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    assert "serving 1 dataset(s)" in server.stderr.readline()
    # A small budget: the loader reads in pieces through the epoch, not all at its start.
    remote = stoker.ImageLoader(f"stoker://127.0.0.1:{port}/photos", batch_size=4, size=32,
                                on_error="skip", shuffle="full", memory_budget="64KiB")
    seen = 0
    try:
        for i, (_, lab) in enumerate(remote):
            seen += len(lab)
            if i == 1:  # mid-epoch: the server goes away and comes back a second later
                server.terminate()
                server.wait()
                time.sleep(1)
                server = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
                assert "serving 1 dataset(s)" in server.stderr.readline()
    finally:
        server.terminate()
        server.wait()
    assert seen == len(files)


def test_ctrl_c_in_python_pack_raises_keyboard_interrupt_and_leaves_nothing(tmp_path):
    big_tree(tmp_path / "src", files=1500)
    dst = tmp_path / "ds"
    script = ("import stoker, sys\n"
              "try:\n"
              f"    stoker.pack({str(tmp_path / 'src')!r}, {str(dst)!r}, chunk_size='64KiB',"
              " threads=1, progress=False)\n"
              "except KeyboardInterrupt:\n"
              "    print('KeyboardInterrupt'); sys.exit(7)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not ((dst / "chunks").is_dir() and len(list((dst / "chunks").glob("*.chunk"))) >= 3):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.002)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 7 and out == "KeyboardInterrupt\n", (out, err)
    assert list((dst / "chunks").glob("*")) == []
    assert list((dst / "gc" / "writers").glob("*")) == []
