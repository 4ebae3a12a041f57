"""Parquet and Hugging Face sources (issue 16 item 7): their rows become a column dataset with
the types their schemas say, through stoker.Writer."""
from __future__ import annotations

import datetime
import io
import json
import re
import subprocess
import sys

import numpy as np
import pytest

import stoker

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def table(start: int, n: int):
    return pa.table({
        "id": pa.array(range(start, start + n), pa.int64()),
        "ok": pa.array([i % 2 == 0 for i in range(n)]),
        "score": pa.array([float(i) / 3 if i % 5 else float("nan") for i in range(n)]),
        "text": pa.array([f"row {start + i}" if i % 4 else None for i in range(n)]),
        "blob": pa.array([bytes([i % 256]) * (i % 7) for i in range(n)], pa.binary()),
        "ids": pa.array([list(range(i % 9)) for i in range(n)], pa.list_(pa.int32())),
        "vec": pa.array([[float(i), 0.5] for i in range(n)], pa.list_(pa.float32(), 2)),
        "meta": pa.array([{"a": i, "b": [i]} for i in range(n)]),
        "when": pa.array([datetime.date(2026, 1, 1 + i % 28) for i in range(n)]),
    })


def test_parquet_files_become_a_typed_dataset(tmp_path, stoker_cli):
    for k in range(3):
        pq.write_table(table(100 * k, 100), tmp_path / f"part-{k}.parquet")
    out = tmp_path / "out.stoker"
    summary = stoker.from_parquet(str(tmp_path / "part-*.parquet"), out, progress=False)
    assert summary["samples"] == 300
    ds = stoker.Dataset(out)
    assert ds.columns == {"blob": "bytes?", "id": "int?", "ids": "tokens?", "meta": "json?",
                          "ok": "int?", "score": "float:nan?", "text": "str?",
                          "vec": "ndarray:float32?", "when": "str?"}
    for i in (0, 1, 5, 150, 299):
        row = ds[i]
        j = i % 100
        assert row["id"] == i and row["ok"] == int(j % 2 == 0)
        assert (np.isnan(row["score"]) if j % 5 == 0 else row["score"] == j / 3)
        assert row["text"] == (f"row {i}" if j % 4 else None)
        assert row["blob"] == bytes([j % 256]) * (j % 7)
        assert row["ids"].dtype == np.int32 and row["ids"].tolist() == list(range(j % 9))
        assert row["vec"].tolist() == [float(j), 0.5]
        assert row["meta"] == {"a": j, "b": [j]}
        assert row["when"] == f"2026-01-{1 + j % 28:02d}"
    # The CLI packs Parquet the same way (it runs python -m stoker.sources).
    cli_out = tmp_path / "cli.stoker"
    proc = stoker_cli("pack", "-q", tmp_path / "part-0.parquet", tmp_path / "part-1.parquet",
                      cli_out)
    assert proc.returncode == 0, proc.stderr
    assert len(stoker.Dataset(cli_out)) == 200 and stoker.Dataset(cli_out)[150]["id"] == 150
    bad = stoker_cli("pack", tmp_path / "part-0.parquet", cli_out)
    assert bad.returncode != 0 and "append" in bad.stderr


def test_parquet_overrides_and_mismatched_schemas(tmp_path):
    pq.write_table(table(0, 10), tmp_path / "a.parquet")
    pq.write_table(table(0, 10).drop(["meta"]), tmp_path / "b.parquet")
    with pytest.raises(ValueError, match="schema differs"):
        stoker.from_parquet([tmp_path / "a.parquet", tmp_path / "b.parquet"], tmp_path / "x")
    with pytest.raises(ValueError, match="'nope' is not a column"):
        stoker.from_parquet(tmp_path / "a.parquet", tmp_path / "x", columns={"nope": "int"})
    out = tmp_path / "o.stoker"
    stoker.from_parquet(tmp_path / "a.parquet", out, columns={"id": "int", "text": "json?"},
                        label="id", progress=False)
    ds = stoker.Dataset(out)
    assert ds.label_column == "id" and ds.columns["id"] == "int"
    with pytest.raises(FileNotFoundError):
        stoker.from_parquet(str(tmp_path / "none-*.parquet"), tmp_path / "y")


