"""stoker.Writer and column datasets (issue 16): typed samples written from Python, read back as
typed values by stoker.Dataset, stoker.Loader and stoker.ImageLoader, with the guarantees of
`stoker pack` (atomic versions, appends that keep indices, CRC on every byte)."""
from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import stoker

COLUMNS = {"image": "bytes", "label": "int", "caption": "str?", "emb": "ndarray:float32:8",
           "meta": "json", "ids": "tokens:uint16", "score": "float", "any": "ndarray?"}


def sample(i: int) -> dict:
    rng = np.random.default_rng(i)
    return {
        "image": rng.bytes(int(rng.integers(0, 3000))),
        "label": i % 7,
        "caption": None if i % 3 == 0 else f"caption {i} \N{SNOWMAN}",
        "emb": rng.standard_normal(8).astype(np.float32),
        "meta": {"i": i, "tags": ["a", "b"][: i % 3], "nested": {"x": i / 4}},
        "ids": rng.integers(0, 60000, size=int(rng.integers(0, 50))),  # int64: converted
        "score": float(rng.standard_normal()) * 10 ** int(rng.integers(-300, 300)),
        **({"any": rng.integers(0, 9, size=(2, i % 4, 3)).astype(np.int16)} if i % 2 else {}),
    }


def check_equal(got: dict, want: dict) -> None:
    assert list(got) == sorted(COLUMNS)  # every column, in the schema's (name) order
    for name in COLUMNS:
        g, w = got[name], want.get(name)
        if isinstance(w, np.ndarray):
            assert isinstance(g, np.ndarray) and g.shape == w.shape, name
            np.testing.assert_array_equal(g, w)
            if name == "ids":
                assert g.dtype == np.uint16
        else:
            assert g == w, name


def write(path: Path, count: int, start: int = 0, **kwargs) -> dict:
    with stoker.Writer(path, columns=COLUMNS, progress=False, **kwargs) as w:
        for i in range(start, start + count):
            w.write(sample(i))
    assert w.closed and w.samples_written == count
    return w.summary


def test_typed_samples_round_trip(tmp_path):
    summary = write(tmp_path / "d.stoker", 300, chunk_size="64KiB")
    assert summary["samples"] == 300 and summary["version"] == 1
    assert summary["chunks"] > 1  # mixed over several chunks
    ds = stoker.Dataset(tmp_path / "d.stoker")
    assert len(ds) == 300
    assert ds.columns == COLUMNS
    assert ds.label_column == "label"  # an int column called "label" labels samples
    assert ds.classes == [str(c) for c in range(7)]
    for i in range(300):
        check_equal(ds[i], sample(i))  # indices are the order of writing
    assert ds[0]["emb"].flags.writeable is False  # a view of the read bytes, not a copy
    assert stoker.verify(tmp_path / "d.stoker")["ok"]


def test_values_are_stored_as_files_other_tools_read(tmp_path):
    write(tmp_path / "d.stoker", 4)
    ds = stoker.Dataset(tmp_path / "d.stoker")
    paths = ds.sample_files(1)
    assert sorted(p.rsplit(".", 1)[1] for p in paths) == sorted(COLUMNS)
    by_column = {p.rsplit(".", 1)[1]: ds.read(p) for p in paths}
    assert by_column["label"] == b"1"
    assert json.loads(by_column["meta"]) == sample(1)["meta"]
    np.testing.assert_array_equal(np.load(io.BytesIO(by_column["emb"])), sample(1)["emb"])
    assert float(by_column["score"]) == sample(1)["score"]


