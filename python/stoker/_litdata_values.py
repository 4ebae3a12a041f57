"""How LitData (litdata 0.2.x, checked against 0.2.76) serializes one leaf of a sample, for
stoker.from_litdata: each data_format name's stoker column type and decoder. A decoder takes
the leaf's bytes and the chunk's path (for errors) and gives a plain Python or NumPy value.
"""
from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import Any

import numpy as np

from ._migrate_io import Pickled, RawImage, corrupt

Decoder = Callable[[memoryview, str], Any]

# litdata.constants._NUMPY_DTYPES_MAPPING, by position (object, bytes, str, void: none here).
NUMPY_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                "float16", "float32", "float64", "complex64", "complex128", "bool")
# litdata.constants._TORCH_DTYPES_MAPPING (aliases included); bfloat16 is read as float32.
TORCH_DTYPES = ("float32", "float32", "float64", "float64", "complex64", "complex64",
                "complex128", "complex128", "float16", "float16", "bfloat16", "uint8", "int8",
                "int16", "int16", "int32", "int32", "int64", "int64", "bool", "uint16")


def _array(data: memoryview, dtype: str, shape: tuple[int, ...] | None, path: str) -> np.ndarray:
    if dtype == "bfloat16":  # NumPy has no bfloat16: its bits are a float32's upper half
        if len(data) % 2:
            raise corrupt(path, "a bfloat16 tensor of an odd number of bytes")
        out = (np.frombuffer(data, "<u2").astype("<u4") << 16).view("<f4")
    else:
        item = np.dtype(dtype).itemsize
        if len(data) % item:
            raise corrupt(path, f"a {dtype} array of {len(data)} bytes")
        out = np.frombuffer(data, "<" + np.dtype(dtype).str[1:] if item > 1 else dtype)
    if shape is not None:
        if out.size != int(np.prod(shape)):
            raise corrupt(path, f"an array of {out.size} elements, not {shape}")
        out = out.reshape(shape)
    return out


def _numpy(data: memoryview, path: str) -> np.ndarray:
    """"numpy": u32 dtype index, u32 ndim, u32 dims (little-endian), then the elements."""
    index, ndim = struct.unpack_from("<II", data, 0)
    if index in (14, 15, 16, 17):  # TypeError: not corruption, but no stoker type
        raise TypeError(f"{path}: a NumPy array of object, bytes, str or void elements (dtype "
                        f"index {index}) has no stoker column type")
    if index >= len(NUMPY_DTYPES):
        raise corrupt(path, f"a NumPy array of dtype index {index}")
    shape = struct.unpack_from(f"<{ndim}I", data, 8)
    return _array(data[8 + 4 * ndim:], NUMPY_DTYPES[index], shape, path)


def _tensor(data: memoryview, path: str) -> np.ndarray:
    """"tensor": a big-endian header (u32 dtype index, u32 ndim, dims), native elements."""
    index, ndim = struct.unpack_from(">II", data, 0)
    if index >= len(TORCH_DTYPES):
        raise corrupt(path, f"a tensor of dtype index {index}")
    shape = struct.unpack_from(f">{ndim}I", data, 8)
    return _array(data[8 + 4 * ndim:], TORCH_DTYPES[index], shape, path)


def element_type(name: str, table: tuple[str, ...]) -> str:
    """The NumPy dtype of "no_header_numpy:<i>" / "no_header_tensor:<i>"."""
    try:
        return table[int(name.partition(":")[2])]
    except (ValueError, IndexError):
        raise ValueError(f"LitData data_format {name!r}: unknown element type") from None


# litdata's compact JSON for "json" leaves (serializers._nested_dumps): a tag byte, then the
# value; anything above 0x20 first is plain JSON text (older writers).
_U32, _I64, _F64 = struct.Struct("<I"), struct.Struct("<q"), struct.Struct("<d")


def _utf8(raw: memoryview, at: int) -> tuple[str, int]:
    n = _U32.unpack_from(raw, at)[0]
    return str(raw[at + 4:at + 4 + n], "utf-8"), at + 4 + n


