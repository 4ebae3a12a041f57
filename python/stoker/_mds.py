"""Reads a MosaicML Streaming (MDS) dataset directory for stoker.from_mds, shard by shard, as
(documented in docs/research/issue-40-engines.md §3 and checked against mosaicml-streaming 0.13):

    index.json   {"version": 2, "shards": [{column_names, column_encodings, column_sizes,
                  compression, format: "mds", hashes, raw_data, zip_data, samples, ...}]}
    a shard      u32 N, u32 offsets[N+1], the writer's config JSON, then the samples; a sample is
                 a u32 length for each variable-size column, then every column's bytes in order

A shard's hashes (hashlib or xxhash names) are checked when the index has them, its sizes and
offsets always; a fault is a CorruptionError naming the shard's file.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ._migrate_io import (
    Pickled,
    RawImage,
    corrupt,
    decompress,
    offset_table,
    read_file,
    source_path,
    stoker_name,
)

_SCALARS = {"int": "<q", "int8": "<b", "int16": "<h", "int32": "<i", "int64": "<q",
            "uint8": "<B", "uint16": "<H", "uint32": "<I", "uint64": "<Q"}
_FLOATS = {"float16": "<e", "float32": "<f", "float64": "<d"}
# MDS's dtype codes in an ndarray value whose encoding does not fix the dtype.
_NDARRAY_DTYPES = {8: "uint8", 9: "int8", 16: "uint16", 17: "int16", 18: "float16",
                   32: "uint32", 33: "int32", 34: "float32", 64: "uint64", 65: "int64",
                   66: "float64"}
_SHAPE_DTYPES = ("<u1", "<u2", "<u4", "<u8")
_LISTS = ("jpeg_array", "jpegarray", "list[pil]", "list[jpeg]", "list[png]")

Decoder = Callable[[memoryview, str], Any]


def _ndarray(encoding: str) -> tuple[str, Decoder, int | None]:
    """An "ndarray[:dtype[:d0,d1,...]]" encoding's stoker type, decoder and fixed size."""
    args = encoding.split(":")[1:]
    if len(args) > 2 or (args and args[0] not in _NDARRAY_DTYPES.values()):
        raise ValueError(f"MDS encoding {encoding!r} is not ndarray[:dtype[:d0,d1,...]]")
    dtype = args[0] if args else None
    shape = tuple(int(d) for d in args[1].split(",")) if len(args) == 2 else None

    def decode(data: memoryview, path: str) -> np.ndarray:
        at, kind, dims = 0, dtype, shape
        if kind is None:
            kind = _NDARRAY_DTYPES.get(data[0]) if len(data) else None
            if kind is None:
                raise corrupt(path, "an ndarray value with an unknown dtype code")
            at = 1
        if dims is None:
            ndim, code = data[at] >> 2, data[at] & 3
            dims = tuple(np.frombuffer(data, _SHAPE_DTYPES[code], ndim, at + 1).tolist())
            at += 1 + ndim * (1 << code)
        array = np.frombuffer(data[at:], kind)
        if array.size != int(np.prod(dims)):
            raise corrupt(path, f"an ndarray value of {array.size} elements, not {dims}")
        return array.reshape(dims)

    kind = "ndarray" if dtype is None else f"ndarray:{dtype}"
    if dtype is not None and shape is not None:
        kind += ":" + "x".join(map(str, shape))
        return kind, decode, int(np.prod(shape)) * np.dtype(dtype).itemsize
    return kind, decode, None


def _text(data: memoryview) -> str:
    return str(data, "utf-8")


def encoding_type(encoding: str) -> tuple[str, Decoder, int | None]:
    """An MDS encoding's stoker column type ("pil" and "pickle" are left to the caller), how a
    value's bytes decode, and its fixed size (None: variable)."""
    if encoding in _SCALARS:
        fmt = struct.Struct(_SCALARS[encoding])
        return "int", lambda d, p: fmt.unpack(d)[0], fmt.size
    if encoding in _FLOATS:
        fmt = struct.Struct(_FLOATS[encoding])
        return "float:nan", lambda d, p: fmt.unpack(d)[0], fmt.size
    simple: dict[str, tuple[str, Decoder]] = {
        "bytes": ("bytes", lambda d, p: d),
        "jpeg": ("jpeg", lambda d, p: d),
        "png": ("png", lambda d, p: d),
        "str": ("str", lambda d, p: _text(d)),
        "str_int": ("int", lambda d, p: int(_text(d))),
        "str_float": ("float:nan", lambda d, p: float(_text(d))),
        "str_decimal": ("str", lambda d, p: _text(d)),  # the decimal's exact text
        "json": ("json", lambda d, p: json.loads(_text(d))),
        "pil": ("pil", RawImage.parse),
        "pkl": ("pickle", lambda d, p: Pickled(bytes(d))),
    }
    if encoding in simple:
        kind, decode = simple[encoding]
        return kind, decode, None
    if encoding == "ndarray" or encoding.startswith("ndarray:"):
        return _ndarray(encoding)
    if encoding in _LISTS:
        raise ValueError(f"MDS encoding {encoding!r} (a list of images) has no stoker column "
                         "type")
    raise ValueError(f"MDS encoding {encoding!r} is unknown (mosaicml-streaming 0.13's are "
                     "bytes, str, int, (u)int8-64, float16-64, str_int, str_float, "
                     "str_decimal, pil, jpeg, png, pkl, json, ndarray)")


