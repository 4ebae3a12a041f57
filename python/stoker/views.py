"""Subsets and filters of a dataset (issue 16 item 6): views that stoker.Loader, ImageLoader and
stoker.torch take wherever a dataset goes, with the same guarantees (equal ranks, exact
resume).

    small = ds.subset(range(0, len(ds), 10))          # every tenth sample (or a slice,
    small = ds.subset(np.asarray(sizes) > 100)         # ints, an integer array, a bool mask)
    cats = ds.filter(lambda s: s["label"] == 3)        # reads every sample once
    cats = ds.filter({"label": lambda v: v < 10})      # a predicate per column (a file
                                                       # dataset's: "label", "path")
    loader = stoker.Loader(cats, batch_size=64)

A view is its base dataset (one version) and the base's sample indices it holds, in the order
given (duplicates and out-of-range indices are refused): view[i] is base[indices[i]]. Its
loaders plan epochs over the view's samples with the base's chunks (chunk-wise shuffle keeps
its whole-chunk reads), and their state_dict names positions in the view's epoch order.
"""
from __future__ import annotations

import os
import zlib
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from . import _core
from ._core import ReadPipeline, sample_chunks


class Dataset(_core.Dataset):
    # The C++ class's docstring, with what this subclass adds: views, which are Python objects
    # so that every loader's Python side takes them, and so the C++ bindings import nothing of
    # stoker's Python (scripts/check_layers.py).
    __doc__ = _core.Dataset.__doc__
    __module__ = "stoker"

    def subset(self, indices: Iterable[int] | slice | np.ndarray) -> DatasetView:
        """A stoker.DatasetView of samples `indices` (in that order, each at most once; a
        range, a slice, ints, an integer array or a boolean mask), which every loader takes."""
        return DatasetView(self, indices)

    def filter(self, predicate: Callable[[Any], bool] | dict[str, Callable[[Any], bool]], *,
               memory_budget: int = 256 << 20) -> DatasetView:
        """A stoker.DatasetView of the samples for which predicate(sample) is true, or given
        {column: fn}, every fn(sample[column]). Reads every sample once, chunk by chunk."""
        return DatasetView(self, np.arange(len(self))).filter(predicate,
                                                               memory_budget=memory_budget)


class DatasetView:
    """Samples `indices` of `base` (see the module docstring). Other attributes (columns,
    classes, uri, version, ...) are the base's."""

    def __init__(self, base: _core.Dataset, indices: Iterable[int] | slice | np.ndarray) -> None:
        self.base = base
        self.indices = _checked(indices, len(base)).astype(np.uint32)
        self.indices.flags.writeable = False

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> Any:
        return self.base[int(self.indices[i])]

    def __getattr__(self, name: str) -> Any:
        if name in ("base", "indices"):
            raise AttributeError(name)
        return getattr(self.base, name)

    @property
    def num_samples(self) -> int:
        return len(self.indices)

    def subset(self, indices: Iterable[int]) -> DatasetView:
        """A view of this view's samples `indices`."""
        return DatasetView(self.base, self.indices[_checked(indices, len(self))])

    def filter(self, predicate: Callable[[Any], bool] | dict[str, Callable[[Any], bool]], *,
               memory_budget: int = 256 << 20) -> DatasetView:
        """The samples for which `predicate(sample)` is true — or, given {column: fn}, for which
        every fn(sample[column]) is — in this view's order. Reads every sample once, chunk by
        chunk (a pass of the read pipeline, CRC-checked)."""
        return DatasetView(self.base, self.indices[_matching(self.base, self.indices, predicate,
                                                             memory_budget)])

    def __reduce__(self):
        return (DatasetView, (self.base, self.indices))

    def __repr__(self) -> str:
        # The indices tell two views of one dataset apart (in a Mix's repr, say).
        shown = np.array2string(self.indices, separator=", ", threshold=6, edgeitems=3,
                                formatter={"int": str})
        return (f"stoker.DatasetView({self.base!r}, {len(self)} of {len(self.base)} samples: "
                f"{shown})")


