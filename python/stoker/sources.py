"""Sources people have (issue 16 item 7): Parquet files and Hugging Face `datasets.Dataset`s into
a column dataset, through stoker.Writer (so every value is checked, and nothing is visible
until the whole input is in).

    stoker.from_parquet(["data/part-0.parquet", "data/part-1.parquet"], "out.stoker")
    stoker.from_huggingface(hf_dataset, "out.stoker")
    python -m stoker._pack_parquet data/*.parquet out.stoker [--columns image=jpeg]
        [--label NAME] [--json]                   (what `stoker pack x.parquet` runs: main())

Column types come from the input's schema (override any with columns={name: type}):

    Arrow / datasets.Value          stoker
    int*, uint*, bool               int
    float*                          float:nan   (Parquet floats may hold NaN)
    string                          str
    binary                          jpeg / png when every value is one (by its signature:
                                    the column is read once more to check), else bytes
    list of integers                tokens:<its type>
    list of floats                  ndarray:<its type>
    timestamp, date, decimal        str         (their ISO / decimal text)
    anything else (struct, map, …)  json
    datasets.ClassLabel             int         (the label column when it is called "label")
    datasets.Image                  jpeg or png (the encoded bytes, by the first image's format)

A type given by name for an array column (columns={"emb": "ndarray:float16"}) converts each value
as numpy.asarray(value, dtype) does, but never floats into integers nor numbers into bools, and
an integer that does not fit is an error naming the column (never wrapped).
Arrow fields are nullable, so every column is optional ("?"): a null is a missing value.
PyArrow (`pip install pyarrow`) is needed for Parquet, `datasets` for from_huggingface.
"""
from __future__ import annotations

import glob
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ._cli import Parser, error_code, fail
from ._core import Writer  # type: ignore[attr-defined]  # see pyproject
from .optimize import IMAGE_SIGNATURES, _column_type

if TYPE_CHECKING:
    import argparse

_WRITER_KEYS = ("label", "append", "chunk_size", "order", "order_seed", "mix_memory",
                "progress", "part", "job")


def base_type(kind: str) -> str:
    """A column type's name without its parameters or optional mark: "tokens" of
    "tokens:uint16?"."""
    return kind.rstrip("?").partition(":")[0]


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
    return "json", _json_value(t)


def _json_value(t: Any) -> Callable[[Any], Any] | None:
    """How a value of Arrow type `t` becomes a JSON value: maps (which pyarrow gives as lists
    of (key, value) pairs) become objects, at any depth; None where nothing needs converting."""
    import pyarrow as pa
    if pa.types.is_map(t):
        item = _json_value(t.item_type)  # keys are scalars: json.dumps writes them as text
        return lambda pairs: {k: (item(v) if item and v is not None else v) for k, v in pairs}
    if pa.types.is_struct(t):
        fields = {t.field(i).name: _json_value(t.field(i).type) for i in range(t.num_fields)}
        if not any(fields.values()):
            return None

        def struct(row: dict) -> dict:
            out = {}
            for k, v in row.items():
                fn = fields.get(k)
                out[k] = fn(v) if fn is not None and v is not None else v
            return out
        return struct
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        element = _json_value(t.value_type)
        if element is None:
            return None
        return lambda items: [element(v) if v is not None else v for v in items]
    return None


def column_types(schema: Any, overrides: dict[str, str] | None
                 ) -> tuple[dict[str, str], dict[str, Callable[[Any], Any]]]:
    """stoker column types (all optional: Arrow fields are nullable) and converters for a
    pyarrow schema, as stoker.from_parquet infers them; Ray's tensor columns become ndarrays of
    their dtype and shape. `overrides` sets types by name."""
    types: dict[str, str] = {}
    convert: dict[str, Callable[[Any], Any]] = {}
    for field in schema:
        kind, fn = _tensor_type(field.type) or _arrow_type(field.type)
        types[field.name] = kind + "?"  # Arrow fields are nullable: a null is a missing value
        if fn is not None:
            convert[field.name] = fn
    _apply_overrides(types, convert, overrides, "input")
    return types, convert


