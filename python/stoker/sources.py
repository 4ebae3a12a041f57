"""Sources people have (issue 16 item 7): Parquet files and Hugging Face `datasets.Dataset`s into
a column dataset, through stoker.Writer (so every value is checked, and nothing is visible
until the whole input is in).

    stoker.from_parquet(["data/part-0.parquet", "data/part-1.parquet"], "out.stoker")
    stoker.from_huggingface(hf_dataset, "out.stoker")
    python -m stoker.sources data/*.parquet out.stoker     (what `stoker pack x.parquet` runs)

Column types come from the input's schema (override any with columns={name: type}):

    Arrow / datasets.Value          stoker
    int*, uint*, bool               int
    float*                          float:nan   (Parquet floats may hold NaN)
    string                          str
    binary                          bytes       (jpeg / png when every value is one: check)
    list of integers                tokens:<its type>
    list of floats                  ndarray:<its type>
    timestamp, date, decimal        str         (their ISO / decimal text)
    anything else (struct, map, …)  json
    datasets.ClassLabel             int         (the label column when it is called "label")
    datasets.Image                  jpeg or png (the encoded bytes, by the first image's format)

Arrow fields are nullable, so every column is optional ("?"): a null is a missing value.
PyArrow (`pip install pyarrow`) is needed for Parquet, `datasets` for from_huggingface.
"""
from __future__ import annotations

import glob
import os
import sys
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from ._core import Writer

_WRITER_KEYS = ("label", "append", "chunk_size", "order", "order_seed", "mix_memory",
                "progress", "part", "job")


def _arrow_type(t) -> tuple[str, Callable[[Any], Any] | None]:
    """A stoker column type for an Arrow type, and how a Python value of it is converted."""
    import pyarrow as pa
    if pa.types.is_boolean(t):
        return "int", int
    if pa.types.is_integer(t):
        return "int", None
    if pa.types.is_floating(t):
        return "float:nan", None
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "str", None
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return "bytes", None
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        v = t.value_type
        if pa.types.is_integer(v):
            dtype = np.dtype(v.to_pandas_dtype()).name
            return f"tokens:{dtype}", lambda x, d=dtype: np.asarray(x, dtype=d)
        if pa.types.is_floating(v):
            dtype = np.dtype(v.to_pandas_dtype()).name
            return f"ndarray:{dtype}", lambda x, d=dtype: np.asarray(x, dtype=d)
    if pa.types.is_temporal(t) or pa.types.is_decimal(t):
        return "str", lambda x: x.isoformat() if hasattr(x, "isoformat") else str(x)
    return "json", None


def _write(rows: Iterable[dict], output, columns: dict[str, str],
           convert: dict[str, Callable[[Any], Any]], options: dict) -> dict:
    unknown = set(options) - set(_WRITER_KEYS)
    if unknown:
        raise TypeError(f"unexpected keyword arguments {sorted(unknown)} (Writer's: "
                        f"{', '.join(_WRITER_KEYS)})")
    with Writer(output, columns=columns, **options) as w:
        for row in rows:
            for name, fn in convert.items():
                value = row.get(name)
                if value is not None:
                    row[name] = fn(value)
            w.write(row)
    return w.summary


def _expand(paths: str | os.PathLike | Sequence[str | os.PathLike]) -> list[str]:
    items = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    out: list[str] = []
    for p in map(os.fspath, items):
        found = sorted(glob.glob(p)) if glob.has_magic(p) else [p]
        if not found:
            raise FileNotFoundError(f"no Parquet file matches {p!r}")
        out += found
    return out


