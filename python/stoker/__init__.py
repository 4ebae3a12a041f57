"""stoker: packed, checksummed datasets that keep GPUs fed.

    import stoker
    stoker.pack("train/", "/data/train.stoker")        # or a list of .tar shards
    ds = stoker.Dataset("/data/train.stoker")
    data, label, path = ds[0]                           # bytes, int (-1: none), str
    ds.read("n01440764/x.JPEG"); ds.stat(0); ds.listdir("")
    report = stoker.verify("/data/train.stoker")        # report["ok"]

    with stoker.Writer("/data/caps.stoker", columns={"image": "jpeg", "label": "int",
                                                      "caption": "str", "emb": "ndarray"}) as w:
        w.write({"image": jpeg_bytes, "label": 3, "caption": "a cat", "emb": vector})
    stoker.Dataset("/data/caps.stoker")[0]              # {"image": b"...", "label": 3, ...}

    loader = stoker.Loader("/data/train.stoker", batch_size=256, shuffle="chunk",
                           transform=decode, collate=collate)   # this rank's share
    for batch in loader: ...                            # epochs 0, 1, ... (or set_epoch(e))
    state = loader.state_dict(); loader.load_state_dict(state)  # exact, any world size

    images = stoker.ImageLoader("/data/train.stoker", batch_size=256, train=True, size=224)
    for x, y in images: ...                             # decoded + augmented in C++ threads

    import stoker.torch                                 # torch.utils.data adapters
    stoker.torch.StokerIterableDataset(uri, ...); stoker.torch.StokerMapDataset(uri)

Loading: stoker.Loader iterates one rank's share of an epoch in the sampler's order
(docs/sampler.md: shuffle "chunk", "full" or "sequential"); rank and world size default to
torchrun's RANK and WORLD_SIZE. Its state_dict() is a position in the epoch's global order, so
load_state_dict() continues exactly with any number of ranks. stoker.Sampler is the bare order
(global_order, plan_rank). stoker.torch (imported on first use; `import stoker` does not import
torch) wraps datasets for torch.utils.data.DataLoader with any number of workers.

Errors: FileNotFoundError (no such file or dataset), ValueError (bad argument or hostile input),
PermissionError, stoker.CorruptionError (an OSError: a checksum failed; the message names the file
and chunk), OSError for other storage failures. Every call that reads or writes storage, and every
sampler computation, releases the GIL. Datasets pickle as (uri, version) and reopen lazily, so they
can be handed to DataLoader worker processes.
"""
from __future__ import annotations

import importlib

try:
    from ._core import (
        CorruptionError,
        Sampler,
        Writer,
        byte_size,
        commit,
        discard_parts,
        pack,
        shuffle_report,
        shuffle_unit,
        verify,
    )
except ImportError as _error:  # the compiled part: a too-old glibc is explained (docs/install.md)
    from ._glibc import explain_import_error
    raise explain_import_error(_error) from _error
from . import _log  # noqa: F401  (the C++ library's log lines go to logging)
from .image_loader import ImageLoader
from .loader import Loader, collate_columns
from .metrics import serve_metrics
from .migrate import from_litdata, from_mds
from .mix import Mix
from .optimize import optimize
from .sources import from_huggingface, from_parquet
from .stalls import stall_report
from .token_loader import TokenLoader
from .tracing import Trace, start_from_environment, trace
from .views import Dataset, DatasetView

__version__ = "0.1.0"
__all__ = ["CorruptionError", "Dataset", "DatasetView", "ImageLoader", "Loader", "Mix", "Sampler",
           "TokenLoader", "Writer", "byte_size", "collate_columns", "commit", "discard_parts",
           "from_huggingface", "from_litdata", "from_mds", "from_parquet", "optimize", "pack",
           "serve_metrics",
           "shuffle_report", "shuffle_unit", "stall_report",
           "trace", "Trace", "verify",
           "__version__"]


def __getattr__(name: str):
    # `stoker.torch` without an explicit import, still without importing torch up front.
    if name == "torch":
        return importlib.import_module(".torch", __name__)
    raise AttributeError(f"module 'stoker' has no attribute {name!r}")


# STOKER_TRACE=path traces the whole process (stoker.tracing).
start_from_environment()
