"""What stoker.migrate's MDS and LitData readers share: a source file named by an index, read
whole and decompressed; the offset table both formats start their files with; and the two kinds
of value that the caller must decide about (raw PIL pixels, pickles).

Every structural fault is a stoker.CorruptionError naming the file, so that damaged input stops
the conversion (nothing is published) instead of being written as data.
"""
from __future__ import annotations

import bz2
import gzip
import os
import re
import struct
import zlib
from dataclasses import dataclass

import numpy as np

from ._core import CorruptionError  # type: ignore[attr-defined]  # see pyproject

_U32 = struct.Struct("<I")


def corrupt(path: str, what: str) -> CorruptionError:
    return CorruptionError(f"{path}: {what}")


def stoker_name(text: str) -> str:
    """A source's column name as a stoker one: characters other than letters, digits and "_"
    become "_" (stoker names are [A-Za-z0-9_]{1,64}, not starting with "__")."""
    return re.sub(r"[^A-Za-z0-9_]", "_", text)


def source_path(root: str, name: object, index: str) -> str:
    """`name` (from an index file) below `root`: a hostile index may not name files elsewhere."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"{index}: a file name is {name!r}, not a relative path")
    parts = name.replace("\\", "/").split("/")
    if os.path.isabs(name) or ".." in parts:
        raise ValueError(f"{index}: file {name!r} is not inside {root}")
    return os.path.join(root, *parts)


def read_file(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def decompress(codec: str, data: bytes, path: str) -> bytes:
    """`data` (a whole file) unpacked with `codec`: zstd, gz, bz2, br or snappy (MDS's names)."""
    try:
        if codec == "gz":
            return gzip.decompress(data)
        if codec == "bz2":
            return bz2.decompress(data)
    except (OSError, EOFError, ValueError, zlib.error) as e:
        raise corrupt(path, f"does not decompress as {codec}: {e}") from None
    kinds = {"zstd": "zstd", "br": "brotli", "snappy": "snappy"}
    if codec not in kinds:
        raise ValueError(f"{path}: compression {codec!r} is unknown (known: zstd, gz, bz2, br, "
                         "snappy)")
    try:
        import cramjam
    except ImportError:
        raise ImportError(f"{path} is {codec}-compressed: reading it needs cramjam (pip install "
                          "cramjam, or stoker[migrate])") from None
    module = getattr(cramjam, kinds[codec])
    try:
        # MDS writes snappy with python-snappy's compress(): the raw block format, no framing.
        out = module.decompress_raw(data) if codec == "snappy" else module.decompress(data)
    except cramjam.DecompressionError as e:
        raise corrupt(path, f"does not decompress as {codec}: {e}") from None
    return bytes(out)


def offset_table(data: memoryview, path: str, *, start: int = 0, end: int | None = None,
                 expect: int | None = None) -> list[int]:
    """The table both formats begin with: u32 N, then N+1 u32 absolute offsets (from `start`)
    that must rise from the table's end to `end` (default: the data's end). Returns them."""
    end = len(data) if end is None else end
    if end - start < 4:
        raise corrupt(path, f"{end - start} bytes: too short for its sample count")
    n = _U32.unpack_from(data, start)[0]
    table_end = start + 4 + 4 * (n + 1)
    if table_end > end:
        raise corrupt(path, f"says {n} samples, but their offsets do not fit in {end} bytes")
    if expect is not None and n != expect:
        raise corrupt(path, f"holds {n} samples where its index says {expect}")
    offsets = np.frombuffer(data, "<u4", n + 1, start + 4).astype(np.int64)
    if (offsets[0] < table_end - start or offsets[-1] != end - start
            or bool(np.any(np.diff(offsets) < 0))):
        raise corrupt(path, "its sample offsets are out of order or do not end at the file's end")
    return (offsets + start).tolist()


@dataclass(frozen=True)
class Pickled:
    """A value stored as a Python pickle: unpickling runs code from the file, so the caller
    decides (stoker.migrate refuses it unless allowed)."""
    data: bytes


# PIL mode: (NumPy dtype, channels) of np.asarray(image); "1" (one bit a pixel) is special.
_MODES = {"L": ("|u1", 0), "P": ("|u1", 0), "LA": ("|u1", 2), "La": ("|u1", 2),
          "PA": ("|u1", 2), "RGB": ("|u1", 3), "RGBA": ("|u1", 4), "RGBa": ("|u1", 4),
          "RGBX": ("|u1", 4), "CMYK": ("|u1", 4), "YCbCr": ("|u1", 3), "LAB": ("|u1", 3),
          "HSV": ("|u1", 3), "I;16": ("<u2", 0), "I;16L": ("<u2", 0), "I;16B": (">u2", 0),
          "I": ("<i4", 0), "F": ("<f4", 0)}


@dataclass(frozen=True)
class RawImage:
    """PIL's raw pixels, as MDS "pil" and LitData "pil" store them: u32 width, u32 height,
    u32 len(mode), the mode, then Image.tobytes()."""
    mode: str
    width: int
    height: int
    pixels: memoryview

    @classmethod
    def parse(cls, payload: memoryview, path: str) -> RawImage:
        if len(payload) < 12:
            raise corrupt(path, "a PIL image shorter than its 12-byte header")
        width, height, n = struct.unpack_from("<III", payload, 0)
        try:
            mode = str(payload[12:12 + n], "utf-8")
        except UnicodeDecodeError:
            raise corrupt(path, "a PIL image's mode is not UTF-8") from None
        image = cls(mode, width, height, payload[12 + n:])
        if mode == "1":
            size = height * ((width + 7) // 8)
        elif mode in _MODES:
            dtype, channels = _MODES[mode]
            size = width * height * max(channels, 1) * np.dtype(dtype).itemsize
        else:
            return image  # a mode this table lacks: array() refuses it, png() may still work
        if len(image.pixels) != size:
            raise corrupt(path, f"a {width}x{height} {mode} image of {len(image.pixels)} bytes "
                          f"(it needs {size})")
        return image

    def array(self) -> np.ndarray:
        """What np.asarray(image) gives: height x width (x channels), little-endian."""
        h, w = self.height, self.width
        if self.mode == "1":
            bits = np.frombuffer(self.pixels, np.uint8).reshape(h, (w + 7) // 8)
            return np.unpackbits(bits, axis=1)[:, :w].astype(bool)
        if self.mode not in _MODES:
            raise ValueError(f"a PIL image of mode {self.mode!r}, which has no array form here "
                             "(give the column the type png)")
        dtype, channels = _MODES[self.mode]
        shape = (h, w, channels) if channels else (h, w)
        out = np.frombuffer(self.pixels, dtype).reshape(shape)
        return out.astype(out.dtype.newbyteorder("<")) if dtype.startswith(">") else out

    def png(self) -> bytes:
        """The image as a PNG file (lossless), for a column the caller made "png"."""
        import io

        from PIL import Image
        out = io.BytesIO()
        Image.frombytes(self.mode, (self.width, self.height), bytes(self.pixels)).save(out, "PNG")
        return out.getvalue()