def test_loader_yields_typed_samples_and_stacks_batches(tmp_path):
    write(tmp_path / "d.stoker", 50, chunk_size="64KiB")
    ds = stoker.Dataset(tmp_path / "d.stoker")
    seen = []
    for s in stoker.Loader(ds, shuffle="chunk", seed=3):
        seen.append(s["meta"]["i"])
        check_equal(s, sample(s["meta"]["i"]))
    assert sorted(seen) == list(range(50))
    batch = next(iter(stoker.Loader(ds, batch_size=8, shuffle="sequential")))
    assert batch["emb"].shape == (8, 8) and batch["emb"].dtype == np.float32
    assert batch["label"].dtype == np.int64 and batch["score"].dtype == np.float64
    assert isinstance(batch["image"], list) and isinstance(batch["ids"], list)  # ragged
    # Optional and any-shape columns are lists in every batch, whatever one batch holds.
    assert isinstance(batch["caption"], list) and isinstance(batch["any"], list)
    # Ranks split the epoch evenly, and a state_dict resumes exactly, as for any dataset.
    ranks = [[s["meta"]["i"] for s in stoker.Loader(ds, rank=r, world_size=3, seed=1)]
             for r in range(3)]
    assert len({len(r) for r in ranks}) == 1
    assert set().union(*map(set, ranks)) == set(range(50))
    loader = stoker.Loader(ds, batch_size=5, seed=9)
    it = iter(loader)
    first = [next(it)["label"].tolist() for _ in range(3)]
    state = loader.state_dict()
    rest = [b["label"].tolist() for b in it]
    again = stoker.Loader(ds, batch_size=5, seed=9)
    again.load_state_dict(state)
    assert [b["label"].tolist() for b in again] == rest
    assert len(first) + len(rest) == 10


def test_append_keeps_indices_and_needs_the_same_columns(tmp_path, stoker_cli):
    path = tmp_path / "d.stoker"
    write(path, 20)
    before = [stoker.Dataset(path)[i] for i in range(20)]
    summary = write(path, 15, start=20, append=True)
    assert summary["version"] == 2 and summary["samples"] == 35
    ds = stoker.Dataset(path)
    for i in range(35):
        check_equal(ds[i], sample(i))
    for i in range(20):
        check_equal(stoker.Dataset(path, version=1)[i], before[i])
    with pytest.raises(FileExistsError, match="append=True"):
        stoker.Writer(path, columns=COLUMNS)
    with pytest.raises(ValueError, match="columns are"):
        stoker.Writer(path, columns={"image": "bytes"}, append=True)
    # A tree or tar cannot be appended to a column dataset, nor samples to a plain dataset.
    tree = tmp_path / "tree"
    (tree / "a").mkdir(parents=True)
    (tree / "a" / "x.jpg").write_bytes(b"x")
    proc = stoker_cli("pack", "--append", tree, path)
    assert proc.returncode != 0 and "stoker.Writer" in proc.stderr, proc.stderr
    plain = tmp_path / "plain.stoker"
    stoker.pack(tree, plain, progress=False)
    with pytest.raises(ValueError, match="holds files, not typed columns"):
        stoker.Writer(plain, columns={"image": "bytes"}, append=True)
    info = json.loads(stoker_cli("info", "--json", path, check=True).stdout)
    assert list(info["columns"].items())[:3] == [("any", "ndarray?"), ("caption", "str?"),
                                                 ("emb", "ndarray:float32:8")]
    assert json.loads(stoker_cli("info", "--json", plain, check=True).stdout)["columns"] == {}
    assert info["labels"] == "from column label"


def test_bad_values_name_the_sample_and_column_and_are_left_out(tmp_path):
    path = tmp_path / "d.stoker"
    cases = [
        ({"label": "3"}, TypeError, "column 'label': expected int, got str"),
        ({"label": True}, TypeError, "expected int, got bool"),
        ({"label": -1}, ValueError, "label -1 is outside"),
        ({"score": float("nan")}, ValueError, "column 'score': nan is not allowed"),
        ({"score": "1.5"}, TypeError, "expected float"),
        ({"emb": np.zeros(8, np.float64)}, TypeError, "dtype float64, but the column holds float32"),
        ({"ids": np.array([70000])}, ValueError, "token 70000 .* does not fit uint16"),
        ({"ids": np.array([-1])}, ValueError, "does not fit uint16"),
        ({"ids": np.zeros((2, 2), np.uint16)}, ValueError, "2-D; tokens are 1-D"),
        ({"ids": np.zeros(3, np.float32)}, TypeError, "tokens are integers"),
        ({"image": "text"}, TypeError, "expected bytes-like"),
        ({"caption": "\udcff"}, ValueError, "not encodable as UTF-8"),
        ({"meta": {"x": float("nan")}}, ValueError, "column 'meta': not JSON"),
        ({"meta": object()}, ValueError, "not JSON: Object of type object is not JSON"),
        ({"any": np.array([object()])}, TypeError, "column 'any'"),
        ({"extra": 1}, ValueError, "'extra' is not a column"),
        ({"emb": None}, ValueError, "no value for column 'emb'"),
    ]
    with stoker.Writer(path, columns=COLUMNS, progress=False) as w:
        w.write(sample(0))
        for n, (change, error, message) in enumerate(cases):
            bad = dict(sample(1), **change)
            with pytest.raises(error, match=f"sample 1: .*{message}"):
                w.write(bad)
        with pytest.raises(ValueError, match="no value for column 'image'"):
            w.write({k: v for k, v in sample(1).items() if k != "image"})
        with pytest.raises(TypeError, match="expected a dict"):
            w.write([1, 2])
        w.write(sample(1))
    ds = stoker.Dataset(path)
    assert len(ds) == 2  # the bad samples were left out, the writer went on
    check_equal(ds[1], sample(1))


