"""stoker.optimize: parallel conversion into a column dataset (issue 16 item 2).

    def convert(path):                        # runs in worker processes
        image = open(path, "rb").read()
        return {"image": image, "label": label_of(path)}    # or yield several samples

    stoker.optimize(convert, paths, "out.stoker", num_workers=8)

The inputs are cut into groups of `group_size`; `num_workers` processes run `fn` on a group's
inputs and one stoker.Writer in this process writes their samples, as the group named
"group-<k>" (its directory in the dataset), then publishes it as one new version (an atomic
append). A crash loses only the group under way: run the same call again and it skips the
groups the dataset already holds (`resume`, the default). Several machines can share the work
through a batch engine (`part=(k, n)`: groups k, k + n, ...; or part="env" for a Slurm array
task or a Kubernetes Indexed Job): their appends publish concurrently (stoker rebases and
retries), so no commit step is needed. Groups are written in the order they finish; a sample's
index therefore depends on the run, its group's directory does not.

The column types come from `columns`, or else from the first sample (bytes → jpeg / png / bytes
by its signature, str, int, float, dict / list → json, NumPy arrays → ndarray:<dtype>).
"""
from __future__ import annotations

import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from ._core import Dataset, Writer

_GROUP = "group-{:06d}"
# The starts of the image types' values, as stoker.Writer checks them.
IMAGE_SIGNATURES = {"jpeg": b"\xff\xd8\xff", "png": b"\x89PNG\r\n\x1a\n"}


def _column_type(value: Any) -> str:
    if isinstance(value, (bytes, bytearray, memoryview)):
        head = bytes(value[:8])
        return next((kind for kind, sig in IMAGE_SIGNATURES.items() if head.startswith(sig)),
                    "bytes")
    if isinstance(value, str):
        return "str"
    if isinstance(value, bool):
        return "json"
    if isinstance(value, (int, np.integer)):
        return "int"
    if isinstance(value, (float, np.floating)):
        return "float:nan"
    if isinstance(value, np.ndarray):
        return f"ndarray:{value.dtype.name}"
    return "json"


def infer_columns(sample: dict) -> dict[str, str]:
    """Column types for a sample dict (the rules in the module docstring)."""
    if not isinstance(sample, dict) or not sample:
        raise TypeError(f"fn must return (or yield) sample dicts, got {type(sample).__name__}")
    return {name: _column_type(v) for name, v in sample.items()}


def _samples(fn: Callable, item: Any) -> list[dict]:
    out = fn(item)
    if isinstance(out, dict):
        return [out]
    if out is None:
        return []
    if isinstance(out, (str, bytes)) or not hasattr(out, "__iter__"):
        raise TypeError(f"fn({item!r:.60}) returned {type(out).__name__}: it must return a "
                        "sample dict (or None), or yield sample dicts")
    return list(out)


def _run(job):
    fn, item = job
    return _samples(fn, item)


def _groups_done(output: str) -> set[str] | None:
    """The group directories the dataset at `output` holds; None if there is no dataset."""
    try:
        ds = Dataset(output)
    except FileNotFoundError:
        return None
    return {name.rstrip("/") for name in ds.listdir("")}


def _part(part) -> tuple[int, int]:
    if part is None:
        return 0, 1
    if part == "env":
        for index, count in (("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT"),
                             ("JOB_COMPLETION_INDEX", "STOKER_PARTS")):
            if index in os.environ and count in os.environ:
                base = int(os.environ.get("SLURM_ARRAY_TASK_MIN", "0")) if index.startswith(
                    "SLURM") else 0
                return int(os.environ[index]) - base, int(os.environ[count])
        raise ValueError("part='env': no Slurm array task (SLURM_ARRAY_TASK_ID, "
                         "SLURM_ARRAY_TASK_COUNT) nor Indexed Job (JOB_COMPLETION_INDEX with "
                         "STOKER_PARTS) in the environment")
    k, n = part
    if not 0 <= int(k) < int(n):
        raise ValueError(f"part=({k}, {n}): k must be in 0 .. n - 1")
    return int(k), int(n)


class _Progress:
    """One line on stderr when it is a terminal: groups and samples done, rate."""

    def __init__(self, enabled: bool, groups: int, done: int) -> None:
        self.enabled = enabled and sys.stderr.isatty()
        self.groups, self.done, self.samples, self.start = groups, done, 0, time.monotonic()

    def update(self, samples: int = 0, group: bool = False) -> None:
        self.samples += samples
        self.done += group
        if self.enabled:
            rate = self.samples / max(1e-9, time.monotonic() - self.start)
            print(f"\roptimize: {self.done}/{self.groups} groups, {self.samples} samples, "
                  f"{rate:.0f}/s", end="", file=sys.stderr, flush=True)

    def finish(self) -> None:
        if self.enabled:
            print(file=sys.stderr)


def optimize(fn: Callable[[Any], Any], inputs: Iterable[Any], output: str | os.PathLike, *,
             num_workers: int | None = None, columns: dict[str, str] | None = None,
             group_size: int = 1000, part: tuple[int, int] | str | None = None,
             resume: bool = True, progress: bool = True, **writer_options) -> dict:
    """Runs fn over `inputs` in `num_workers` processes (default: the CPUs) and writes what it
    returns as a column dataset at `output` (see the module docstring). Returns {"groups",
    "groups_skipped", "samples", "version"}. Other keyword arguments go to stoker.Writer
    (label, chunk_size, order, ...); `fn` and the inputs must pickle (a module-level function)."""
    if group_size < 1:
        raise ValueError("group_size must be at least 1")
    for key in ("append", "name", "job"):
        if key in writer_options:
            raise TypeError(f"optimize() sets {key} itself")
    items = list(inputs)
    output = os.fspath(output)
    k, n = _part(part)
    groups = [g for g in range(-(-len(items) // group_size)) if g % n == k]
    held = _groups_done(output)
    exists = held is not None  # then each group is an append
    todo = [g for g in groups if not (resume and held is not None and _GROUP.format(g) in held)]
    workers = num_workers or os.cpu_count() or 1
    bar = _Progress(progress, len(groups), len(groups) - len(todo))
    bar.update()
    result: dict[str, Any] = {"groups": len(todo), "groups_skipped": len(groups) - len(todo),
                              "samples": 0, "version": None}
    pool = multiprocessing.get_context("fork").Pool(workers) if workers > 1 else None

    def write_group(g: int, append: bool) -> None:
        nonlocal columns
        chunk = items[g * group_size:(g + 1) * group_size]
        jobs = [(fn, item) for item in chunk]
        writer = None
        try:
            for samples in (pool.imap(_run, jobs) if pool else map(_run, jobs)):
                for sample in samples:
                    if writer is None:
                        columns = columns or infer_columns(sample)
                        writer = Writer(output, columns=columns, name=_GROUP.format(g),
                                        append=append, progress=False, **writer_options)
                    writer.write(sample)
                bar.update(samples=len(samples))
            if writer is not None:
                result["version"] = writer.close()["version"]
                result["samples"] += writer.samples_written
        except BaseException:
            if writer is not None:
                writer.abort()
            raise

    try:
        for g in todo:
            try:
                write_group(g, exists)
            except FileExistsError:
                if exists:
                    raise
                # Another part created the dataset first: this group becomes an append.
                write_group(g, True)
            exists = exists or result["version"] is not None
            bar.update(group=True)
    finally:
        if pool is not None:
            pool.terminate()
        bar.finish()
    return result