def from_parquet(paths, output, *, columns: dict[str, str] | None = None,
                 batch_rows: int = 4096, **options) -> dict:
    """Writes the rows of Parquet files (paths or glob patterns, in order) as a column dataset;
    returns stoker.Writer's summary. Every file must have the same schema. `columns` overrides
    types by name; other keyword arguments are stoker.Writer's."""
    import pyarrow.parquet as pq
    files = _expand(paths)
    schema = pq.read_schema(files[0])
    for f in files[1:]:
        other = pq.read_schema(f)
        if not other.equals(schema):
            raise ValueError(f"{f}: its schema differs from {files[0]}'s:\n{other}\nvs\n{schema}")
    types: dict[str, str] = {}
    convert: dict[str, Callable[[Any], Any]] = {}
    for field in schema:
        kind, fn = _arrow_type(field.type)
        types[field.name] = kind + "?"  # Arrow fields are nullable: a null is a missing value
        if fn is not None:
            convert[field.name] = fn
    for name, kind in (columns or {}).items():
        if name not in types:
            raise ValueError(f"columns: {name!r} is not a column of the input ({list(types)})")
        types[name] = kind
        convert.pop(name, None)

    def rows():
        for f in files:
            for batch in pq.ParquetFile(f).iter_batches(batch_size=batch_rows):
                yield from batch.to_pylist()

    return _write(rows(), output, types, convert, options)


def from_huggingface(dataset, output, *, columns: dict[str, str] | None = None,
                     **options) -> dict:
    """Writes a Hugging Face `datasets.Dataset` as a column dataset; returns stoker.Writer's
    summary. Images are stored encoded (not decoded), class labels as ints; a ClassLabel column
    called "label" labels the samples. `columns` overrides types by name; other keyword
    arguments are stoker.Writer's."""
    import datasets as hf
    features = dataset.features
    types: dict[str, str] = {}
    convert: dict[str, Callable[[Any], Any]] = {}
    images = []
    for name, feature in features.items():
        if isinstance(feature, hf.Image):
            images.append(name)
            types[name] = "bytes?"
            convert[name] = lambda v: v["bytes"] if v["bytes"] is not None else open(
                v["path"], "rb").read()
        elif isinstance(feature, hf.ClassLabel):
            types[name] = "int?"
        else:
            kind, fn = _arrow_type(features.arrow_schema.field(name).type)
            types[name] = kind + "?"
            if fn is not None:
                convert[name] = fn
    if images:
        dataset = dataset.cast(hf.Features({**features, **{n: hf.Image(decode=False)
                                                            for n in images}}))
        first = dataset[0] if len(dataset) else {}
        for name in images:
            data = convert[name](first[name]) if first.get(name) else b""
            types[name] = ("jpeg?" if data.startswith(b"\xff\xd8\xff") else
                           "png?" if data.startswith(b"\x89PNG") else "bytes?")
    for name, kind in (columns or {}).items():
        if name not in types:
            raise ValueError(f"columns: {name!r} is not a column of the dataset ({list(types)})")
        types[name] = kind
        convert.pop(name, None)
    if "label" not in options and isinstance(features.get("label"), hf.ClassLabel):
        options["label"] = "label"
    return _write((dict(row) for row in dataset), output, types, convert, options)


def main(argv: list[str]) -> int:
    """`python -m stoker.sources SRC.parquet... DST [--append] [--chunk-size S]` (what
    `stoker pack` runs for Parquet input)."""
    import argparse
    p = argparse.ArgumentParser(prog="stoker pack", description="Packs Parquet files.")
    p.add_argument("paths", nargs="+")
    p.add_argument("--append", action="store_true")
    p.add_argument("--chunk-size")
    p.add_argument("--order", choices=["shuffled", "path"])
    p.add_argument("--order-seed", type=int)
    p.add_argument("--part")
    p.add_argument("--job")
    p.add_argument("-q", "--quiet", action="store_true")
    a = p.parse_args(argv)
    if len(a.paths) < 2:
        p.error("give the Parquet files, then the destination")
    options = {k: v for k, v in {"append": a.append or None, "chunk_size": a.chunk_size,
                                 "order": a.order, "order_seed": a.order_seed, "part": a.part,
                                 "job": a.job}.items()
               if v is not None}
    try:
        s = from_parquet(a.paths[:-1], a.paths[-1], progress=not a.quiet, **options)
    except (OSError, ValueError, TypeError) as e:
        print(f"stoker pack: {e}", file=sys.stderr)
        return 2 if isinstance(e, (ValueError, TypeError)) else 1
    if not a.quiet and "part" in s:
        print(f"wrote {s['files_added']} files as {s['part']} of {s['dataset']}: publish the "
              "parts with `stoker commit`")
    elif not a.quiet:
        print(f"packed {s['samples']} samples ({s['files_added']} files) into {s['dataset']}, "
              f"version {s['version']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