def test_a_sample_without_any_value_is_refused_not_lost(tmp_path):
    """All columns optional, a sample with none of them: stored as its values' files, it would
    vanish and the samples after it would take its index; so it is refused, and the writer goes
    on. An int? column called label labels the samples by default, as an int one does."""
    path = tmp_path / "d.stoker"
    with stoker.Writer(path, columns={"a": "int?", "b": "str?", "label": "int?"},
                       progress=False) as w:
        w.write({"a": 1, "label": 0})
        for empty in ({}, {"a": None, "b": None}):
            with pytest.raises(ValueError, match="sample 1: no value in any column"):
                w.write(empty)
        w.write({"b": "z", "label": 1})
    assert w.samples_written == 2
    ds = stoker.Dataset(path)
    assert len(ds) == 2 and ds[1]["b"] == "z" and ds.label_column == "label"
    assert ds.classes == ["0", "1"]


def test_bad_schemas_and_options(tmp_path):
    with pytest.raises(ValueError, match="unknown type 'integer'"):
        stoker.Writer(tmp_path / "a", columns={"x": "integer"})
    with pytest.raises(ValueError, match="'a.b'"):
        stoker.Writer(tmp_path / "a", columns={"a.b": "int"})
    with pytest.raises(ValueError, match="must be of type int"):
        stoker.Writer(tmp_path / "a", columns={"x": "str"}, label="x")
    with pytest.raises(TypeError, match="'threads'"):
        stoker.Writer(tmp_path / "a", columns={"x": "str"}, threads=4)
    with pytest.raises(TypeError, match="chunk_sise"):
        stoker.Writer(tmp_path / "a", columns={"x": "str"}, chunk_sise=4)
    # The schema missing or of another type: said so, not nanobind's "incompatible arguments".
    with pytest.raises(TypeError,
                       match=r"Writer needs columns, a dict \{name: type\}.*got \['x'\]"):
        stoker.Writer(tmp_path / "a", columns=["x"])
    with pytest.raises(TypeError, match="Writer needs columns.*got none"):
        stoker.Writer(tmp_path / "a")
    assert not (tmp_path / "a" / "versions").exists()


def test_an_exception_or_abort_publishes_nothing(tmp_path):
    path = tmp_path / "d.stoker"
    with pytest.raises(RuntimeError):
        with stoker.Writer(path, columns={"x": "int"}, progress=False) as w:
            for i in range(100):
                w.write({"x": i})
            raise RuntimeError("the job failed")
    assert w.closed and w.summary is None
    with pytest.raises(FileNotFoundError):
        stoker.Dataset(path)
    assert not list((path / "chunks").iterdir()) if (path / "chunks").exists() else True
    w = stoker.Writer(path, columns={"x": "int"}, progress=False)
    w.write({"x": 1})
    w.abort()
    with pytest.raises(ValueError, match="closed"):
        w.write({"x": 2})
    with pytest.raises(FileNotFoundError):
        stoker.Dataset(path)
    # A fresh writer then succeeds in the same place.
    with stoker.Writer(path, columns={"x": "int"}, progress=False) as w:
        w.write({"x": 5})
    assert stoker.Dataset(path)[0] == {"x": 5}