def test_hugging_face_datasets(tmp_path):
    hf = pytest.importorskip("datasets")
    from PIL import Image
    images = []
    for i in range(6):
        buf = io.BytesIO()
        Image.fromarray(np.full((8, 8, 3), i * 30, np.uint8)).save(buf, "JPEG")
        images.append({"bytes": buf.getvalue(), "path": None})
    features = hf.Features({"image": hf.Image(), "label": hf.ClassLabel(names=["cat", "dog"]),
                           "caption": hf.Value("string"),
                           "input_ids": hf.Sequence(hf.Value("int64"))})
    data = hf.Dataset.from_dict({"image": images, "label": [0, 1, 0, 1, 1, 0],
                                 "caption": [f"c{i}" for i in range(6)],
                                 "input_ids": [list(range(i)) for i in range(6)]},
                                features=features)
    out = tmp_path / "hf.stoker"
    stoker.from_huggingface(data, out, progress=False)
    ds = stoker.Dataset(out)
    assert ds.columns == {"caption": "str?", "image": "jpeg?", "input_ids": "tokens:int64?",
                          "label": "int?"}
    assert ds.label_column == "label" and ds.classes == ["0", "1"]
    assert ds[3]["image"] == images[3]["bytes"] and ds[3]["label"] == 1
    assert ds[4]["input_ids"].tolist() == [0, 1, 2, 3]
    torch = pytest.importorskip("torch")
    x, y = next(iter(stoker.ImageLoader(out, batch_size=6, size=8, train=False)))
    assert sorted(y.tolist()) == [0, 0, 0, 1, 1, 1] and torch.is_tensor(x)


def test_parquet_parts_from_the_cli(tmp_path, stoker_cli):
    for k in range(2):
        pq.write_table(table(100 * k, 40), tmp_path / f"in-{k}.parquet")
    out = tmp_path / "out.stoker"
    for k in range(2):
        proc = stoker_cli("pack", tmp_path / f"in-{k}.parquet", out, "--part", f"{k}/2",
                          "--job", "pq")
        assert proc.returncode == 0, proc.stderr
        assert "stoker commit" in proc.stdout
    proc = stoker_cli("commit", out, "--job", "pq")
    assert proc.returncode == 0, proc.stderr
    ds = stoker.Dataset(out)
    assert sorted(ds[i]["id"] for i in range(len(ds))) == list(range(40)) + list(range(100, 140))


# --- `stoker pack x.parquet` (issue 37 item 3): python -m stoker._pack_parquet ------------------

def encoded(shade: int, kind: str = "JPEG") -> bytes:
    from PIL import Image
    buf = io.BytesIO()
    Image.new("RGB", (40, 30), (shade, 255 - shade, 0)).save(buf, kind)
    return buf.getvalue()


def pack_parquet(*args) -> subprocess.CompletedProcess:
    """The module `stoker pack` runs for Parquet input, run as it runs it."""
    proc = subprocess.run([sys.executable, "-m", "stoker._pack_parquet", *map(str, args)],
                          capture_output=True, text=True, timeout=300)
    assert "Warning" not in proc.stderr  # e.g. runpy's "found in sys.modules" RuntimeWarning
    return proc


def image_table(start: int, n: int, late: bytes):
    """image: JPEGs; png: PNGs and nulls; mixed: both; late: JPEGs but for `late` at the end."""
    rows = range(start, start + n)
    return pa.table({
        "image": pa.array([encoded(i * 20) for i in rows], pa.binary()),
        "png": pa.array([encoded(i, "PNG") if i % 3 else None for i in rows], pa.large_binary()),
        "mixed": pa.array([encoded(i, "PNG" if i == 5 else "JPEG") for i in rows]),
        "late": pa.array([encoded(i) for i in rows][:-1] + [late]),
        "label": pa.array([i % 2 for i in rows], pa.int64()),
        "cls": pa.array([i % 3 for i in rows], pa.int32()),
    })


