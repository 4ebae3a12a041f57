"""Reads a LitData "optimized" dataset directory for stoker.from_litdata, chunk by chunk
(docs/research/issue-40-engines.md §4, checked against litdata 0.2.76):

    index.json   {"chunks": [{filename, chunk_size, chunk_bytes, dim}], "config": {item_loader,
                  data_format, data_spec, compression, compression_level, encryption, ...}}
    a chunk      u32 N, u32 offsets[N+1], the items; PyTreeLoader's item is a u32 size for each
                 leaf, then the leaves; TokensLoader's is the tokens alone

compression "zstd[:level]" packs a whole chunk (file chunk-R-I.zstd[:level].bin, config
compression_level null or "chunk"), each group of items ("batch": an LDFZ01 directory of zstd
frames) or each item ("sample"). A chunk whose samples are dicts of plain values may keep them
only as an Arrow IPC footer (magic LDARW01) when the writer had pyarrow; litdata's reader then
takes the rows from it, and so does this one (pyarrow is needed for such chunks).

LitData stores no checksums: sizes, counts and offsets are checked (CorruptionError naming the
chunk), but a changed byte inside a value cannot be seen.
"""
from __future__ import annotations

import json
import os
import re
import struct
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ._litdata_values import FOOTER_FORMATS, NUMPY_DTYPES, TORCH_DTYPES, element_type, leaf_type
from ._migrate_io import corrupt, decompress, offset_table, read_file, source_path, stoker_name

_FRAMED_MAGIC = b"LDFZ01\0\0"
_FRAMED_PREFIX = struct.Struct("<8sHHIII")  # magic, version, flags, items, items a frame, frames
_FRAME = struct.Struct("<IIQII")  # first item, items, offset, compressed, uncompressed size
_FOOTER_MAGIC = b"LDARW01\0"
_WHOLE_FILE = re.compile(r"\.zstd(:\d+)?\.bin$")
_DICTS = ("builtins.dict", "collections.OrderedDict")
_SEQUENCES = ("builtins.list", "builtins.tuple")


def _leaf_paths(spec_text: str | None, where: str) -> list[tuple]:
    """The path (keys and indices) of every leaf of a data_spec, in flatten order."""
    if spec_text is None:
        return [()]
    try:
        protocol, root = json.loads(spec_text)
    except (ValueError, TypeError):
        raise ValueError(f"{where}: data_spec is not a serialized pytree spec") from None
    paths: list[tuple] = []

    def walk(node: dict, path: tuple) -> None:
        kind, children = node.get("type"), node.get("children_spec") or []
        if kind is None:
            paths.append(path)
            return
        if kind in _DICTS:
            keys = json.loads(node["context"])
        elif kind in _SEQUENCES:
            keys = list(range(len(children)))
        else:
            raise ValueError(f"{where}: samples are {kind} trees; dicts, lists, tuples and "
                             "single values convert")
        if len(keys) != len(children):
            raise ValueError(f"{where}: data_spec has {len(keys)} keys, {len(children)} children")
        for key, child in zip(keys, children, strict=True):
            walk(child, path + (key,))

    walk(root, ())
    return paths


def column_name(path: tuple) -> str:
    """A leaf's column: its keys joined by "_" ("meta_a"); a bare value is "data", a tuple's
    items "0", "1", ..."""
    return stoker_name("_".join(str(p) for p in path) if path else "data")


def _optional(types: Any, path: tuple) -> bool:
    """Whether config.types (litdata fuses it over every sample) says a leaf may be missing:
    the leaf, or a dict it is in, is optional."""
    node = types
    for key in path:
        if isinstance(node, dict) and "type" not in node:  # a struct's field map (the top)
            node = node.get(str(key))
        elif isinstance(node, dict) and node.get("type") == "struct":
            node = (node.get("fields") or {}).get(str(key))
        else:
            return False
        if isinstance(node, dict) and node.get("optional"):
            return True
    return False


