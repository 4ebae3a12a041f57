"""MosaicML Streaming (MDS) and LitData datasets into column datasets, without re-running the
ETL that made them (issue 40): their files are read as they are, through stoker.Writer (every
value checked; nothing is visible until the whole input is in).

    stoker.from_mds("mds_dir/", "out.stoker")            # a directory with MDS's index.json
    stoker.from_litdata("optimized_dir/", "out.stoker")  # litdata.optimize's output
    python -m stoker._pack_migrate SRC_DIR DST [--columns image=png] [--allow-pickle] [--json]
                                                  (what `stoker pack SRC_DIR DST` runs: main())

Column types (override any with columns={name: type}; docs/migrate.md has the whole table):

    MDS encoding / LitData data_format          stoker
    int, (u)int8-64, str_int / int, bool        int
    float16-64, str_float / float               float:nan
    str, str_decimal / str, text                str
    json / json                                 json
    jpeg, png / jpeg                            jpeg, png
    bytes / bytes, file, image                  jpeg or png when the first value is one (by
                                                its signature), else bytes
    pil / pil (raw pixels)                      ndarray:<dtype>: what np.asarray(image) gives
                                                (HxW or HxWxC); columns={name: "png"} stores
                                                lossless PNGs instead, for ImageLoader
    ndarray[:dtype[:shape]] / numpy, tensor,    ndarray[:dtype[:AxB]]
      no_header_numpy, no_header_tensor
    a TokensLoader dataset                      one column "tokens": tokens:<dtype>
    pkl / pickle                                refused: unpickling runs the files' code.
                                                allow_pickle=True stores the unpickled values
                                                as json; columns={name: "bytes"} keeps the
                                                pickles unread

Samples keep their order: stoker sample i is the source's sample i. Memory holds the shard
(MDS) or chunk (LitData) being read, and briefly the one before, whatever the dataset's size.
Needs cramjam for zstd, brotli and snappy files, xxhash for xxh* hashes, pyarrow for LitData's
Arrow-footer chunks (`pip install stoker[migrate]`).
"""
from __future__ import annotations

import json
import os
import pickle
from collections.abc import Callable, Iterator
from typing import Any, TypeAlias

from ._litdata import LitDataSource
from ._mds import MdsSource
from ._migrate_io import RawImage
from .optimize import IMAGE_SIGNATURES
from .sources import _pack_parser, _run_pack, _write, base_type

Source: TypeAlias = "MdsSource | LitDataSource"


def _index(src_dir: str | os.PathLike) -> tuple[str, dict]:
    root = os.fspath(src_dir)
    path = os.path.join(root, "index.json")
    if not os.path.isdir(root):
        raise FileNotFoundError(f"{root}: no such directory")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{root}: no index.json, so neither an MDS nor a LitData "
                                "dataset directory")
    try:
        with open(path, "rb") as f:
            index = json.load(f)
    except ValueError as e:
        raise ValueError(f"{path}: not JSON ({e})") from None
    if not isinstance(index, dict):
        raise ValueError(f"{path}: not an MDS or LitData index (a JSON object)")
    return root, index


def _open(src_dir: str | os.PathLike, want: str | None = None) -> Source:
    """The MDS or LitData dataset in `src_dir`, by its index.json ("shards": MDS, "chunks":
    LitData); `want` ("MDS", "LitData") refuses the other."""
    root, index = _index(src_dir)
    kind = "MDS" if "shards" in index else "LitData" if "chunks" in index else None
    if kind is None:
        raise ValueError(f"{os.path.join(root, 'index.json')}: neither an MDS index (no "
                         "\"shards\") nor a LitData one (no \"chunks\")")
    if want is not None and kind != want:
        other = "from_mds" if kind == "MDS" else "from_litdata"
        raise ValueError(f"{root} is a {kind} dataset, not a {want} one: use stoker.{other}")
    return MdsSource(root, index) if kind == "MDS" else LitDataSource(root, index)


def _image_kind(value: Any) -> str | None:
    head = bytes(value[:8]) if isinstance(value, (bytes, memoryview)) else b""
    return next((k for k, sig in IMAGE_SIGNATURES.items() if head.startswith(sig)), None)


def _pickle_refused(source: Source, name: str) -> ValueError:
    return ValueError(
        f"{source.index_path}: column {name!r} holds Python pickles; unpickling runs code from "
        "the files, so it is refused. If you trust them, allow_pickle=True (`stoker pack "
        "--allow-pickle`) stores each unpickled value as json; or columns="
        f"{{{name!r}: 'bytes'}} (`--columns {name}=bytes`) keeps the pickles' bytes unread")


