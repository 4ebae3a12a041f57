"""File names that are bytes, not text (issue 14, item 1): names that are not UTF-8 (scraped
data, Latin-1 archives) and names with control characters pack, list, read and print without
loss and without harm. Python gets them as os.fsdecode gives them (surrogateescape), JSON
output as the same escapes (\\udcNN), people as \\xNN."""
from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest

import stoker

LATIN1_CLASS = b"caf\xe9"                  # a class directory named in Latin-1
LATIN1_FILE = b"na\xefve-\xff.jpg"         # two bytes that are not UTF-8
ESC_FILE = b"evil\x1b[2J\x1b]0;pwned\x07.txt"  # clears a terminal and sets its title
FILES = {
    LATIN1_CLASS + b"/" + LATIN1_FILE: b"latin-1 bytes",
    LATIN1_CLASS + b"/" + ESC_FILE: b"escape sequence",
    b"plain/ok.txt": b"plain",
}


@pytest.fixture
def bytes_named(tmp_path: Path, stoker_cli) -> Path:
    src = os.fsencode(tmp_path / "src")
    for rel, data in FILES.items():
        path = os.path.join(src, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    dst = tmp_path / "ds"
    stoker_cli("pack", tmp_path / "src", dst, "--chunk-size", "4KiB", check=True)
    return dst


def test_json_keeps_every_byte_of_every_name(bytes_named, stoker_cli):
    proc = stoker_cli("ls", "--json", bytes_named, os.fsdecode(LATIN1_CLASS), binary=True)
    assert proc.returncode == 0, proc.stderr
    names = {os.fsencode(e["name"]) for e in json.loads(proc.stdout)}
    assert names == {LATIN1_FILE, ESC_FILE}
    for rel in FILES:
        proc = stoker_cli("stat", "--json", bytes_named, os.fsdecode(rel), binary=True)
        assert proc.returncode == 0, proc.stderr
        info = json.loads(proc.stdout)
        assert os.fsencode(info["path"]) == rel
        if rel.startswith(LATIN1_CLASS):
            assert os.fsencode(info["class"]) == LATIN1_CLASS


def test_human_output_escapes_control_and_non_utf8_bytes(bytes_named, stoker_cli):
    proc = stoker_cli("ls", bytes_named, os.fsdecode(LATIN1_CLASS), binary=True)
    assert proc.returncode == 0, proc.stderr
    assert b"\x1b" not in proc.stdout and b"\x07" not in proc.stdout
    assert proc.stdout.split(b"\n")[:2] == [rb"evil\x1b[2J\x1b]0;pwned\x07.txt",
                                            rb"na\xefve-\xff.jpg"]
    stat = stoker_cli("stat", bytes_named, os.fsdecode(LATIN1_CLASS + b"/" + ESC_FILE),
                      binary=True)
    assert stat.returncode == 0 and b"\x1b" not in stat.stdout
    assert rb"path:      caf\xe9/evil\x1b[2J" in stat.stdout
    # An error naming a hostile path is as harmless.
    missing = stoker_cli("cat", bytes_named, os.fsdecode(b"plain/\x1b[2Jgone\xfe"), binary=True)
    assert missing.returncode == 1
    assert b"\x1b" not in missing.stderr and rb"plain/\x1b[2Jgone\xfe" in missing.stderr


def test_python_names_round_trip_through_fsencode(bytes_named):
    ds = stoker.Dataset(bytes_named)
    assert [os.fsencode(c) for c in ds.classes] == [LATIN1_CLASS, b"plain"]
    names = ds.listdir(os.fsdecode(LATIN1_CLASS))
    assert sorted(os.fsencode(n) for n in names) == sorted([LATIN1_FILE, ESC_FILE])
    assert ds.listdir(LATIN1_CLASS) == names  # bytes work wherever a path goes
    seen = {}
    for i in range(len(ds)):
        data, label, path = ds[i]
        seen[os.fsencode(path)] = data
        assert ds.stat(path)["path"] == path
        assert ds.read(os.fsencode(path)) == data == ds.read(path)
        assert [os.fsencode(p) for p in ds.sample_files(i)] == [os.fsencode(path)]
    assert seen == FILES


def test_a_dataset_at_a_non_utf8_path_opens_pickles_and_explains_errors(bytes_named):
    moved = os.path.join(os.fsencode(bytes_named.parent), b"d\xe9j\xe0")
    os.rename(bytes_named, moved)
    ds = stoker.Dataset(moved)
    assert os.fsencode(ds.uri) == moved
    assert "d\\udce9j\\udce0" in repr(ds)
    copy = pickle.loads(pickle.dumps(ds))
    assert copy.read("plain/ok.txt") == b"plain" and copy.uri == ds.uri
    with pytest.raises(FileNotFoundError) as error:
        ds.read(b"plain/\xfe\x1b")
    message = str(error.value)
    message.encode("utf-8")  # printable: no lone surrogates in an error message
    assert "\\xfe\\x1b" in message