def dataset_and_indices(dataset: Any) -> tuple[_core.Dataset, np.ndarray | None]:
    """What a loader was given — a path or URI, an open Dataset, or a view — as the Dataset to
    read and, for a view, the base's samples it holds (None: all of them)."""
    if isinstance(dataset, DatasetView):
        return dataset.base, dataset.indices
    if isinstance(dataset, _core.Dataset):
        return dataset, None
    return Dataset(os.fspath(dataset)), None


def view_id(indices: np.ndarray | None) -> str | None:
    """Which samples (or documents) a view holds, for a loader's state: their count and the
    CRC32 of their sorted indices, so that a state saved on another view is refused; None for
    the whole dataset."""
    if indices is None:
        return None
    return f"{len(indices)}:{zlib.crc32(np.sort(indices).astype(np.int64).tobytes()):08x}"


def _checked(indices: Iterable[int] | slice | np.ndarray, n: int) -> np.ndarray:
    """`indices` — ints (negative ones count from the end): a range, a slice, a list, an
    integer array; or a boolean mask with one value per sample — as int64 in [0, n), each at
    most once."""
    if isinstance(indices, slice):
        indices = range(n)[indices]
    if isinstance(indices, range):
        indices = np.arange(indices.start, indices.stop, indices.step)
    idx = np.asarray(indices)
    if idx.dtype == bool:
        if idx.shape != (n,):
            raise ValueError(f"a boolean mask holds one value per sample: {n} of them, not "
                             f"shape {idx.shape}")
        return np.flatnonzero(idx)
    if idx.size and idx.dtype.kind not in "iu":
        raise TypeError(f"sample indices are integers (or a boolean mask), not {idx.dtype}")
    idx = idx.astype(np.int64).reshape(-1)
    if len(idx) and (idx.min() < -n or idx.max() >= n):
        bad = idx[(idx < -n) | (idx >= n)][0]
        raise IndexError(f"sample index {int(bad)} out of range ({n} samples)")
    idx = np.where(idx < 0, idx + n, idx)
    if len(np.unique(idx)) != len(idx):
        raise ValueError("a subset holds each sample at most once (indices repeat)")
    return idx


# The keys filter({key: fn}) takes for a file dataset (not a column one): positions in the
# (data, label, path) its samples are.
_FILE_FIELDS = {"label": 1, "path": 2}


def _matching(base: _core.Dataset, indices: np.ndarray, predicate,
              memory_budget: int) -> np.ndarray:
    if isinstance(predicate, dict):
        # Where each key's value is in a sample: a column dataset's are {column: value}, a file
        # dataset's (data, label, path).
        at = {c: c for c in base.columns} or _FILE_FIELDS
        columns = {at[c]: fn for c, fn in predicate.items() if c in at}
        unknown = set(predicate) - set(at)
        if unknown and base.columns:
            raise ValueError(f"filter: {sorted(unknown)} are not columns of the dataset "
                             f"(its columns: {sorted(base.columns)})")
        if unknown:
            raise ValueError(f"filter: {sorted(unknown)} are not keys of a file dataset's "
                             "samples (its keys: 'label', the class index; 'path')")

        def test(sample) -> bool:
            return all(fn(sample[c]) for c, fn in columns.items())
    elif callable(predicate):
        test = predicate
    else:
        raise TypeError("filter takes a callable (sample -> bool) or {column: callable}")
    # Read in storage order (chunk by chunk), then answer in the view's order.
    chunks = np.asarray(sample_chunks(base))[indices]
    order = np.argsort(chunks, kind="stable")
    plan = np.ascontiguousarray(indices[order], dtype=np.uint32)
    keep = np.zeros(len(indices), dtype=bool)
    pipe = ReadPipeline(base, plan, memory_budget=memory_budget, io_depth=8)
    try:
        for pos in order:
            keep[pos] = bool(test(next(pipe)))
    finally:
        pipe.close()
    return np.flatnonzero(keep)


def reopen_dataset(uri: str, version: int) -> Dataset:
    """A stoker.Dataset for `uri` pinned to `version`, opened on first use: what unpickling a
    Dataset gives, without a pickle round trip."""
    ds = Dataset.__new__(Dataset)
    ds.__setstate__((uri, version))
    return ds