def test_parquet_images_pack_as_jpeg_and_png(tmp_path):
    pq.write_table(image_table(0, 6, encoded(0)), tmp_path / "a.parquet")
    pq.write_table(image_table(6, 6, b"not an image"), tmp_path / "b.parquet", row_group_size=2)
    out = tmp_path / "out.stoker"
    proc = pack_parquet(tmp_path / "a.parquet", tmp_path / "b.parquet", out, "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["dataset"] == str(out) and summary["samples"] == 12
    assert {"version", "files_added", "bytes_added", "classes", "seconds"} <= set(summary)
    ds = stoker.Dataset(out)
    # Every value of every file is checked: one odd value anywhere keeps a column bytes.
    assert ds.columns == {"cls": "int?", "image": "jpeg?", "label": "int?", "late": "bytes?",
                          "mixed": "bytes?", "png": "png?"}
    assert ds[4]["png"] is not None and ds[3]["png"] is None
    pytest.importorskip("torch")
    loader = stoker.ImageLoader(ds, image="image", label="label", batch_size=12, size=32,
                                train=False, shuffle="sequential")
    (x, y), = list(loader)
    assert tuple(x.shape) == (12, 3, 32, 32) and sorted(y.tolist()) == [0] * 6 + [1] * 6
    pngs = stoker.ImageLoader(ds.filter({"png": lambda v: v is not None}), image="png",
                              batch_size=8, size=32, train=False)
    assert [tuple(x.shape) for x, _ in pngs] == [(8, 3, 32, 32)]


def test_parquet_cli_columns_label_and_json_errors(tmp_path):
    src = tmp_path / "a.parquet"
    pq.write_table(image_table(0, 4, encoded(0)), src)
    out = tmp_path / "out.stoker"
    proc = pack_parquet(src, out, "--columns", "image=bytes", "--columns", "cls=int",
                        "--label", "cls", "-q")
    assert proc.returncode == 0 and proc.stdout == "", proc.stderr
    ds = stoker.Dataset(out)
    assert ds.columns["image"] == "bytes" and ds.columns["cls"] == "int"
    assert ds.label_column == "cls" and ds.columns["late"] == "jpeg?"

    def error(*args) -> dict:
        proc = pack_parquet(*args, "--json")
        assert proc.returncode == 1, proc.stderr
        return json.loads(proc.stdout)["error"]

    exists = error(src, out)
    assert exists["code"] == "AlreadyExists" and "append" in exists["message"]
    assert error(tmp_path / "none.parquet", tmp_path / "x")["code"] == "NotFound"
    assert error(src, tmp_path / "x", "--columns", "nope=int") == {
        "code": "InvalidArgument",
        "message": "columns: 'nope' is not a column of the input "
                   "(['image', 'png', 'mixed', 'late', 'label', 'cls'])"}
    assert error(src, tmp_path / "x", "--label", "late")["code"] == "InvalidArgument"
    # A bad --columns is a usage error naming it, before any input is read.
    for spec, says in (("image", "'image': give NAME=TYPE (e.g. image=jpeg)"),
                       ("image=jpg", "'image=jpg': unknown type 'jpg' (types: bytes, str, int, "
                                     "float, json, ndarray, jpeg, png, tokens;")):
        proc = pack_parquet(tmp_path / "none.parquet", tmp_path / "x", "--columns", spec)
        assert proc.returncode == 2 and f"argument --columns: {says}" in proc.stderr


def test_the_column_types_are_the_writers(tmp_path):
    with pytest.raises(ValueError, match=r"types: ([a-z, ]+);") as e:
        stoker.Writer(tmp_path / "x", columns={"x": "nope"})
    listed = re.search(r"types: ([a-z, ]+);", str(e.value)).group(1).split(", ")
    assert tuple(listed) == stoker.sources._COLUMN_TYPES


def test_a_named_array_type_converts_lists_and_refuses_what_does_not_fit(tmp_path):
    """columns={"toks": "tokens:uint16", "emb": "ndarray:float16"}: lists of Python ints and
    floats fill them (numpy's rounding), empty lists included; a value that does not fit, or a
    float for an integer type, is an error naming the column, and nothing is published."""
    emb = [[0.1, 1 / 3, None], [], [65504.0, -2.5e-6, 1e-8]]
    pq.write_table(pa.table({"toks": [[1, 65535], [], [7]], "emb": emb}), tmp_path / "a.parquet")
    out = tmp_path / "o.stoker"
    stoker.from_parquet(tmp_path / "a.parquet", out, progress=False,
                        columns={"toks": "tokens:uint16", "emb": "ndarray:float16?"})
    ds = stoker.Dataset(out)
    assert [ds[i]["toks"].tolist() for i in range(3)] == [[1, 65535], [], [7]]
    assert ds[0]["toks"].dtype == np.uint16 and ds[0]["emb"].dtype == np.float16
    want = np.asarray([0.1, 1 / 3, np.nan], dtype=np.float16)
    assert np.array_equal(ds[0]["emb"], want, equal_nan=True) and ds[1]["emb"].size == 0
    for values, kind, match in (([[70000]], "tokens:uint16", "column 'toks': element 70000"),
                                ([[-1]], "tokens:uint64", "column 'toks': element -1"),
                                ([[1.5]], "tokens:int32", "column 'toks': double|float64")):
        bad = tmp_path / "bad.parquet"
        pq.write_table(pa.table({"toks": values}), bad)
        with pytest.raises((OverflowError, TypeError), match=match):
            stoker.from_parquet(bad, tmp_path / "bad.stoker", columns={"toks": kind},
                                progress=False)
        assert not (tmp_path / "bad.stoker" / "versions").exists()