def _column(source: Source, name: str, kind: str, first: Any, override: str | None,
            allow_pickle: bool) -> tuple[str, Callable[[Any], Any] | None]:
    """Column `name`'s stoker type and how its values convert, from the source's `kind`, its
    first value and the caller's `override`."""
    optional = "?" if kind.endswith("?") else ""
    kind = kind.rstrip("?")
    target = base_type(override) if override else None
    if kind == "pickle":
        if target == "bytes":
            return str(override), lambda v: v.data
        if not allow_pickle:
            raise _pickle_refused(source, name)
        return override or "json" + optional, lambda v: pickle.loads(v.data)  # noqa: S301
    if kind == "pil":
        if target not in (None, "png", "ndarray"):
            raise ValueError(f"columns: {name!r} holds PIL images: give png or ndarray[...]")
        if target == "png":
            return str(override), RawImage.png
        if override is None:
            try:
                dtype = first.array().dtype.name if isinstance(first, RawImage) else "uint8"
            except ValueError as e:
                raise ValueError(f"{source.root}: sample 0, column {name!r}: {e}") from None
            override = f"ndarray:{dtype}" + optional
        return override, RawImage.array
    if override is not None:
        return override, None
    image = _image_kind(first) if kind == "bytes" else None
    if image is not None:  # the first value is an image: every one must be (checked here, to
        # say how to keep the column as bytes)
        def check(value: Any, image: str | None = image) -> Any:
            if _image_kind(value) != image:
                raise ValueError(f"column {name!r} is not all {image} images, as its first "
                                 f"value is: give columns={{{name!r}: 'bytes'}} to keep it as "
                                 "bytes")
            return value
        return image + optional, check
    return kind + optional, None


def _convert(source: Source, output, columns: dict[str, str] | None, allow_pickle: bool,
             options: dict) -> dict:
    for name in columns or {}:
        if name not in source.columns:
            raise ValueError(f"columns: {name!r} is not a column of the input "
                             f"({list(source.columns)})")
    rows = source.rows()
    first = next(rows, None)  # its values decide some types (images, arrays' dtypes)
    types: dict[str, str] = {}
    convert: dict[str, Callable[[Any], Any]] = {}
    for name, kind in source.columns.items():
        types[name], fn = _column(source, name, kind, first.get(name) if first else None,
                                  (columns or {}).get(name), allow_pickle)
        if fn is not None:
            convert[name] = fn

    # Handed on, and not kept here: it holds the first shard's or chunk's bytes.
    head = [first] if first is not None else []
    del first

    def converted() -> Iterator[dict]:
        for i, row in enumerate(_chain(head, rows)):
            for name, fn in convert.items():
                value = row.get(name)
                if value is not None:
                    try:
                        row[name] = fn(value)
                    except Exception as e:  # noqa: BLE001  (unpickling raises anything)
                        # A pickle naming a class this Python lacks, truncated data, ...: named.
                        why = f"{type(e).__name__}: {e}" if not isinstance(e, ValueError) else e
                        raise ValueError(f"{source.root}: sample {i}, column {name!r}: {why}") \
                            from None
            yield row

    return _write(converted(), output, types, {}, options)


def _chain(head: list[dict], rows: Iterator[dict]) -> Iterator[dict]:
    while head:
        yield head.pop()
    yield from rows


def from_mds(src_dir, output, *, columns: dict[str, str] | None = None,
             allow_pickle: bool = False, **writer_options) -> dict:
    """Writes the MosaicML Streaming (MDS) dataset in `src_dir` (its index.json and shards) as
    a column dataset; returns stoker.Writer's summary. Shards are checked against the index's
    sizes and hashes (a mismatch is a stoker.CorruptionError naming the shard, and nothing is
    published). `columns` overrides types by name; `allow_pickle` lets "pkl" columns in (their
    values unpickled, as json); other keyword arguments are stoker.Writer's."""
    return _convert(_open(src_dir, "MDS"), output, columns, allow_pickle, writer_options)


def from_litdata(src_dir, output, *, columns: dict[str, str] | None = None,
                 allow_pickle: bool = False, **writer_options) -> dict:
    """Writes the LitData dataset in `src_dir` (litdata.optimize's output: index.json and
    chunk files) as a column dataset; returns stoker.Writer's summary. A dict sample's keys
    are the columns (nested ones joined by "_"), other samples' leaves "data" or "0", "1", ...;
    a TokensLoader dataset is one "tokens" column. `columns` overrides types by name;
    `allow_pickle` lets "pickle" leaves in (unpickled, as json); other keyword arguments are
    stoker.Writer's."""
    return _convert(_open(src_dir, "LitData"), output, columns, allow_pickle, writer_options)


def main(argv: list[str]) -> int:
    """`stoker pack SRC_DIR DST [options]` for an MDS or LitData directory (tools/cmd_pack.cc
    runs it as `python -m stoker._pack_migrate`). Exit status: 0, 1 (the pack failed), 2 (a bad
    command line)."""
    p = _pack_parser("Converts an MDS or LitData dataset directory (by its index.json).",
                     "the dataset directory (holding index.json)")
    p.add_argument("--allow-pickle", action="store_true", help="unpickle pkl / pickle columns "
                   "(runs code from the files: only for data you trust) and store them as json")
    a = p.parse_args(argv)
    if len(a.paths) != 2:
        p.error("give the MDS or LitData directory, then the destination")

    def pack(sources: list[str], output: str, **options) -> dict:
        source = _open(sources[0])
        columns = options.pop("columns")
        return _convert(source, output, columns, a.allow_pickle, options)

    return _run_pack(a, pack)