def test_kill_9_while_writing_leaves_no_dataset(tmp_path):
    path = tmp_path / "d.stoker"
    script = textwrap.dedent(f"""
        import os, stoker
        w = stoker.Writer({str(path)!r}, columns={{"x": "bytes"}}, progress=False,
                          chunk_size="1MiB")
        for i in range(100000):
            w.write({{"x": os.urandom(1000)}})
            if i == 5000:
                print("writing", flush=True)
        """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "writing"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with pytest.raises(FileNotFoundError):
        stoker.Dataset(path)
    # The leftovers do not stop a new writer (gc collects them).
    with stoker.Writer(path, columns={"x": "bytes"}, progress=False) as w:
        w.write({"x": b"ok"})
    assert stoker.Dataset(path)[0] == {"x": b"ok"}


def test_corrupt_values_are_reported_by_name(tmp_path):
    path = tmp_path / "d.stoker"
    with stoker.Writer(path, columns={"n": "int", "a": "ndarray"}, progress=False,
                       order="path") as w:
        w.write({"n": 12345, "a": np.arange(6).reshape(2, 3)})
    # Flip a byte of the int's text in its chunk: the CRC catches it, naming the file.
    chunk = next((path / "chunks").iterdir())
    data = bytearray(chunk.read_bytes())
    at = data.find(b"12345")
    data[at] ^= 0x01
    chunk.write_bytes(bytes(data))
    with pytest.raises(stoker.CorruptionError, match=r"\.n"):
        stoker.Dataset(path)[0]


def test_image_loader_trains_on_an_image_column(tmp_path):
    torch = pytest.importorskip("torch")
    from PIL import Image
    path = tmp_path / "img.stoker"
    rng = np.random.default_rng(0)
    with stoker.Writer(path, columns={"image": "jpeg", "label": "int", "caption": "str",
                                      "thumb": "png?"}, progress=False) as w:
        for i in range(40):
            buf = io.BytesIO()
            Image.fromarray(rng.integers(0, 255, (40, 50, 3), dtype=np.uint8)).save(buf, "JPEG")
            w.write({"image": buf.getvalue(), "label": i % 4, "caption": f"c{i}"})
    images = stoker.ImageLoader(path, batch_size=8, size=32, train=False, image="image",
                                label="label")
    labels = []
    for x, y in images:
        assert x.shape[1:] == (3, 32, 32)
        labels += y.tolist()
    assert sorted(labels) == sorted(i % 4 for i in range(40))
    # Its image column is found without image= when it is the only jpeg column... but here a
    # png column exists too, so the choice must be made.
    with pytest.raises(ValueError, match="pass image="):
        stoker.ImageLoader(path, batch_size=8)
    with pytest.raises(ValueError, match="not a jpeg, png or bytes column"):
        stoker.ImageLoader(path, batch_size=8, image="caption")
    with pytest.raises(ValueError, match="not an int column"):
        stoker.ImageLoader(path, batch_size=8, image="image", label="caption")
    # Samples without the optional png fail by name when it is chosen.
    with pytest.raises(ValueError, match="has no 'thumb' member"):
        next(iter(stoker.ImageLoader(path, batch_size=8, image="thumb")))
    assert torch is not None


def test_image_loader_takes_labels_from_any_int_column(tmp_path):
    pytest.importorskip("torch")
    from PIL import Image
    path = tmp_path / "img.stoker"
    rng = np.random.default_rng(1)
    with stoker.Writer(path, columns={"image": "jpeg", "label": "int", "species": "int?"},
                       progress=False) as w:
        for i in range(30):
            buf = io.BytesIO()
            Image.fromarray(rng.integers(0, 255, (20, 24, 3), dtype=np.uint8)).save(buf, "JPEG")
            sample = {"image": buf.getvalue(), "label": i % 3}
            if i % 5:
                sample["species"] = 100 + i  # every fifth sample has none
            w.write(sample)
    assert stoker.Dataset(path).label_column == "label"

    def read(label):
        loader = stoker.ImageLoader(path, batch_size=7, size=16, train=False, label=label)
        return sorted(sum((y.tolist() for _, y in loader), []))

    assert read(None) == read("label") == sorted(i % 3 for i in range(30))
    assert read("species") == sorted([-1] * 6 + [100 + i for i in range(30) if i % 5])


def test_mount_shows_columns_as_files(tmp_path, stoker_cli):
    # The same files the FUSE view shows (stoker ls lists the tree without mounting).
    path = tmp_path / "d.stoker"
    write(path, 3)
    top = stoker_cli("ls", path, check=True).stdout.split()
    assert len(top) == 1  # one directory per writer, its samples numbered in it
    listing = stoker_cli("ls", path, top[0].rstrip("/"), check=True).stdout.split()
    assert sorted(n for n in listing if n.endswith(".emb")) == [
        f"{i:012}.emb" for i in range(3)]


def test_class_ordered_writes_are_stored_mixed(tmp_path):
    # 200 classes written one after the other (as a converter walking class folders does) into
    # chunks of ~70 samples: the writer's mixed storage order lets the default loader read whole
    # chunks and still mix classes like a full shuffle.
    path = tmp_path / "ordered.stoker"
    with stoker.Writer(path, columns={"x": "bytes", "label": "int"}, progress=False,
                       chunk_size="16KiB") as w:
        for c in range(200):
            for i in range(60):
                w.write({"x": bytes([c % 256, i]) * 100, "label": c})
    rows = stoker.shuffle_report(stoker.Dataset(path), batch_size=64, windows=[16])
    full = next(r for r in rows if r["mode"] == "full")
    default = next(r for r in rows if r["loader_default"])
    assert default["block_bytes"] == 0  # whole chunks mix well enough
    assert default["batch_distinct_classes"] >= 0.9 * full["batch_distinct_classes"]


def test_writers_write_parts_of_one_version(tmp_path, stoker_cli, monkeypatch):
    """Parts (as `stoker pack --part`): N writers, one version, published by commit."""
    path = tmp_path / "parts.stoker"
    columns = {"x": "int", "label": "int", "note": "str?"}
    for k in range(3):
        with stoker.Writer(path, columns=columns, part=(k, 3), job="j", progress=False) as w:
            for i in range(50):
                w.write({"x": 100 * k + i, "label": k})
        assert "part-00000" in w.summary["part"] or k != 0
    with pytest.raises(FileNotFoundError):
        stoker.Dataset(path)  # nothing is visible before the commit
    # A part written twice is refused (and leaves the first as it was).
    with pytest.raises(FileExistsError, match="packed twice"):
        with stoker.Writer(path, columns=columns, part="1/3", job="j", progress=False) as w:
            w.write({"x": 0, "label": 0})
    summary = stoker.commit(path, job="j")
    ds = stoker.Dataset(path)
    assert summary["version"] == 1 and len(ds) == 150 and ds.columns == columns
    assert sorted(ds[i]["x"] for i in range(150)) == [100 * k + i for k in range(3)
                                                      for i in range(50)]
    assert ds.classes == ["0", "1", "2"] and all(ds[i]["x"] // 100 == ds[i]["label"]
                                                 for i in range(0, 150, 7))
    assert not any((path / "parts").rglob("*.columns"))
    # A part from a Slurm array task's environment, committed by the CLI into version 2.
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "0")
    monkeypatch.setenv("SLURM_ARRAY_TASK_MIN", "0")
    monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "1")
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "77")
    with stoker.Writer(path, columns=columns, part="env", progress=False) as w:
        w.write({"x": 999, "label": 1, "note": "late"})
    proc = stoker_cli("commit", path, "--job", "slurm-77")
    assert proc.returncode == 0, proc.stderr
    assert len(stoker.Dataset(path)) == 151
    # Parts with different schemas are refused at commit, naming both.
    for k, cols in enumerate([columns, {"x": "int"}]):
        with stoker.Writer(path, columns=cols, part=(k, 2), job="bad", progress=False) as w:
            w.write({"x": 1, "label": 0} if "label" in cols else {"x": 1})
    with pytest.raises(ValueError, match=r"part-000000.*part-000001|schema"):
        stoker.commit(path, job="bad")
    with pytest.raises(TypeError, match="part"):
        stoker.Writer(tmp_path / "t.stoker", columns=columns, part=[0, 1])
    with pytest.raises(ValueError, match="K/N"):
        stoker.Writer(tmp_path / "t.stoker", columns=columns, part="a/b")


