"""Writers over stoker:// (`stoker serve --writable`, docs/protocol.md "Writes"): a first pack into an
empty exported directory, several `pack --append` at once with some SIGKILLed mid-upload, then
`stoker compact` and `stoker gc` — all through the server. Every writer that exits 0 has all of
its files in the dataset, a killed one all or none; the dataset verifies, locally and remotely;
gc removes exactly the killed writers' leftovers (their uploads included). A read-only server
refuses writes with a message that names --writable."""
from __future__ import annotations

import json
import random
import re
import signal
import subprocess
import time

import pytest

import stoker
from conftest import dataset_contents, make_tree

SECRET = "a shared secret for the write tests"


@pytest.fixture
def writable(tmp_path, stoker_exe, monkeypatch):
    """(uri, local directory) of an empty dataset exported by a --writable server."""
    secret = tmp_path / "secret"
    secret.write_text(SECRET + "\n")
    secret.chmod(0o600)
    local = tmp_path / "exported" / "ds"
    proc = subprocess.Popen([stoker_exe, "serve", "--listen", "127.0.0.1:0", "--writable",
                             "--dataset", f"ds={local}", "--secret-file", str(secret)],
                            stderr=subprocess.PIPE, text=True)
    m = re.match(r"serving 1 dataset\(s\) on 127\.0\.0\.1:(\d+)", proc.stderr.readline())
    assert m
    monkeypatch.setenv("STOKER_SECRET_FILE", str(secret))
    yield f"stoker://127.0.0.1:{m.group(1)}/ds", local
    proc.kill()
    proc.wait()


