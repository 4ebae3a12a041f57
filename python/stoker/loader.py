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
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ._core import (
    Dataset,
    EpochCursor,
    ReadPipeline,
    Sampler,
    parse_loader_options,
    sample_chunks,
    shuffle_unit,
)
from .stalls import StallMeter, now
from .views import dataset_and_indices

# Keys of state_dict() that decide the epoch's order: a state is only meaningful for a loader
# whose order is the same.
_ORDER_KEYS = ("dataset_version", "num_samples", "shuffle", "seed", "window", "block_size")
# Keys that only chunk mode's order depends on.
_CHUNK_KEYS = ("window", "block_size")
# (uri, version, window, batch) whose mixing warning this process has given.
_WARNED: set[tuple[str, int, int, int]] = set()


def _human_bytes(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.3g} {unit}"
    return f"{n} B"


def choose_block_size(ds: Dataset, window: int, batch_size: int | None,
                      block_size: int | None) -> int:
    """The shuffle unit of chunk mode (docs/sampler.md): `block_size` if given (0: whole
    chunks; the caller has checked it with parse_loader_options), else whole chunks when they
    mix classes like a full shuffle, else the largest block of a chunk that does. Warns once (per
    dataset and window) when whole chunks would not mix classes — naming the cost and the fix —
    or when nothing within the window's memory does."""
    batch = int(batch_size or 256)
    if block_size is not None:
        return int(block_size)  # checked against the dataset when the loader builds its Sampler
    unit = shuffle_unit(ds, window, batch)
    whole, chosen = unit["whole_chunks"], unit["chosen"]
    if unit["block_size"] == 0 and unit["mixes_well"]:
        return 0
    key = (ds.uri, ds.version, window, batch)
    if key not in _WARNED:
        _WARNED.add(key)
        head = (f"{ds.uri} stores its classes together: with window={window} whole chunks a "
                f"batch of {batch} would hold ~{whole['classes_per_batch']:.0f} classes, where "
                f"a full shuffle gives ~{whole['full_classes_per_batch']:.0f}, and training "
                "loses accuracy (docs/benchmarks.md §13).")
        if unit["block_size"] == 0:
            tail = (" Its chunks hold too few samples to be cut into blocks. Pack it in mixed "
                    "order (`stoker pack SRC DST`, the default --order shuffled), raise window, "
                    "or use shuffle='full'.")
        elif unit["mixes_well"]:
            per_chunk = max(1, unit["units_per_window"] // window)
            tail = (f" Reading it in blocks of {_human_bytes(unit['block_size'])} instead "
                    f"(~{chosen['classes_per_batch']:.0f} classes per batch; {per_chunk}x the read "
                    "requests of whole chunks). To read whole chunks again, pack it in mixed "
                    "order: `stoker pack SRC DST` (the default, --order shuffled).")
        else:
            tail = (f" Even blocks of {_human_bytes(unit['block_size'])} reach only "
                    f"~{chosen['classes_per_batch']:.0f}. Pack it in mixed order (`stoker pack "
                    "SRC DST`, the default --order shuffled), raise window, or use "
                    "shuffle='full'.")
        warnings.warn(head + tail, stacklevel=4)
    return int(unit["block_size"])


def env_world(rank: int | None = None, world_size: int | None = None) -> tuple[int, int]:
    """(rank, world_size): the arguments where given, else torchrun's RANK / WORLD_SIZE
    environment variables, else (0, 1)."""
    if world_size is None:
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if rank is None:
        rank = int(os.environ.get("RANK", "0"))
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, not {world_size}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} out of range for world_size {world_size}")
    return rank, world_size


def reopen_dataset(uri: str, version: int) -> Dataset:
    """A stoker.Dataset for `uri` pinned to `version`, opened on first use: what unpickling a
    Dataset gives, without a pickle round trip."""
    ds = Dataset.__new__(Dataset)
    ds.__setstate__((uri, version))
    return ds


# The smallest read-ahead budget the loader picks by itself (bytes).
DEFAULT_MIN_BUDGET = 256 << 20


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


