"""stoker: packed, checksummed datasets that keep GPUs fed.

    import stoker
    stoker.pack("train/", "/data/train.stoker")        # or a list of .tar shards
    ds = stoker.Dataset("/data/train.stoker")
    data, label, path = ds[0]                           # bytes, int (-1: none), str
    ds.read("n01440764/x.JPEG"); ds.stat(0); ds.listdir("")
    report = stoker.verify("/data/train.stoker")        # report["ok"]

Errors: FileNotFoundError (no such file or dataset), ValueError (bad argument or hostile input),
PermissionError, stoker.CorruptionError (an OSError: a checksum failed; the message names the file
and chunk), OSError for other storage failures. Every call that reads or writes storage releases
the GIL. Datasets pickle as (uri, version) and reopen lazily, so they can be handed to
DataLoader worker processes.
"""
from __future__ import annotations

from ._core import CorruptionError, Dataset, pack, verify

__version__ = "0.1.0"
__all__ = ["CorruptionError", "Dataset", "pack", "verify", "__version__"]