def test_writers_over_the_network_land_or_leave_nothing(tmp_path, stoker_cli, stoker_exe,
                                                       writable):
    uri, local = writable
    base = make_tree(tmp_path / "base", seed=5, classes=2, files_per_class=10)
    stoker_cli("pack", "-q", "--chunk-size", "64KiB", tmp_path / "base", uri, check=True)
    rng = random.Random(13)
    expected = dict(base)
    maybe = []
    trees, procs = [], []
    for w in range(6):
        src = tmp_path / f"w{w}"
        # Big enough (several MiB) that a kill can land in the middle of an upload.
        trees.append(make_tree(src, seed=100 + w, classes=1, files_per_class=30,
                               min_size=100_000, max_size=300_000, prefix=f"w{w}-"))
        procs.append(subprocess.Popen([stoker_exe, "pack", "-q", "--append", "--chunk-size",
                                       "1MiB", str(src), uri], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    killed = set(rng.sample(range(6), 2))
    for w in sorted(killed):
        time.sleep(rng.uniform(0.05, 0.3))
        procs[w].send_signal(signal.SIGKILL)
    for w, proc in enumerate(procs):
        _, err = proc.communicate(timeout=300)
        if w in killed and proc.returncode == -signal.SIGKILL:
            maybe.append(trees[w])
            continue
        assert proc.returncode == 0, f"writer {w}: {err}"
        expected.update(trees[w])

    contents = dataset_contents(stoker.Dataset(uri))
    for path, data in expected.items():
        assert contents.get(path) == data, path
    for tree in maybe:
        present = [p for p in tree if p in contents]
        assert len(present) in (0, len(tree)), "a killed writer is partly published"
    assert dataset_contents(stoker.Dataset(str(local))) == contents

    out = json.loads(stoker_cli("compact", uri, "--all", "--json", check=True).stdout)
    assert out["segments_after"] == 1
    assert dataset_contents(stoker.Dataset(uri)) == contents
    assert stoker_cli("verify", uri).returncode == 0

    # gc over the wire: old versions and the killed writers' chunks, uploads and leases go
    # (no writer runs now: --writer-timeout 0s).
    stoker_cli("gc", uri, "--keep", "1", "--grace", "0s", "--writer-timeout", "0s", check=True)
    gc = json.loads(stoker_cli("gc", uri, "--keep", "1", "--grace", "0s", "--writer-timeout",
                               "0s", "--json", check=True).stdout)
    assert not list((local / "gc" / "writers").iterdir())
    assert gc["files_pending"] == 0
    leftovers = [p.name for d in ("chunks", "segments") for p in (local / d).iterdir()
                 if ".tmp-" in p.name]
    assert leftovers == []
    assert stoker_cli("verify", local).returncode == 0
    assert dataset_contents(stoker.Dataset(uri)) == contents


def test_a_read_only_server_refuses_writes(tmp_path, stoker_cli, stoker_exe, monkeypatch):
    make_tree(tmp_path / "src", seed=1, classes=1, files_per_class=3)
    stoker_cli("pack", "-q", tmp_path / "src", tmp_path / "ds", check=True)
    secret = tmp_path / "secret"
    secret.write_text(SECRET + "\n")
    secret.chmod(0o600)
    proc = subprocess.Popen([stoker_exe, "serve", "--listen", "127.0.0.1:0", "--dataset",
                             f"ds={tmp_path / 'ds'}", "--secret-file", str(secret)],
                            stderr=subprocess.PIPE, text=True)
    try:
        port = re.search(r":(\d+)$", proc.stderr.readline().strip()).group(1)
        monkeypatch.setenv("STOKER_SECRET_FILE", str(secret))
        out = stoker_cli("pack", "-q", "--append", tmp_path / "src", f"stoker://127.0.0.1:{port}/ds")
        assert out.returncode != 0
        assert "--writable" in out.stderr
        assert stoker.Dataset(str(tmp_path / "ds")).version == 1
    finally:
        proc.kill()
        proc.wait()


def test_a_root_serves_datasets_made_after_the_server_started(tmp_path, stoker_cli, stoker_exe,
                                                               monkeypatch):
    """`serve --root` finds a dataset when first asked for: one packed into the root after the
    server started (read-only), and, --writable, a first pack over stoker:// to a new name,
    which creates it (a fresh cluster's first pack, docs/kubernetes.md). A name that holds no
    dataset, or is a symbolic link, is not served."""
    tree = make_tree(tmp_path / "src", seed=3, classes=2, files_per_class=4)
    root = tmp_path / "root"
    root.mkdir()
    (root / "not-a-dataset").mkdir()
    (root / "elsewhere").symlink_to(tmp_path)
    secret = tmp_path / "secret"
    secret.write_text(SECRET + "\n")
    secret.chmod(0o600)
    monkeypatch.setenv("STOKER_SECRET_FILE", str(secret))
    for writable in (False, True):
        proc = subprocess.Popen([stoker_exe, "serve", "--listen", "127.0.0.1:0", "--root",
                                 str(root), "--secret-file", str(secret),
                                 *(["--writable"] if writable else [])],
                                stderr=subprocess.PIPE, text=True)
        try:
            line = proc.stderr.readline()
            assert f"(and any new under {root})" in line, line
            port = re.search(r":(\d+)", line.split(" on ")[1])[1]
            base = f"stoker://127.0.0.1:{port}"
            name = "pushed" if writable else "local"
            if writable:  # packed through the server
                stoker_cli("pack", "-q", tmp_path / "src", f"{base}/{name}", check=True)
            else:  # packed beside it, into the root
                stoker_cli("pack", "-q", tmp_path / "src", root / name, check=True)
            assert dataset_contents(stoker.Dataset(f"{base}/{name}")) == tree
            assert (root / name / "versions").is_dir()
            for missing, says in (("not-a-dataset", "not a stoker dataset"),
                                  ("elsewhere", "symbolic link")):
                r = stoker_cli("info", f"{base}/{missing}")
                assert r.returncode != 0 and says in r.stderr, r.stderr
            assert not (root / "elsewhere" / "versions").exists()
        finally:
            proc.kill()
            proc.wait()