class LitDataSource:
    """The dataset at `root`: `columns` {name: stoker type, or "pil"/"pickle"}, `samples`, and
    rows() yielding each sample as {name: value}, one chunk in memory at a time."""

    def __init__(self, root: str, index: dict):
        self.root, self.index_path = root, os.path.join(root, "index.json")
        config = index.get("config")
        if not isinstance(config, dict) or not isinstance(index.get("chunks"), list):
            raise ValueError(f"{self.index_path}: not a LitData index (no config)")
        self.chunks: list[dict] = index["chunks"]
        self.loader = config.get("item_loader", "PyTreeLoader")
        if config.get("encryption"):
            raise ValueError(f"{self.index_path}: the dataset is encrypted")
        if self.loader not in ("PyTreeLoader", "TokensLoader"):
            raise ValueError(f"{self.index_path}: item_loader {self.loader!r} (PyTreeLoader and "
                             "TokensLoader datasets convert; a ParquetLoader index's files are "
                             "Parquet: use stoker.from_parquet)")
        self.level = config.get("compression_level") or "chunk"
        self.formats: list[str] = config.get("data_format") or []
        self.samples = sum(int(c.get("chunk_size", 0)) for c in self.chunks)
        if self.loader == "TokensLoader":
            self._init_tokens()
            return
        paths = _leaf_paths(config.get("data_spec"), self.index_path)
        if len(paths) != len(self.formats):
            raise ValueError(f"{self.index_path}: {len(paths)} leaves but "
                             f"{len(self.formats)} data formats")
        names = [column_name(p) for p in paths]
        if len(set(names)) != len(names) or any(n.startswith("__") or len(n) > 64 for n in names):
            raise ValueError(f"{self.index_path}: the leaves {paths} do not make distinct "
                             "stoker column names")
        self.paths = paths
        types = config.get("types")
        top = types if isinstance(types, dict) and "type" not in types else None
        if top is not None and paths and paths[0]:
            extra = set(top) - {str(p[0]) for p in paths}
            if extra:  # fields that were not in the first sample: litdata kept them in footers
                raise ValueError(f"{self.index_path}: fields {sorted(extra)} are missing from "
                                 "the first sample, so litdata stored them apart; not converted")
        leaves = [leaf_type(f) for f in self.formats]
        self.decoders = [decode for _, decode in leaves]
        self.columns = {name: kind + ("?" if _optional(types, path) else "")
                        for name, path, (kind, _) in zip(names, paths, leaves, strict=True)}

    def _init_tokens(self) -> None:
        if len(self.formats) != 1 or self.formats[0].partition(":")[0] not in (
                "no_header_tensor", "no_header_numpy"):
            raise ValueError(f"{self.index_path}: a TokensLoader dataset of data_format "
                             f"{self.formats} (one 1-D array a sample converts)")
        table = TORCH_DTYPES if self.formats[0].startswith("no_header_tensor") else NUMPY_DTYPES
        self.token_type = element_type(self.formats[0], table)
        if self.token_type not in ("int8", "int16", "int32", "int64", "uint8", "uint16",
                                   "uint32", "uint64"):
            raise ValueError(f"{self.index_path}: tokens of type {self.token_type} (integers "
                             "convert)")
        self.columns = {"tokens": f"tokens:{self.token_type}"}

    def _items(self, chunk: dict) -> tuple[str, list[memoryview], Any]:
        """A chunk's path, its items' bytes, and its Arrow footer (a pyarrow Table) or None."""
        path = source_path(self.root, chunk.get("filename"), self.index_path)
        data = read_file(path)
        if _WHOLE_FILE.search(path):
            data = decompress("zstd", data, path)
        if chunk.get("chunk_bytes") is not None and len(data) != chunk["chunk_bytes"]:
            raise corrupt(path, f"{len(data)} bytes where the index says {chunk['chunk_bytes']}")
        view, expect = memoryview(data), int(chunk.get("chunk_size", 0))
        if data[:8] == _FRAMED_MAGIC:
            return path, _framed(view, path, expect), None
        end, footer = len(data), None
        if data[-8:] == _FOOTER_MAGIC and len(data) >= 12:
            size = struct.unpack_from("<I", view, len(data) - 12)[0]
            end = len(data) - 12 - size
            if end < 0:
                raise corrupt(path, "its Arrow footer is longer than the file")
            footer = _footer(view[end:end + size], path, expect)
        offsets = offset_table(view, path, end=end, expect=expect)
        items = [view[a:b] for a, b in zip(offsets, offsets[1:], strict=False)]
        if self.level == "sample":  # each item its own zstd frame
            items = [memoryview(decompress("zstd", bytes(item), path)) for item in items]
        return path, items, footer

    def rows(self) -> Iterator[dict]:
        for chunk in self.chunks:
            # A generator a chunk, so that its bytes are let go before the next one is read.
            yield from self._chunk_rows(chunk)

    def _chunk_rows(self, chunk: dict) -> Iterator[dict]:
        path, items, footer = self._items(chunk)
        if self.loader == "TokensLoader":
            yield from self._token_rows(chunk, path, items)
        elif footer is not None:
            yield from self._footer_rows(path, footer)
        else:
            yield from self._tree_rows(path, items)

    def _token_rows(self, chunk: dict, path: str, items: list[memoryview]) -> Iterator[dict]:
        size = np.dtype(self.token_type).itemsize
        if chunk.get("dim") is not None and sum(len(i) for i in items) != chunk["dim"] * size:
            raise corrupt(path, f"holds {sum(len(i) for i in items) // size} tokens where the "
                          f"index says {chunk['dim']}")
        for k, item in enumerate(items):
            if len(item) % size:
                raise corrupt(path, f"item {k}: {len(item)} bytes of {self.token_type} tokens")
            yield {"tokens": np.frombuffer(item, "<" + np.dtype(self.token_type).str[1:]
                                           if size > 1 else self.token_type)}

    def _tree_rows(self, path: str, items: list[memoryview]) -> Iterator[dict]:
        names, n = list(self.columns), len(self.decoders)
        sizes = struct.Struct("<" + "I" * n)
        for k, item in enumerate(items):
            if len(item) < sizes.size:
                raise corrupt(path, f"item {k} is shorter than its leaves' sizes")
            lengths = sizes.unpack_from(item, 0)
            if sizes.size + sum(lengths) != len(item):
                raise corrupt(path, f"item {k}'s leaves do not add up to its {len(item)} bytes")
            at, row = sizes.size, {}
            for name, decode, length in zip(names, self.decoders, lengths, strict=True):
                try:
                    row[name] = decode(item[at:at + length], path)
                except (ValueError, IndexError, struct.error) as e:  # JSON, UTF-8 too
                    raise corrupt(path, f"item {k}, column {name!r}: {e}") from None
                at += length
            yield row

    def _footer_rows(self, path: str, table: Any) -> Iterator[dict]:
        names = list(self.columns)
        converts: list[Callable[[Any], Any]] = []
        for f in self.formats:
            if f.partition(":")[0] not in FOOTER_FORMATS:
                raise corrupt(path, f"an Arrow footer beside a {f!r} leaf")
            converts.append(FOOTER_FORMATS[f.partition(":")[0]])
        for batch in table.to_batches():
            for sample in batch.to_pylist():
                row = {}
                for name, leaf, convert in zip(names, self.paths, converts, strict=True):
                    value: Any = sample
                    for key in leaf:
                        value = value.get(str(key)) if isinstance(value, dict) else None
                    row[name] = None if value is None else convert(value)
                yield row