def _apply_overrides(types: dict[str, str], convert: dict[str, Callable[[Any], Any]],
                     overrides: dict[str, str] | None, what: str) -> None:
    """Types given by name replace the inferred ones, with their converters (_array_converter)."""
    for name, kind in (overrides or {}).items():
        if name not in types:
            raise ValueError(f"columns: {name!r} is not a column of the {what} ({list(types)})")
        types[name] = kind
        fn = _array_converter(kind) or _text_converter(kind)
        if fn is None:
            convert.pop(name, None)
        else:
            convert[name] = fn


# What an array's elements (numpy.asarray's dtype kind) may be stored as: numbers widen and
# narrow as numpy.asarray(value, dtype) rounds floats, integers must fit (checked, never
# wrapped), and a float never becomes an integer, nor a number a bool.
_ELEMENT_SOURCES = {"b": "b", "i": "iu", "u": "iu", "f": "iuf", "c": "iufc"}


def _number_or_none(v: Any) -> bool:
    return v is None or (isinstance(v, (int, float, np.integer, np.floating))
                         and not isinstance(v, (bool, np.bool_)))


def _array_converter(kind: str) -> Callable[[Any], Any] | None:
    """For a column type given by name ("ndarray:float16", "tokens:uint64"): a list (or any
    array) into the column's element type, so that a list of Python floats can fill a float16
    column. None for other types, and for ndarray columns without an element type."""
    parts = kind.rstrip("?").split(":")
    if parts[0] not in ("ndarray", "tokens"):
        return None
    element = parts[1] if len(parts) > 1 else ("int32" if parts[0] == "tokens" else None)
    if element is None:
        return None
    try:
        dtype = np.dtype(element)
    except TypeError:
        return None  # not a NumPy type: the Writer names the bad type

    def convert(value: Any) -> np.ndarray:
        given = np.asarray(value)
        if given.size == 0:
            return np.empty(given.shape, dtype)
        allowed = _ELEMENT_SOURCES.get(dtype.kind, "")
        # None elements (object arrays) become NaN in float columns, as numpy makes them.
        if given.dtype.kind == "O" and dtype.kind in "fc" and \
                all(_number_or_none(v) for v in given.flat):
            return _finite_kept(np.asarray(value, dtype=np.complex128 if dtype.kind == "c"
                                           else np.float64), dtype)
        if given.dtype.kind not in allowed:
            raise TypeError(f"{given.dtype} elements cannot be stored as {dtype}")
        if dtype.kind in "iu" and given.dtype != dtype:
            low, high, info = int(given.min()), int(given.max()), np.iinfo(dtype)
            if low < info.min or high > info.max:
                raise OverflowError(
                    f"element {low if low < info.min else high} does not fit {dtype}")
        if dtype.kind in "fc":
            return _finite_kept(given, dtype)
        return given.astype(dtype, copy=False)
    return convert