def _nested(raw: memoryview, at: int) -> tuple[Any, int]:
    tag = raw[at]
    if tag == 0:  # JSON text
        n = _U32.unpack_from(raw, at + 1)[0]
        return json.loads(str(raw[at + 5:at + 5 + n], "utf-8")), at + 5 + n
    if tag in (1, 2, 3, 4):  # a list of strs, int64s, float64s, bools
        n, at = _U32.unpack_from(raw, at + 1)[0], at + 5
        if tag == 1:
            out: list = []
            for _ in range(n):
                text, at = _utf8(raw, at)
                out.append(text)
            return out, at
        if tag == 4:
            return [bool(b) for b in raw[at:at + n]], at + n
        values = np.frombuffer(raw, "<i8" if tag == 2 else "<f8", n, at).tolist()
        return values, at + 8 * n
    if tag == 5:  # a dict of str keys
        n, at = _U32.unpack_from(raw, at + 1)[0], at + 5
        mapping = {}
        for _ in range(n):
            key, at = _utf8(raw, at)
            mapping[key], at = _nested(raw, at)
        return mapping, at
    if tag == 6:  # a list of records with the same str keys and scalar values
        n, keys_n = struct.unpack_from("<II", raw, at + 1)
        at, keys = at + 9, []
        for _ in range(keys_n):
            key, at = _utf8(raw, at)
            keys.append(key)
        rows = []
        for _ in range(n):
            row: dict = {}
            for key in keys:
                kind, at = raw[at], at + 1
                if kind == 0x10:
                    row[key] = None
                elif kind == 0x11:
                    row[key], at = _utf8(raw, at)
                elif kind in (0x12, 0x13):
                    row[key] = (_I64 if kind == 0x12 else _F64).unpack_from(raw, at)[0]
                    at += 8
                elif kind == 0x14:
                    row[key], at = bool(raw[at]), at + 1
                else:
                    raise ValueError(f"record value tag {kind}")
            rows.append(row)
        return rows, at
    if tag == 7:
        return _utf8(raw, at + 1)
    if tag in (8, 9):
        return (_I64 if tag == 8 else _F64).unpack_from(raw, at + 1)[0], at + 9
    if tag == 10:
        return bool(raw[at + 1]), at + 2
    if tag == 11:
        return None, at + 1
    raise ValueError(f"nested value tag {tag}")


def _json(data: memoryview, path: str) -> Any:
    if not len(data) or data[0] > 0x20:
        return json.loads(str(data, "utf-8"))
    value, end = _nested(data, 0)
    if end != len(data):
        raise corrupt(path, f"a json leaf of {len(data)} bytes holds {end}")
    return value


def _scalar(fmt: str) -> Decoder:
    s = struct.Struct(fmt)
    return lambda d, p: s.unpack(d)[0]


def leaf_type(name: str) -> tuple[str, Decoder]:
    """A data_format name's stoker column type ("pil", "pickle": the caller's) and decoder."""
    base = name.partition(":")[0]
    if base in ("no_header_numpy", "no_header_tensor"):
        dtype = element_type(name, NUMPY_DTYPES if base == "no_header_numpy" else TORCH_DTYPES)
        kind = "float32" if dtype == "bfloat16" else dtype
        return f"ndarray:{kind}", lambda d, p: _array(d, dtype, None, p)
    simple: dict[str, tuple[str, Decoder]] = {
        "str": ("str", lambda d, p: str(d, "utf-8")),
        "text": ("str", lambda d, p: str(d, "utf-8")),
        "bool": ("int", lambda d, p: int(d[0] != 0)),
        "int": ("int", _scalar("<q")),
        "float": ("float:nan", _scalar("<d")),
        "bytes": ("bytes", lambda d, p: d),
        "file": ("bytes", lambda d, p: d),  # the file's bytes ("file:<ext>")
        "image": ("bytes", lambda d, p: d),  # an image file's bytes ("image:<ext>")
        "jpeg": ("jpeg", lambda d, p: d),
        "pil": ("pil", RawImage.parse),
        "numpy": ("ndarray", _numpy),
        "tensor": ("ndarray", _tensor),
        "json": ("json", _json),
        "pickle": ("pickle", lambda d, p: Pickled(bytes(d))),
    }
    if base in simple:
        return simple[base]
    raise ValueError(f"LitData data_format {name!r} has no stoker column type (converted: "
                     f"{', '.join(sorted(simple))}, no_header_numpy, no_header_tensor)")


# What a leaf of these formats is in an Arrow footer row (the same Python value, or a bool).
FOOTER_FORMATS: dict[str, Callable[[Any], Any]] = {
    "str": str, "text": str, "int": int, "float": float, "bool": int, "bytes": bytes,
    "json": lambda v: v}
