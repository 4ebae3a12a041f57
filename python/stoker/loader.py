"""stoker.Loader: an iterable, resumable, distributed loader over a packed dataset.

    loader = stoker.Loader("/data/train.stoker", batch_size=256, shuffle="chunk", seed=0,
                           transform=decode, collate=torch.utils.data.default_collate)
    for epoch in range(start_epoch, epochs):
        loader.set_epoch(epoch)            # optional: without it, epochs advance by themselves
        for batch in loader:
            ...
            if step % 1000 == 0:
                torch.save({"model": ..., "loader": loader.state_dict()}, path)
    ...
    loader.load_state_dict(checkpoint["loader"])   # on restart: continues exactly

Order and distribution are decided by the C++ sampler (docs/sampler.md): each epoch has one
global order G of all samples, and position p of G goes to rank p mod world_size. After every
rank has yielded k samples of a pass that began at position P, exactly G[0, P + k*world_size)
has been read, so the resume state is one number, valid for any new world size.

The state is exact when every rank saves it at the same step (as data-parallel training does:
all ranks run the same number of steps with the same batch size). Save rank 0's state and load
it on every rank of the new job, which may have a different number of ranks: the rest of the
epoch is dealt over the new ranks, and nothing is lost or read twice.
"""
from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ._core import Dataset, ReadPipeline, parse_loader_options
from ._reading import SampleReading, Step, read_budget, renamed_arguments, run_pass, sample_order
from .mix import Mix, mix_label
from .stalls import StallMeter, now
from .views import DatasetView


def _batched_as_array(column_type: str | None) -> bool:
    """Whether a column's values batch as one NumPy array: ints and floats, and arrays of a fixed
    dtype and shape ("ndarray:uint8:224x224x3"); never an optional column (None has no place
    in an array). Everything else batches as a list, whatever the values of one batch are, so
    that a batch's type follows the schema, not its data."""
    if column_type is None or column_type.endswith("?"):
        return False
    if column_type in ("int", "float", "float:nan"):
        return True
    return column_type.startswith("ndarray:") and column_type.count(":") == 2


def collate_columns(samples: list[dict[str, Any]],
                    columns: dict[str, str] | None = None) -> dict[str, Any]:
    """A batch of column-dataset samples as {column: values}, each column one type in every
    batch, from its type in `columns` (ds.columns): a stacked NumPy array for int and float
    columns and ndarray columns of a fixed shape ("ndarray:float32:512"), a list for the rest
    (optional columns, ndarray columns of any shape, str, bytes, json, images, tokens).
    Without `columns`, types are guessed from this batch's values (a stacked array when every
    value is an int, a float, or an array of one shape and dtype), which may differ between
    batches."""
    batch: dict[str, Any] = {}
    for name in samples[0] if samples else ():
        values = [sample[name] for sample in samples]
        if columns is not None:
            kind = columns.get(name)
            if not _batched_as_array(kind):
                batch[name] = values
            elif kind == "int":
                batch[name] = np.array(values, dtype=np.int64)
            elif kind is not None and kind.startswith("float"):
                batch[name] = np.array(values, dtype=np.float64)
            else:
                batch[name] = np.stack(values)
            continue
        first = values[0]
        if isinstance(first, np.ndarray) and all(
                isinstance(v, np.ndarray) and v.shape == first.shape and v.dtype == first.dtype
                for v in values):
            batch[name] = np.stack(values)
        elif all(type(v) is int for v in values):
            batch[name] = np.array(values, dtype=np.int64)
        elif all(type(v) is float for v in values):
            batch[name] = np.array(values, dtype=np.float64)
        else:
            batch[name] = values
    return batch


def _identity(item):
    return item


def transformed(pipe, count: int, transform: Callable) -> tuple[list, float]:
    """The next `count` samples of `pipe`, transformed, and the seconds `transform` took."""
    items, spent = [], 0.0
    for _ in range(count):
        sample = next(pipe)
        t = now()
        items.append(transform(sample))
        spent += now() - t
    return items, spent