def row_stream(rows: list[tuple[int, str | None, bytes]]) -> bytes:
    """The row stream (docs/engines.md) of (int, str?, bytes) rows, as the JVM writer sends it."""
    import struct
    out = bytearray(b"STKROWS1")
    for x, note, data in rows:
        out += b"\x01" + struct.pack("<Iq", 8, x)
        out += struct.pack("<I", 0xFFFFFFFF) if note is None else \
            struct.pack("<I", len(note.encode())) + note.encode()
        out += struct.pack("<I", len(data)) + data
    return bytes(out + b"\x00")


def test_row_stream_parts_and_commit_only(tmp_path, stoker_cli):
    """`stoker pack - DST` reads rows from stdin into a part; `stoker commit --only` publishes
    the parts named (an engine's accepted attempts) and removes the job's others."""
    path = tmp_path / "rows.stoker"
    flags = ["--columns", "x=int", "--columns", "note=str?", "--columns", "data=bytes"]
    for part, name, first in ((11, "t-0000000000", 0), (22, "t-0000000001", 100),
                              (33, "t-0000000001", 200)):  # 33: a second attempt of task 1
        rows = [(first + i, None if i % 3 else f"n{i}", bytes([i]) * i) for i in range(20)]
        proc = stoker_cli("pack", "-", path, *flags, "--part", part, "--job", "eng", "--name",
                          name, "--json", input=row_stream(rows), binary=True)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["files_added"] == 20 * 2 + 7
    proc = stoker_cli("commit", path, "--job", "eng", "--only-file", "-", "--json",
                      input="11\n22\n")
    assert proc.returncode == 0, proc.stderr
    ds = stoker.Dataset(path)
    assert ds.columns == {"x": "int", "note": "str?", "data": "bytes"}
    assert [ds[i]["x"] for i in range(len(ds))] == list(range(20)) + list(range(100, 120))
    assert ds[3]["note"] == "n3" and ds[4]["note"] is None and ds[5]["data"] == b"\x05" * 5
    assert [p.name for p in next((path / "parts").iterdir()).iterdir()] == ["closed"]
    # A cut stream, a bad value, or --name on other input: refused, nothing more published.
    cut = stoker_cli("pack", "-", path, *flags, "--part", 44, "--job", "eng2",
                     input=row_stream([(1, "a", b"x")])[:-3], binary=True)
    assert cut.returncode == 1 and b"row 0: column 'data'" in cut.stderr
    assert b"cut short" in cut.stderr
    proc = stoker_cli("pack", "-", path, "--columns", "x=int", "--name", "a/b",
                      input=b"", binary=True)
    assert proc.returncode == 2 and b"name 'a/b'" in proc.stderr
    proc = stoker_cli("pack", tmp_path, path, "--name", "x")
    assert proc.returncode == 2 and b"--name is for row stream input" in proc.stderr.encode()
    assert stoker.Dataset(path).version == 1
    # An engine's abort before any part was written closes the job all the same: an attempt
    # that starts later is refused (without --close-empty, a job with no parts is a mistake).
    proc = stoker_cli("commit", path, "--job", "eng3", "--discard")
    assert proc.returncode == 1 and "holds no parts of job 'eng3'" in proc.stderr
    proc = stoker_cli("commit", path, "--job", "eng3", "--discard", "--close-empty")
    assert proc.returncode == 0, proc.stderr
    late = stoker_cli("pack", "-", path, *flags, "--part", 55, "--job", "eng3",
                      input=row_stream([(1, "a", b"x")]), binary=True)
    assert late.returncode == 1 and b"already committed or discarded" in late.stderr
    proc = stoker_cli("commit", path, "--job", "eng", "--only", "1,x")
    assert proc.returncode == 2 and "--only" in proc.stderr