def _framed(view: memoryview, path: str, expect: int) -> list[memoryview]:
    """The items of a "batch"-compressed chunk: offsets into the items' bytes, then zstd
    frames that unpack to those bytes in order."""
    if len(view) < _FRAMED_PREFIX.size:
        raise corrupt(path, "a framed chunk shorter than its header")
    _, version, _, n, _, frames = _FRAMED_PREFIX.unpack_from(view, 0)
    if version != 1:
        raise ValueError(f"{path}: framed zstd chunk of version {version} (1 converts)")
    if n != expect:
        raise corrupt(path, f"holds {n} samples where its index says {expect}")
    table = _FRAMED_PREFIX.size + 4 * (n + 1)
    if table + _FRAME.size * frames > len(view):
        raise corrupt(path, "its frame table does not fit")
    offsets = np.frombuffer(view, "<u4", n + 1, _FRAMED_PREFIX.size).astype(np.int64).tolist()
    parts, item = [], 0
    for i in range(frames):
        first, count, at, packed, size = _FRAME.unpack_from(view, table + i * _FRAME.size)
        if first != item or at + packed > len(view):
            raise corrupt(path, f"frame {i} is out of place")
        part = decompress("zstd", bytes(view[at:at + packed]), path)
        if len(part) != size:
            raise corrupt(path, f"frame {i} unpacks to {len(part)} bytes, not {size}")
        parts.append(part)
        item += count
    data = memoryview(b"".join(parts))
    if item != n or offsets[0] != 0 or offsets[-1] != len(data) or any(
            a > b for a, b in zip(offsets, offsets[1:], strict=False)):
        raise corrupt(path, "its frames do not hold its items")
    return [data[a:b] for a, b in zip(offsets, offsets[1:], strict=False)]


def _footer(ipc: memoryview, path: str, expect: int) -> Any:
    try:
        import pyarrow as pa
    except ImportError:
        raise ImportError(f"{path} keeps its samples as an Arrow table: reading it needs "
                          "pyarrow (pip install pyarrow, or stoker[migrate])") from None
    try:
        buffer = pa.py_buffer(ipc)
        is_file = bytes(ipc[:6]) == b"ARROW1"
        table = (pa.ipc.open_file(buffer) if is_file else pa.ipc.open_stream(buffer)).read_all()
    except (pa.ArrowInvalid, OSError, ValueError) as e:
        raise corrupt(path, f"its Arrow footer does not read: {e}") from None
    if table.num_rows != expect:
        raise corrupt(path, f"its Arrow footer holds {table.num_rows} rows where the index "
                      f"says {expect}")
    return table