class _Epochs:
    """The epoch, rank and world size every loader reports (stoker.Loader, ImageLoader,
    TokenLoader): from its EpochCursor `_cursor`, `_rank` and `_world_size`."""

    _cursor: EpochCursor
    _rank: int
    _world_size: int

    @property
    def epoch(self) -> int:
        return self._cursor.epoch

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def world_size(self) -> int:
        return self._world_size

    def set_epoch(self, epoch: int) -> None:
        """Reads epoch `epoch` next. A different epoch than the current one starts at its
        beginning; the current one keeps its position (so set_epoch(e) after loading a state
        saved in epoch e continues that epoch instead of restarting it)."""
        self._cursor.set_epoch(int(epoch))

    def _with_stalls(self, stats: dict[str, Any]) -> dict[str, Any]:
        """`stats` with the stall figures of the last (or current) pass (stoker.stalls)."""
        out = dict(stats)
        meter = getattr(self, "_meter", None)
        if meter is not None:
            out.update(meter.stats())
        return out


class _Stream(_Epochs):
    """What Loader, ImageLoader and stoker.torch.StokerIterableDataset share: the options, the
    per-process Dataset and Sampler, and the position in the epoch.

    Where the reading stands — (epoch, position, planned_world_size), where the current (or
    next) pass over this rank's share starts, and the samples yielded since — is the C++
    EpochCursor's (src/loader/epoch_cursor.h), which also decides how a pass's start and end,
    set_epoch and load move it; this class only counts what it yields, with its pass's token.
    """

    def __init__(self, dataset: str | os.PathLike | Dataset, options: dict[str, Any],
                 transform: Callable | None) -> None:
        """`options`: what parse_loader_options returns (checked, defaults filled; None where
        the loader chooses)."""
        self._rank, self._world_size = env_world(options["rank"], options["world_size"])
        # A view (ds.subset / ds.filter): its base's samples `_indices`, planned as a dataset
        # of their own over the base's chunks.
        ds, self._indices = dataset_and_indices(dataset)
        # Opened once here, so a bad URI fails now and every worker and rank reads this version.
        self._uri: str = ds.uri
        self._version: int = ds.version
        self._num_samples: int = len(ds) if self._indices is None else len(self._indices)
        self._shuffle: str = options["shuffle"]
        self._seed: int = options["seed"]
        self._window: int = options["window"]
        # The shuffle unit, decided once here from the metadata, so every worker and rank of
        # this loader uses the same one. A view's is whole chunks.
        if self._indices is not None and options["block_size"]:
            raise ValueError("block_size: a subset or filter view is shuffled by whole chunks")
        self._block_size = (choose_block_size(ds, self._window, options["batch_size"],
                                              options["block_size"])
                            if self._shuffle == "chunk" and self._indices is None else 0)
        self._drop_last: bool = options["drop_last"]
        self._transform = transform
        self._ds: Dataset | None = ds
        self._sampler: Sampler | None = None
        self._pid = os.getpid()
        if self._block_size:
            self._handles()  # a bad explicit block_size fails here, not at the first pass
        self._cursor = EpochCursor(self._num_samples, self._world_size, self._drop_last)

    # -- per-process handles ----------------------------------------------------------------

    def _handles(self) -> tuple[Dataset, Sampler]:
        """The Dataset and Sampler of this process: opened again after a fork (the parent's
        handles are never shared) and after unpickling (spawn), pinned to the version."""
        if self._pid != os.getpid() or self._ds is None:
            self._ds = reopen_dataset(self._uri, self._version)
            self._sampler = None
            self._pid = os.getpid()
        if self._sampler is None and self._indices is not None:
            chunks = np.asarray(sample_chunks(self._ds))[self._indices]
            self._sampler = Sampler.from_chunks(chunks, self._version, mode=self._shuffle,
                                                seed=self._seed, window=self._window,
                                                drop_last=self._drop_last)
        elif self._sampler is None:
            self._sampler = Sampler(self._ds, mode=self._shuffle, seed=self._seed,
                                    window=self._window, drop_last=self._drop_last,
                                    block_size=self._block_size)
        return self._ds, self._sampler

    def __getstate__(self) -> dict[str, Any]:
        # Only the URI, version, options and position travel; handles reopen lazily.
        state = self.__dict__.copy()
        state["_ds"] = None
        state["_sampler"] = None
        state["_meter"] = None  # a pass's figures stay with the process that read it
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    # -- epochs and state --------------------------------------------------------------------

    @property
    def block_size(self) -> int:
        """The shuffle unit in bytes (chunk mode; 0: whole chunks), see the block_size option."""
        return self._block_size

    @property
    def dataset_version(self) -> int:
        return self._version

    def _pass_samples(self) -> int:
        """Samples this rank reads in the pass under way, or else in the next one."""
        return self._cursor.pass_samples()

    def _plan(self):
        """This rank's samples from the current position to the end of the epoch (uint32
        memoryview), plus the counts of padded and dropped samples."""
        _, sampler = self._handles()
        c = self._cursor
        plan, padded, dropped = sampler.plan_rank(c.epoch, c.position, c.planned_world_size,
                                                  self._world_size, self._rank)
        if self._indices is not None:  # positions in the view -> the base's samples
            plan = np.ascontiguousarray(self._indices[np.asarray(plan)])
        return plan, padded, dropped

    def _state(self, consumed: int) -> dict[str, Any]:
        return {
            "epoch": self._cursor.epoch,
            "position": self._cursor.consumed_position(consumed),
            "planned_world_size": self._cursor.planned_world_size,
            "samples_yielded": consumed,
            "world_size": self._world_size,
            "rank": self._rank,
            "dataset_version": self._version,
            "num_samples": self._num_samples,
            "shuffle": self._shuffle,
            "seed": self._seed,
            "window": self._window,
            "block_size": self._block_size,
            "drop_last": self._drop_last,
        }

    def _load(self, state: dict[str, Any]) -> None:
        for key in ("epoch", "position", "planned_world_size"):
            if key not in state:
                raise ValueError(f"not a stoker loader state: no '{key}'")
        mine = self._state(0)
        if self._shuffle == "chunk" and "block_size" not in state:
            # Saved before block_size existed: its order was built from whole chunks.
            state = {**state, "block_size": 0}
        for key in _ORDER_KEYS:
            if key in state and state[key] != mine[key] and not (
                    key in _CHUNK_KEYS and self._shuffle != "chunk"):
                raise ValueError(
                    f"the state was saved with {key}={state[key]!r}, this loader has "
                    f"{key}={mine[key]!r}: the epoch's order would differ, so the position "
                    "would name other samples")
        self._cursor.load(int(state["epoch"]), int(state["position"]),
                          int(state["planned_world_size"]))

    def _read_budget(self, ds: Dataset, memory_budget: int | None) -> int:
        """The read pipeline's memory budget: `memory_budget` if given (bytes, as
        parse_loader_options returns it), else enough to read a whole window of chunks while the
        previous one is consumed (the read pipeline plans in segments of half its budget,
        docs/decisions/0004)."""
        # A window holds at most every chunk: a dataset of 3 chunks needs no budget for 16.
        window = min(self._window, max(1, ds.num_chunks)) if self._shuffle == "chunk" else 1
        whole_windows = 2 * window * ds.largest_chunk_bytes
        if memory_budget is None:
            return max(DEFAULT_MIN_BUDGET, whole_windows)
        if self._shuffle == "chunk" and int(memory_budget) < whole_windows:
            # Measured from S3 (16 MiB chunks, window 16, `epoch_bench --budget`): 512 MiB read
            # the 518 MB epoch once, 256 MiB read 1.02 GB, 128 MiB 1.07 GB in 2,133 requests.
            fits = max(1, int(memory_budget) // (2 * ds.largest_chunk_bytes))
            warnings.warn(
                f"memory_budget ({int(memory_budget):,} bytes) is less than 2 x window x the "
                f"largest chunk ({whole_windows:,} bytes): a shuffle window's chunks are read "
                f"in pieces, and up to about twice the dataset's bytes per epoch (see "
                f"stats()['bytes_read']). Raise memory_budget, or lower window to {fits}.",
                stacklevel=3)
        return int(memory_budget)


class Loader(_Stream):
    """Iterates one rank's share of a packed dataset, sample by sample or batch by batch.

    Args:
      uri_or_dataset: a path / file:// URI, an open stoker.Dataset, a view of one
        (ds.subset / ds.filter), or a stoker.Mix of datasets (then each item, or batch, comes
        with its source: (sample, source) / (batch, sources); stoker.mix).
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
    continues the epoch where it stopped. A state saved after a pass's last sample resumes with
    the next epoch (unless set_epoch picks that finished epoch again, which then yields
    nothing).

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

    def __new__(cls, uri_or_dataset: Any = None, *args: Any, **kwargs: Any) -> Loader:
        # A stoker.Mix is read by the mixing loader (stoker.mix.MixLoader), same options.
        from .mix import Mix, MixLoader
        if cls is Loader and isinstance(uri_or_dataset, Mix):
            return super().__new__(MixLoader)
        return super().__new__(cls)

    def __init__(self, uri_or_dataset: str | os.PathLike | Dataset, *,
                 # BEGIN GENERATED signature
                 batch_size: int | None = None, shuffle: str = "chunk", seed: int = 0,
                 window: int = 16, drop_last: bool = False, rank: int | None = None,
                 world_size: int | None = None, memory_budget: int | str | None = None,
                 io_depth: int = 8, block_size: int | None = None,
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
        super().__init__(uri_or_dataset, options, transform)
        self._batch_size: int | None = options["batch_size"]
        self._collate = collate
        self._memory_budget: int | None = options["memory_budget"]
        self._io_depth: int = options["io_depth"]
        self._stats: dict[str, Any] = {}

    @property
    def batch_size(self) -> int | None:
        return self._batch_size

    @property
    def dataset(self) -> Dataset:
        return self._handles()[0]

    def __len__(self) -> int:
        """Samples (or batches, with batch_size) this rank yields in the current pass, or in the
        next one when none is under way."""
        samples = self._pass_samples()
        if self._batch_size is None:
            return samples
        if self._drop_last:
            return samples // self._batch_size
        return -(-samples // self._batch_size)

    def __iter__(self) -> Iterator[Any]:
        token = self._cursor.begin_pass()
        plan, _, _ = self._plan()
        return self._generate(plan, token)

    def _generate(self, plan, token: int) -> Iterator[Any]:
        ds, _ = self._handles()
        transform = self._transform or _identity
        # The C++ read pipeline fetches this rank's plan ahead of us: coalesced range reads,
        # CRC-checked, within memory_budget; it yields what ds[i] yields, in plan order.
        pipe = ReadPipeline(ds, plan, memory_budget=self._read_budget(ds, self._memory_budget),
                            io_depth=self._io_depth)
        meter = self._meter = StallMeter(ds, "Loader")
        size = self._batch_size
        collate = self._collate or (functools.partial(collate_columns, columns=ds.columns)
                                    if ds.columns and self._transform is None else _identity)
        try:
            asked = now()
            for begin in range(0, len(plan), size or 1):
                count = min(size or 1, len(plan) - begin)
                if size is not None and self._drop_last and count < size:
                    break
                waited = pipe.wait_seconds
                items, decode = transformed(pipe, count, transform)
                if size is not None:
                    t = now()
                    items = collate(items)
                    decode += now() - t
                meter.step(asked, now(), read=pipe.wait_seconds - waited, decode=decode)
                self._cursor.add_yielded(token, count)
                yield items if size is not None else items[0]
                asked = now()
        finally:
            self._stats = pipe.stats()
            pipe.close()
        self._cursor.end_pass(token)

    def stats(self) -> dict[str, Any]:
        """Counters of the last pass (of the one under way, its stall figures so far).

        Is training waiting for data (stoker.stalls): starved_fraction (the share of the
        wall time between the pass's first request and its latest item that was spent waiting
        inside the loader), wall_seconds, waiting_seconds, stall_seconds ({"storage", "cache",
        "decode", "queue": seconds}: reads not done, from the store or the job cache; the
        transform and collate; the rest).

        The read pipeline's: samples, ranges, bytes_read, payload_bytes, consumer_waits,
        consumer_wait_seconds, peak_bytes_held, engine ("io_uring" or "threads"). With a node
        daemon ($STOKER_NODE) also node_reads / store_reads / node_failures: chunk reads served
        from the daemon's shared memory, read from the store (no daemon, or it failed), and
        failed daemon requests, since the dataset was opened."""
        return self._with_stalls(self._stats)

    def state_dict(self) -> dict[str, Any]:
        """Where this loader is: see the class docstring. Plain ints, strs and bools."""
        return self._state(self._cursor.yielded)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continues from `state` (from any world size): the next pass reads the rest of its
        epoch. ValueError if the state belongs to a different order (dataset version, shuffle,
        seed, window, block_size)."""
        self._load(state)

    def __repr__(self) -> str:
        return (f"stoker.Loader('{self._uri}', version={self._version}, "
                f"shuffle='{self._shuffle}', block_size={self._block_size}, "
                f"batch_size={self._batch_size}, "
                f"rank={self._rank}, world_size={self._world_size}, epoch={self.epoch})")