def _digest(algorithm: str, data: bytes) -> str:
    if algorithm.startswith("xxh"):
        try:
            import xxhash
        except ImportError:
            raise ImportError(f"checking {algorithm} hashes needs xxhash (pip install xxhash, or "
                              "stoker[migrate])") from None
        return getattr(xxhash, algorithm)(data).hexdigest()
    return hashlib.new(algorithm, data).hexdigest()


def _check(data: bytes, entry: dict, path: str) -> None:
    """The size and every hash the index gives for this file."""
    if entry.get("bytes") is not None and len(data) != entry["bytes"]:
        raise corrupt(path, f"{len(data)} bytes where the index says {entry['bytes']}")
    for algorithm, want in sorted((entry.get("hashes") or {}).items()):
        if _digest(algorithm, data) != want:
            raise corrupt(path, f"its {algorithm} hash differs from the index's")


class MdsSource:
    """The dataset at `root`: `columns` {name: stoker type, or "pil"/"pickle"}, `samples`, and
    rows() yielding each sample as {name: value}, one shard in memory at a time."""

    def __init__(self, root: str, index: dict):
        self.root, self.index_path = root, os.path.join(root, "index.json")
        if index.get("version") != 2 or not isinstance(index.get("shards"), list):
            raise ValueError(f"{self.index_path}: not an MDS index of version 2 "
                             f"(version {index.get('version')!r})")
        self.shards: list[dict] = index["shards"]
        if not self.shards:
            raise ValueError(f"{self.index_path}: no shards")
        first = self.shards[0] if self.shards else {}
        names, encodings = first.get("column_names", []), first.get("column_encodings", [])
        for i, shard in enumerate(self.shards):
            if shard.get("format") != "mds":
                raise ValueError(f"{self.index_path}: shard {i} is of format "
                                 f"{shard.get('format')!r}; only MDS shards convert")
            if (shard.get("column_names"), shard.get("column_encodings")) != (names, encodings):
                raise ValueError(f"{self.index_path}: shard {i} has other columns than shard 0")
        types = [encoding_type(e) for e in encodings]
        sizes = [size for _, _, size in types]
        if first and first.get("column_sizes") != sizes:
            raise ValueError(f"{self.index_path}: column_sizes {first.get('column_sizes')} do "
                             f"not fit the encodings {encodings}")
        columns = [stoker_name(name) for name in names]
        if len(set(columns)) != len(columns) or any(
                not n or n.startswith("__") or len(n) > 64 for n in columns):
            raise ValueError(f"{self.index_path}: the columns {names} do not make distinct "
                             "stoker column names")
        self.columns = {name: kind for name, (kind, _, _) in zip(columns, types, strict=True)}
        self.samples = sum(int(shard.get("samples", 0)) for shard in self.shards)
        self._layout = [(name, decode, size)
                        for name, (_, decode, size) in zip(columns, types, strict=True)]

    def _load(self, shard: dict) -> tuple[str, bytes]:
        """A shard's bytes, checked and decompressed. Where the compressed file is gone but
        the raw one is there (streaming unpacked it into a local cache), the raw one is read."""
        raw, packed = shard.get("raw_data") or {}, shard.get("zip_data")
        raw_path = source_path(self.root, raw.get("basename"), self.index_path)
        path = raw_path
        if packed:
            path = source_path(self.root, packed.get("basename"), self.index_path)
            if not os.path.exists(path) and os.path.exists(raw_path):
                path = raw_path
        data = read_file(path)
        if packed and path != raw_path:
            _check(data, packed, path)
            data = decompress(str(shard.get("compression")).split(":")[0], data, path)
        _check(data, raw, path)
        return path, data

    def rows(self) -> Iterator[dict]:
        for shard in self.shards:
            # A generator a shard, so that its bytes are let go before the next one is read.
            yield from self._shard_rows(shard)

    def _shard_rows(self, shard: dict) -> Iterator[dict]:
        layout = self._layout
        variable = [i for i, (_, _, size) in enumerate(layout) if size is None]
        lengths = struct.Struct("<" + "I" * len(variable))
        path, data = self._load(shard)
        view = memoryview(data)
        offsets = offset_table(view, path, expect=int(shard.get("samples", 0)))
        for k in range(len(offsets) - 1):
            begin, end = offsets[k], offsets[k + 1]
            sizes: list = [size for _, _, size in layout]
            if end - begin < lengths.size:
                raise corrupt(path, f"sample {k} is shorter than its lengths")
            for i, n in zip(variable, lengths.unpack_from(view, begin), strict=True):
                sizes[i] = n
            if lengths.size + sum(sizes) != end - begin:
                raise corrupt(path, f"sample {k}'s columns do not add up to its "
                              f"{end - begin} bytes")
            at, row = begin + lengths.size, {}
            for (name, decode, _), n in zip(layout, sizes, strict=True):
                try:
                    row[name] = decode(view[at:at + n], path)
                except (ValueError, IndexError, struct.error) as e:  # JSON, UTF-8 too
                    raise corrupt(path, f"sample {k}, column {name!r}: {e}") from None
                at += n
            yield row
