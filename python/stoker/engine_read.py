"""What the engines' readers share (stoker.ray, stoker.spark): a plan of whole chunks per task,
and reading a task's chunks as blocks (docs/engines.md).

A task reads a group of whole chunks: each chunk is read by one task, once, in coalesced
CRC-checked range reads (stoker.ReadPipeline), and becomes one block whose rows are that
chunk's samples in index order. Plans are uint32 arrays, 4 bytes per sample on the driver.
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ._core import ReadPipeline, sample_chunks
from .views import Dataset


def chunk_plans(ds: Dataset, indices: np.ndarray | None = None) -> list[np.ndarray]:
    """Each chunk's samples (uint32, index order), chunks in storage order: all of them, or
    those of `indices` (a view's)."""
    chunks = np.asarray(sample_chunks(ds))
    samples = (np.arange(len(chunks), dtype=np.uint32) if indices is None
               else np.sort(np.asarray(indices, dtype=np.uint32)))
    order = np.argsort(chunks[samples], kind="stable")  # by chunk, then index
    samples = samples[order]
    bounds = np.flatnonzero(np.diff(chunks[samples])) + 1
    return [p for p in np.split(samples, bounds) if len(p)]


def task_groups(plans: list[np.ndarray], tasks: int) -> list[list[np.ndarray]]:
    """`plans` cut into at most `tasks` runs of consecutive chunks, as even as they go."""
    groups = np.array_split(np.arange(len(plans)), max(1, min(tasks, len(plans))))
    return [[plans[c] for c in g] for g in groups if len(g)]


def read_blocks(ds: Dataset, plans: list[np.ndarray],
                make: Callable[[np.ndarray, list], Any]) -> Iterator[Any]:
    """make(plan, samples) for each chunk of a task: its samples' indices and the samples as
    ds[i] gives them."""
    if not plans:
        return
    pipe = ReadPipeline(ds, np.concatenate(plans).astype(np.uint32))
    try:
        for plan in plans:
            yield make(plan, [next(pipe) for _ in range(len(plan))])
    finally:
        pipe.close()


def path_text(path: str) -> str:
    """A file's path as engines' string columns hold it (UTF-8 only): as it is, or, for a name
    whose bytes are not UTF-8 (os.fsdecode's surrogates), those bytes as \\xNN, as Python
    prints them, rather than a read that fails on one file's name."""
    try:
        path.encode("utf-8")
        return path
    except UnicodeEncodeError:
        return os.fsencode(path).decode("utf-8", "backslashreplace")


def path_texts(samples: list) -> list[str]:
    """The path_text of each file sample (data, label, path) of a file dataset."""
    return [path_text(s[2]) for s in samples]


def json_text(values: list) -> list:
    """A json column's values as their JSON text (engines have no type for any JSON value)."""
    return [None if v is None else json.dumps(v) for v in values]
