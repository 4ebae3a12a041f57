"""Parquet and Hugging Face sources (issue 16 item 7): their rows become a column dataset with
the types their schemas say, through stoker.Writer."""
from __future__ import annotations

import datetime
import io

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