class Loader(SampleReading):
    """Iterates one rank's share of a packed dataset, sample by sample or batch by batch.

    Args:
      source: a path / file:// URI, an open stoker.Dataset, a view of one
        (ds.subset / ds.filter), or a stoker.Mix of datasets (then each item, or batch, comes
        with its source: (sample, source) / (batch, sources); stoker.mix). (Its old name,
        uri_or_dataset=, still works, with a warning.) Every loader takes its source, then
        batch_size, then keywords.
      transform: applied to each sample (bytes, label, path) — for tar-packed datasets
        ({ext: bytes}, label, key), for column datasets (stoker.Writer) {column: value} —
        before it is yielded or batched; default: the sample itself.
      collate: turns a list of transformed samples into a batch; default: the list, or for a
        column dataset without a transform stoker.collate_columns with the dataset's types (a
        dict of columns: stacked NumPy arrays for int and float columns and ndarray columns of
        a fixed shape, lists for the others; each column the same type in every batch).

    Options (each described once, in C++, in src/loader/loader_option_table.cc; this list and
    the signature are generated from it by scripts/gen_options.py):
      batch_size: None yields samples; an int yields collate(list of batch_size samples).
      shuffle: chunk: chunks in random order, samples shuffled within windows of `window` chunks
        (large sequential reads, well mixed); full: a uniform permutation; sequential: storage
        order. See docs/sampler.md.
      seed: the order of epoch e is a function of (seed, e, dataset version, options, the number of
        ranks the epoch was planned for), identical on every machine.
      window: chunks per shuffle window (chunk mode): the window holds `window` chunks' worth of
        bytes.
      drop_last: skip the last N mod world_size samples of the epoch instead of padding the last
        round with samples from its start (either way every rank yields the same count, so
        distributed training never hangs on a short rank); with batch_size, also drop the last
        incomplete batch.
      rank: this process's rank; None: torchrun's RANK environment variable, else 0.
      world_size: the number of ranks; None: torchrun's WORLD_SIZE environment variable, else 1.
      memory_budget: the most bytes the read pipeline holds (samples still referenced by the
        consumer included): bytes, or text like 2GiB. None: 2 x window x the largest chunk in chunk
        mode (whole-chunk reads), at least 256MiB. Less still works, with smaller reads; in chunk
        mode a warning says that a window's chunks are then read in pieces, and up to about twice
        per epoch.
      io_depth: concurrent reads of the read pipeline.
      block_size: the shuffle unit of chunk mode, in bytes. None: chosen from the labels in the
        metadata (whole chunks when they mix classes, as `stoker pack` stores them by default, else
        the largest block of a chunk, 1/4 ... 1/256 of one, whose windows mix classes within 5 % of
        a full shuffle, with a warning that names the cost and the fix). 0: whole chunks always; an
        int: blocks of that many bytes. See docs/sampler.md.


    Epochs: a pass that runs to its end moves the loader to the next epoch, so plain
    `for epoch ...: for batch in loader:` reads epochs 0, 1, 2, ... (what torchdata's
    StatefulDataLoader users expect). set_epoch(e) chooses the epoch explicitly (what
    DistributedSampler users do every epoch); calling it for the epoch the loader is already in
    keeps its position, so it does not undo a resume. Leaving a loop early and iterating again
    continues the epoch where it stopped (the earlier iterator then raises RuntimeError if used
    again, rather than reading those samples twice: one pass at a time). A state saved after a
    pass's last sample resumes with the next epoch (unless set_epoch picks that finished epoch
    again, which then yields nothing).

    Reading: samples come through the C++ read pipeline (stoker._core.ReadPipeline), which
    fetches this rank's plan ahead of the consumer with coalesced range reads (io_uring where the
    kernel allows it, `io_depth` at once), checks every CRC32C and holds at most `memory_budget`
    bytes. Its default, 2 × window × the largest chunk in chunk mode, reads whole chunks (2 GiB
    for W = 16 and 64 MiB chunks); with less, a window's chunks are read in pieces (from S3 or a
    server, one request each). stats() reports the last pass's counters, including the time
    spent waiting for data.

    State: state_dict() is a plain dict — "epoch", "position" (samples of the epoch's global
    order read, by all ranks together), "planned_world_size" (the world size the epoch's order
    was built for), "samples_yielded" (by this rank in the current pass) and the options that
    fix the order, which load_state_dict() checks. It is exact only when all ranks save at the
    same step (as DDP does); load it into loaders with any world size.
    """

    @renamed_arguments(uri_or_dataset="source")
    def __init__(self, source: str | os.PathLike | Dataset | DatasetView | Mix,
                 batch_size: int | None = None, *,
                 # BEGIN GENERATED signature
                 shuffle: str = "chunk", seed: int = 0, window: int = 16, drop_last: bool = False,
                 rank: int | None = None, world_size: int | None = None,
                 memory_budget: int | str | None = None, io_depth: int = 8,
                 block_size: int | None = None,
                 # END GENERATED signature
                 transform: Callable | None = None, collate: Callable | None = None) -> None:
        # Checked (type, choices, ranges) and normalized by the C++ table.
        options = parse_loader_options({
            # BEGIN GENERATED dict
            'batch_size': batch_size,
            'shuffle': shuffle,
            'seed': seed,
            'window': window,
            'drop_last': drop_last,
            'rank': rank,
            'world_size': world_size,
            'memory_budget': memory_budget,
            'io_depth': io_depth,
            'block_size': block_size,
            # END GENERATED dict
        })
        self._start_reading(sample_order(source, options), options["rank"],
                            options["world_size"], options["drop_last"])
        self._batch_size: int | None = options["batch_size"]
        self._transform = transform
        self._collate = collate
        self._memory_budget: int | None = options["memory_budget"]
        self._io_depth: int = options["io_depth"]
        self._stats: dict[str, Any] = {}

    @property
    def batch_size(self) -> int | None:
        return self._batch_size

    def __len__(self) -> int:
        """Samples (or batches, with batch_size) this rank yields in the current pass, or in the
        next one when none is under way."""
        return self._units_in_pass(self._batch_size)

    def __iter__(self) -> Iterator[Any]:
        token, sources, samples = self._begin()
        order = self._order.sources if sources is not None else [self._order]
        plans = ([samples] if sources is None else
                 [samples[sources == i] for i in range(len(order))])
        pipes = []
        for source, plan in zip(order, plans, strict=True):
            ds = source.dataset()
            budget = read_budget(ds, source.shuffle, source.window, self._memory_budget)
            # A mix's source with nothing in this pass gets no pipeline; a single source always
            # does (stats() then reports its empty pass).
            pipes.append(ReadPipeline(ds, plan, memory_budget=budget, io_depth=self._io_depth)
                         if len(plan) or sources is None else None)
        first = order[0].dataset()
        meter = self._meter = StallMeter(first, "Loader",
                                         mix_label(self._order.mix) if self.mixed else None)

        def finish() -> None:
            if sources is None:
                assert pipes[0] is not None  # a single source always has its pipeline
                self._stats = pipes[0].stats()
            else:
                self._stats = {"samples_per_source": np.bincount(
                    sources, minlength=len(order)).tolist()}
            for p in pipes:
                if p is not None:
                    p.close()

        return run_pass(self._cursor, token, meter, self._steps(pipes, sources, len(samples)),
                        finish)

    def _collate_fn(self) -> Callable:
        """The collate given, else for column datasets without a transform collate_columns
        with their types (over a Mix, when every source has the same columns), else a list."""
        if self._collate is not None:
            return self._collate
        datasets = ([s.dataset() for s in self._order.sources] if self.mixed
                    else [self._order.dataset()])
        first = datasets[0].columns
        if first and self._transform is None and all(d.columns == first for d in datasets):
            return functools.partial(collate_columns, columns=first)
        return _identity

    def _steps(self, pipes: list, sources: np.ndarray | None, n: int) -> Iterator[Step]:
        """Batches (or samples) of the pass: transformed, collated, with the source of each
        sample over a Mix."""
        transform = self._transform or _identity
        collate = self._collate_fn()
        size = self._batch_size
        live = [p for p in pipes if p is not None]
        for begin in range(0, n, size or 1):
            count = min(size or 1, n - begin)
            if size is not None and self._drop_last and count < size:
                break
            waited = sum(p.wait_seconds for p in live)
            if sources is None:
                items, decode = transformed(pipes[0], count, transform)
            else:
                part = sources[begin:begin + count].tolist()
                items, decode = [], 0.0
                for s in part:
                    item, spent = transformed(pipes[s], 1, transform)
                    items += item
                    decode += spent
            if size is not None:
                t = now()
                items = collate(items)
                decode += now() - t
            read = sum(p.wait_seconds for p in live) - waited
            if sources is None:
                out = items if size is not None else items[0]
            else:
                out = ((items, np.asarray(part, dtype=np.int64)) if size is not None
                       else (items[0], part[0]))
            yield out, count, read, decode, 0.0

    def stats(self) -> dict[str, Any]:
        """Counters of the last pass (of the one under way, its stall figures so far).

        Is training waiting for data (stoker.stalls): starved_fraction (the share of the
        wall time between the pass's first request and its latest item that was spent waiting
        inside the loader), wall_seconds, waiting_seconds, stall_seconds ({"storage", "cache",
        "decode", "queue", "feeders": seconds}: reads not done, from the store or the job
        cache; the transform and collate; the rest; feeders, ImageLoader's only).

        The read pipeline's: samples, ranges, bytes_read, payload_bytes, consumer_waits,
        consumer_wait_seconds, peak_bytes_held, engine ("io_uring" or "threads"). With a node
        daemon ($STOKER_NODE) also node_reads / store_reads / node_failures: chunk reads served
        from the daemon's shared memory, read from the store (no daemon, or it failed), and
        failed daemon requests, since the dataset was opened. Over a Mix: samples_per_source."""
        return self._with_stalls(self._stats)

    def state_dict(self) -> dict[str, Any]:
        """Where this loader is: see the class docstring. Plain ints, strs and bools."""
        return self._state(self._cursor.yielded)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continues from `state` (from any world size): the next pass reads the rest of its
        epoch. ValueError if the state belongs to a different order (dataset version, shuffle,
        seed, window, block_size; over a Mix, its sources and their shares)."""
        self._load(state)

    def __repr__(self) -> str:
        source = repr(self._order.mix) if self.mixed else f"'{self._order.uri}'"
        version = "" if self.mixed else f", version={self._order.version}"
        block = "" if self.mixed else f", block_size={self._order.block_size}"
        return (f"stoker.Loader({source}{version}, shuffle='{self._order.shuffle}'{block}, "
                f"batch_size={self._batch_size}, "
                f"rank={self._rank}, world_size={self._world_size}, epoch={self.epoch})")