def _finite_kept(given: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """`given` rounded to float `dtype`, where numpy would store infinity for a finite element
    beyond the type's range (70000 as float16): an error naming the element instead, as for an
    integer that does not fit (format("stoker-jvm") says the same)."""
    with np.errstate(over="ignore"):
        stored = given.astype(dtype, copy=False)
    grew = np.isinf(stored) & np.isfinite(given)
    if grew.any():
        raise OverflowError(f"element {given[grew].flat[0]} does not fit {dtype} (largest "
                            f"{np.finfo(dtype).max})")
    return stored


def _text_converter(kind: str) -> Callable[[Any], Any] | None:
    """A str column given for binary values takes them as UTF-8 (strictly), a bytes, jpeg or
    png column given for strings their UTF-8 bytes: as format("stoker-jvm") does."""
    base = kind.rstrip("?").partition(":")[0]
    if base == "str":
        return lambda v: bytes(v).decode("utf-8") if isinstance(v, (bytes, bytearray,
                                                                    memoryview)) else v
    if base in ("bytes", "jpeg", "png"):
        return lambda v: v.encode("utf-8") if isinstance(v, str) else v
    return None


def _tensor_type(t: Any) -> tuple[str, Callable[[Any], Any] | None] | None:
    """Ray Data's tensor extension types (fixed or variable shape) as ndarray columns."""
    import pyarrow as pa
    name = type(t).__name__
    if "TensorType" not in name or not isinstance(t, pa.ExtensionType):
        return None
    values = t.storage_type
    if pa.types.is_struct(values):  # variable shapes: {data, shape}
        values = values.field("data").type
    while pa.types.is_list(values) or pa.types.is_large_list(values) or \
            pa.types.is_fixed_size_list(values):
        values = values.value_type
    dtype = np.dtype(values.to_pandas_dtype()).name
    shape = tuple(getattr(t, "shape", None) or ())
    fixed = "Variable" not in name and shape and all(d and d > 0 for d in shape)
    kind = f"ndarray:{dtype}" + (":" + "x".join(str(d) for d in shape) if fixed else "")
    return kind, lambda x, d=dtype: np.asarray(x, dtype=d)


def _image_columns(files: list[str], names: list[str], batch_rows: int) -> dict[str, str]:
    """{name: "jpeg" or "png"} for each binary column of `names` whose every value (in every
    file; nulls aside) starts with that type's signature. Reads those columns, each until a
    value rules both types out."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    possible = {name: set(IMAGE_SIGNATURES) for name in names}
    for f in files:
        if not possible:
            break
        for batch in pq.ParquetFile(f).iter_batches(batch_size=batch_rows,
                                                    columns=list(possible)):
            for name in list(possible):
                values = batch.column(name).cast(pa.large_binary())  # starts_with's type
                for kind in list(possible[name]):
                    # False: a value is no such image (None: no value in this batch).
                    if pc.all(pc.starts_with(values, IMAGE_SIGNATURES[kind])).as_py() is False:
                        possible[name].discard(kind)
                if not possible[name]:
                    del possible[name]
            if not possible:
                break
    # The signatures exclude each other, so a column with a value has one type left; one with
    # both left had no value (all null) and stays bytes.
    return {name: kinds.pop() for name, kinds in possible.items() if len(kinds) == 1}


def converted(rows: Iterable[dict], convert: dict[str, Callable[[Any], Any]]
              ) -> Iterator[dict]:
    """`rows` with convert[name] applied to each present value of column `name` (the input's
    values as stoker.Writer takes them)."""
    for row in rows:
        for name, fn in convert.items():
            value = row.get(name)
            if value is not None:
                try:
                    row[name] = fn(value)
                except (TypeError, ValueError, OverflowError) as e:
                    raise type(e)(f"column {name!r}: {e}") from e
        yield row


def _write(rows: Iterable[dict], output, columns: dict[str, str],
           convert: dict[str, Callable[[Any], Any]], options: dict) -> dict:
    unknown = set(options) - set(_WRITER_KEYS)
    if unknown:
        raise TypeError(f"unexpected keyword arguments {sorted(unknown)} (Writer's: "
                        f"{', '.join(_WRITER_KEYS)})")
    w = Writer(output, columns=columns, **options)
    with w:
        for row in converted(rows, convert):
            w.write(row)
    return cast(dict, w.summary)  # a dict (python/bindings/writer.cc); the stub says object


def _expand(paths: str | os.PathLike | Sequence[str | os.PathLike]) -> list[str]:
    items = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    out: list[str] = []
    for p in [os.fspath(item) for item in items]:
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
    types, convert = column_types(schema, columns)
    binary = [name for name, kind in types.items()
              if kind == "bytes?" and name not in (columns or {})]
    for name, kind in _image_columns(files, binary, batch_rows).items():
        types[name] = kind + "?"

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
            types[name] = _column_type(data) + "?"
    _apply_overrides(types, convert, columns, "dataset")
    if "label" not in options and isinstance(features.get("label"), hf.ClassLabel):
        options["label"] = "label"
    return _write((dict(row) for row in dataset), output, types, convert, options)


# The column types stoker.Writer knows (src/format/columns.cc), so that a bad --columns is a
# usage error before any input is read; tests/python/test_sources.py checks them against it.
_COLUMN_TYPES = ("bytes", "str", "int", "float", "json", "ndarray", "jpeg", "png", "tokens")

def _pack_parser(description: str, sources: str) -> argparse.ArgumentParser:
    """The command line of `stoker pack` for input that Python packs (Parquet here, MDS and
    LitData in stoker.migrate): the sources, then the destination, then the options every
    such input shares. _run_pack() does what they say."""
    import argparse

    def column_type(text: str) -> tuple[str, str]:
        name, eq, kind = text.partition("=")
        if not (name and eq and kind):
            raise argparse.ArgumentTypeError(f"{text!r}: give NAME=TYPE (e.g. image=jpeg)")
        if base_type(kind) not in _COLUMN_TYPES:
            raise argparse.ArgumentTypeError(
                f"{text!r}: unknown type {kind!r} (types: {', '.join(_COLUMN_TYPES)}; "
                "':dtype' after ndarray or tokens fixes the element type, a trailing '?' makes "
                "the column optional)")
        return name, kind

    p = Parser(prog="stoker pack", description=description)
    p.add_argument("paths", nargs="+", metavar="PATH", help=f"{sources}, then the destination")
    p.add_argument("--append", action="store_true")
    p.add_argument("--chunk-size")
    p.add_argument("--order", choices=["shuffled", "path"])
    p.add_argument("--order-seed", type=int)
    p.add_argument("--part")
    p.add_argument("--job")
    p.add_argument("--columns", action="append", type=column_type, default=[],
                   metavar="NAME=TYPE", help="a column's type instead of the inferred one "
                   "(e.g. image=jpeg); repeatable")
    p.add_argument("--label", metavar="NAME", help="the int column that labels the samples "
                   "(default: an int column called label)")
    p.add_argument("--json", action="store_true",
                   help='print the summary, or {"error": {"code", "message"}}, as JSON')
    p.add_argument("-q", "--quiet", action="store_true")
    return p


def _run_pack(a: argparse.Namespace, pack: Callable[..., dict]) -> int:
    """Runs pack(sources, destination, columns=..., progress=..., **Writer options) for the
    parsed command line `a` of _pack_parser(); prints its summary or error. Returns the exit
    status: 0, or 1 when the pack failed (argparse exits 2 for a bad command line)."""
    import json
    options = {k: v for k, v in {"append": a.append or None, "chunk_size": a.chunk_size,
                                 "order": a.order, "order_seed": a.order_seed, "part": a.part,
                                 "job": a.job, "label": a.label}.items()
               if v is not None}
    try:
        s = pack(a.paths[:-1], a.paths[-1], columns=dict(a.columns),
                 progress=not (a.quiet or a.json), **options)
    except (OSError, ValueError, TypeError, ImportError) as e:
        # The Writer names its keywords; this is the command line: its flags.
        message = str(e).replace("append=True", "--append").replace("labels='none'",
                                                                    "--labels none")
        return fail("pack", error_code(e), message, a.json)
    if a.json:
        print(json.dumps(s, indent=2))
    elif not a.quiet and "part" in s:
        print(f"wrote {s['files_added']} files as {s['part']} of {s['dataset']}: publish the "
              "parts with `stoker commit`")
    elif not a.quiet:
        print(f"packed {s['files_added']} files into {s['dataset']}, version {s['version']} "
              f"({s['samples']} samples in all)")
    return 0


def main(argv: list[str]) -> int:
    """`stoker pack SRC.parquet... DST [options]` (tools/cmd_pack.cc runs it as `python -m
    stoker._pack_parquet`). Exit status: 0, 1 (the pack failed), 2 (a bad command line)."""
    p = _pack_parser("Packs Parquet files.", "the Parquet files")
    a = p.parse_args(argv)
    if len(a.paths) < 2:
        p.error("give the Parquet files, then the destination")
    return _run_pack(a, from_parquet)
