"""What every stoker loader shares (stoker.Loader, ImageLoader, TokenLoader, stoker.torch): the
rank and world size, the epochs and position, the order its source is read in, and the
bookkeeping of a pass.

A loader is composed, not inherited: it holds an order (`SampleOrder` for a dataset or view,
`stoker.mix.MixOrder` for a stoker.Mix — a Mix is a source like any other) and an EpochCursor
(src/loader/epoch_cursor.h, where the pass's start, end, set_epoch and load move the position),
and reads each pass through `run_pass`. An order gives, for this rank's share of a pass, the
source of every unit (None when there is one source) and the unit (a base dataset's sample, a
token block); the loader only says how a unit is read.
"""
from __future__ import annotations

import functools
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any, TypeVar

import numpy as np

from ._core import Dataset as _CoreDataset
from ._core import EpochCursor, Sampler, sample_chunks, shuffle_unit
from .mix import Mix, MixOrder
from .stalls import StallMeter, now
from .views import dataset_and_indices, reopen_dataset, view_id

# (uri, version, window, batch) whose mixing warning this process has given.
_WARNED: set[tuple[str, int, int, int]] = set()


class StokerDeprecationWarning(DeprecationWarning, FutureWarning):
    """An argument or name that still works and will go: a DeprecationWarning (what
    pytest.deprecated_call and -W error::DeprecationWarning catch) shown by default, as a
    FutureWarning is, since its reader is the person who wrote the call."""


warnings.filterwarnings("default", category=StokerDeprecationWarning)

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def warn_user(message: str, category: type[Warning] = UserWarning) -> None:
    """warnings.warn, attributed to the first caller outside stoker's Python package: the
    user's line that made the loader or started the pass, however deep inside stoker the
    warning is decided."""
    frame: FrameType | None = sys._getframe(1)
    level = 2
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)


F = TypeVar("F", bound=Callable[..., Any])


def renamed_arguments(**renames: str | tuple[str, str]) -> Callable[[F], F]:
    """A decorator: keyword arguments under their old names (old="new", or old=("new", why))
    still work, with a StokerDeprecationWarning that names the new one."""
    def wrap(fn: F) -> F:
        name = "stoker." + fn.__qualname__.removesuffix(".__init__")

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            for old, spec in renames.items():
                if old not in kwargs:
                    continue
                new, why = (spec, "") if isinstance(spec, str) else spec
                if new in kwargs:
                    raise TypeError(f"{name}() got both {old}= (its old name) and {new}=")
                warn_user(f"{name}({old}=...) is deprecated: call it {new}= (the same "
                          f"value{'; ' + why if why else ''})", StokerDeprecationWarning)
                kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)
        return call  # type: ignore[return-value]
    return wrap


def env_world(rank: int | None = None, world_size: int | None = None) -> tuple[int, int]:
    """(rank, world_size): the arguments where given, else torchrun's RANK / WORLD_SIZE
    environment variables, else (0, 1)."""
    where = {"rank": "the argument", "world_size": "the argument"}

    def from_env(name: str, default: str) -> int:
        text = os.environ.get(name, default)
        where[name.lower()] = f"${name}" if name in os.environ else "the default"
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"${name}={text!r} is not a whole number (torchrun sets it; or "
                             f"give {name.lower()}=)") from None

    if world_size is None:
        world_size = from_env("WORLD_SIZE", "1")
    if rank is None:
        rank = from_env("RANK", "0")
    # Where a number came from, when not from an argument: a wrong environment is the usual
    # cause (RANK set, WORLD_SIZE not).
    source = "; ".join(f"{k} from {v}" for k, v in where.items() if v != "the argument")
    note = f" ({source})" if source else ""
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, not {world_size}{note}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} out of range for world_size {world_size}{note}")
    return rank, world_size


def _human_bytes(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.3g} {unit}"
    return f"{n} B"


def choose_block_size(ds: _CoreDataset, window: int, batch_size: int | None,
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
        warn_user(head + tail)
    return int(unit["block_size"])


class SampleOrder:
    """The epochs' order of one dataset's or view's samples: its Sampler (docs/sampler.md),
    opened again in each process (after a fork, or unpickled after a spawn), pinned to the
    version opened first. Units are positions in the source; `to_base` makes them the base
    dataset's samples."""

    def __init__(self, source: Any, options: dict[str, Any], drop_last: bool,
                 in_mix: bool = False) -> None:
        """`options`: parse_loader_options's (shuffle, seed, window, batch_size, block_size)."""
        ds, self.indices = dataset_and_indices(source)
        self.uri: str = ds.uri
        self.version: int = ds.version
        self.num_units: int = len(ds) if self.indices is None else len(self.indices)
        self.shuffle: str = options["shuffle"]
        self.seed: int = options["seed"]
        self.window: int = options["window"]
        self.drop_last = drop_last
        # The shuffle unit, decided once here from the metadata, so every worker and rank uses
        # the same one. A view's is whole chunks.
        if self.indices is not None and options["block_size"] and not in_mix:
            raise ValueError("block_size: a subset or filter view is shuffled by whole chunks")
        chunked = self.shuffle == "chunk" and self.indices is None
        self.block_size: int = (choose_block_size(ds, self.window, options["batch_size"],
                                                  options["block_size"]) if chunked else 0)
        self._ds: _CoreDataset | None = ds
        self._sampler: Sampler | None = None
        self._pid = os.getpid()
        if self.block_size:
            self.sampler()  # a bad explicit block_size fails here, not at the first pass

    def dataset(self) -> _CoreDataset:
        """The base dataset, opened in this process."""
        if self._pid != os.getpid() or self._ds is None:
            self._ds = reopen_dataset(self.uri, self.version)
            self._sampler = None
            self._pid = os.getpid()
        return self._ds

    def sampler(self) -> Sampler:
        ds = self.dataset()
        if self._sampler is None and self.indices is not None:
            chunks = np.asarray(sample_chunks(ds))[self.indices]
            self._sampler = Sampler.from_chunks(chunks, self.version, mode=self.shuffle,
                                                seed=self.seed, window=self.window,
                                                drop_last=self.drop_last)
        elif self._sampler is None:
            self._sampler = Sampler(ds, mode=self.shuffle, seed=self.seed, window=self.window,
                                    drop_last=self.drop_last, block_size=self.block_size)
        return self._sampler

    def epoch(self, k: int) -> np.ndarray:
        """Epoch k's order of all units (a mix reads its sources as streams of such epochs)."""
        return np.asarray(self.sampler().global_order(k, 1))

    def to_base(self, units: np.ndarray) -> np.ndarray:
        """The base dataset's samples at positions `units` (uint32, contiguous)."""
        picked = units if self.indices is None else self.indices[units]
        return np.ascontiguousarray(picked, dtype=np.uint32)

    def rank_plan(self, cursor: EpochCursor, rank: int,
                  world_size: int) -> tuple[None, np.ndarray]:
        """(None: one source, the base samples) of this rank's share of the pass from the
        cursor's position to the end of its epoch."""
        plan, _, _ = self.sampler().plan_rank(cursor.epoch, cursor.position,
                                              cursor.planned_world_size, world_size, rank)
        return None, self.to_base(np.asarray(plan))

    def state(self) -> dict[str, Any]:
        """What decides the order, for state_dict()."""
        view = view_id(self.indices)  # only for a view: a state holds ints, strs and bools
        return {"dataset_version": self.version, **({"view": view} if view else {}),
                "num_samples": self.num_units, "shuffle": self.shuffle, "seed": self.seed,
                "window": self.window, "block_size": self.block_size}

    def check(self, state: dict[str, Any]) -> None:
        """ValueError unless `state` was saved for this order (keys it lacks are not checked;
        window and block_size only matter in chunk mode)."""
        if self.shuffle == "chunk" and "block_size" not in state:
            # Saved before block_size existed: its order was built from whole chunks.
            state = {**state, "block_size": 0}
        mine_all = self.state()
        if "view" in state:  # saved on a view (a state without one: the whole dataset, or
            # saved before views were recorded; num_samples tells most of those apart)
            mine_all.setdefault("view", "the whole dataset")
        for key, mine in mine_all.items():
            if key in state and state[key] != mine and not (
                    key in ("window", "block_size") and self.shuffle != "chunk"):
                raise ValueError(
                    f"the state was saved with {key}={state[key]!r}, this loader has "
                    f"{key}={mine!r}: the epoch's order would differ, so the position "
                    "would name other samples")

    def __getstate__(self) -> dict[str, Any]:
        # Only the URI, version and options travel; the handles reopen lazily.
        return {**self.__dict__, "_ds": None, "_sampler": None}


def sample_order(source: Any, options: dict[str, Any]) -> Any:
    """The order a sample loader (Loader, ImageLoader, stoker.torch) reads `source` in: a
    SampleOrder, or for a stoker.Mix a MixOrder of its sources' SampleOrders."""
    if isinstance(source, Mix):
        # Each source is a stream of its own epochs: the mix's drop_last acts on the mix.
        orders = [SampleOrder(s, options, False, in_mix=True) for s in source.sources]
        return MixOrder(source, orders, "samples", options["seed"], "num_samples",
                        {"shuffle": options["shuffle"], "seed": options["seed"],
                         "window": options["window"],
                         "block_size": [o.block_size for o in orders]})
    return SampleOrder(source, options, options["drop_last"])


class Reading:
    """The epoch, rank and world size every loader reports, its order and its EpochCursor.
    A loader calls `_start_reading` from its __init__, `_begin` at the start of a pass and
    iterates `run_pass`."""

    _cursor: EpochCursor
    _rank: int
    _world_size: int
    _drop_last: bool
    _meter: StallMeter | None = None

    def _start_reading(self, order: Any, rank: int | None, world_size: int | None,
                       drop_last: bool) -> None:
        self._rank, self._world_size = env_world(rank, world_size)
        self._order = order
        self._drop_last = bool(drop_last)
        self._cursor = EpochCursor(order.num_units, self._world_size, self._drop_last)

    @property
    def epoch(self) -> int:
        return self._cursor.epoch

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def world_size(self) -> int:
        return self._world_size

    @property
    def mixed(self) -> bool:
        """Whether the source is a stoker.Mix (items then come with their source)."""
        return isinstance(self._order, MixOrder)

    @property
    def counts(self) -> list[int]:
        """The units (samples, token blocks) each source of a Mix gives every epoch; for one
        source, [units per epoch]."""
        return list(self._order.counts) if self.mixed else [self._order.num_units]

    def set_epoch(self, epoch: int) -> None:
        """Reads epoch `epoch` next. A different epoch than the current one starts at its
        beginning; the current one keeps its position (so set_epoch(e) after loading a state
        saved in epoch e continues that epoch instead of restarting it)."""
        self._cursor.set_epoch(int(epoch))

    def _units_in_pass(self, batch_size: int | None) -> int:
        """Units (or batches of batch_size) this rank yields in the pass under way, or else in
        the next one."""
        units = self._cursor.pass_samples()
        if batch_size is None:
            return units
        return units // batch_size if self._drop_last else -(-units // batch_size)

    def _begin(self) -> tuple[int, np.ndarray | None, np.ndarray]:
        """Starts a pass: (its token, the source of each unit of this rank's share — None with
        one source —, the units)."""
        token = self._cursor.begin_pass()
        sources, units = self._order.rank_plan(self._cursor, self._rank, self._world_size)
        return token, sources, units

    def _with_stalls(self, stats: dict[str, Any]) -> dict[str, Any]:
        """`stats` with the stall figures of the last (or current) pass (stoker.stalls)."""
        out = dict(stats)
        if self._meter is not None:
            out.update(self._meter.stats())
        return out

    def _state(self, consumed: int) -> dict[str, Any]:
        """The position after `consumed` units of the pass, with what decides the order."""
        c = self._cursor
        return {"epoch": c.epoch, "position": c.consumed_position(consumed),
                "planned_world_size": c.planned_world_size, "samples_yielded": consumed,
                "world_size": self._world_size, "rank": self._rank,
                "drop_last": self._drop_last, **self._order.state()}

    def _load(self, state: dict[str, Any]) -> None:
        for key in ("epoch", "position", "planned_world_size"):
            if key not in state:
                raise ValueError(f"not a stoker loader state: no '{key}'")
        self._order.check(state)
        self._cursor.load(int(state["epoch"]), int(state["position"]),
                          int(state["planned_world_size"]))

    def __getstate__(self) -> dict[str, Any]:
        # A pass's figures stay with the process that read it; the order reopens its handles.
        return {**self.__dict__, "_meter": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)


class SampleReading(Reading):
    """A Reading of samples (Loader, ImageLoader, stoker.torch): what it reports of its
    SampleOrder, or of each of a Mix's."""

    @property
    def dataset(self) -> _CoreDataset | Mix:
        """The dataset read (the base of a view), or the Mix."""
        return self._order.mix if self.mixed else self._order.dataset()

    @property
    def block_size(self) -> int | list[int]:
        """The shuffle unit in bytes (chunk mode; 0: whole chunks), see the block_size option;
        over a Mix, each source's."""
        if self.mixed:
            return [s.block_size for s in self._order.sources]
        return self._order.block_size

    @property
    def dataset_version(self) -> int | list[int]:
        """The version read; over a Mix, each source's."""
        if self.mixed:
            return [s.version for s in self._order.sources]
        return self._order.version


# One step of a pass: (what is yielded, the units it consumed, seconds of it spent waiting for
# reads, for decoding or transforming, and for feeders: ImageLoader(feeders=...)).
Step = tuple[Any, int, float, float, float]


def run_pass(cursor: EpochCursor, token: int, meter: StallMeter | None, steps: Iterator[Step],
             finish: Callable[[], None]) -> Iterator[Any]:
    """Yields the items of `steps`, counting the units each consumed into the cursor (under the
    pass's `token`) and the time the consumer waited for it into `meter`; `finish` (the pass's
    figures, closing its pipelines) runs however the pass stops, and a pass that reached its
    end moves the cursor on."""
    try:
        asked = now()
        for item, count, read, decode, feeders in steps:
            if cursor.pass_token != token:
                # iter(), set_epoch() or load_state_dict() on the loader started another pass
                # since: this one's samples would be read twice (or out of turn).
                raise RuntimeError(
                    "this iterator's pass was replaced by a newer iter(), set_epoch() or "
                    "load_state_dict() on its loader: iterate the new one (one pass at a "
                    "time per loader)")
            if meter is not None:
                meter.step(asked, now(), read=read, decode=decode, feeders=feeders)
            cursor.add_yielded(token, count)
            yield item
            asked = now()
    finally:
        finish()
    cursor.end_pass(token)


def read_budget(ds: _CoreDataset, shuffle: str, window: int, memory_budget: int | None) -> int:
    """The read pipeline's memory budget: `memory_budget` if given (bytes, as
    parse_loader_options returns it), else enough to read a whole window of chunks while the
    previous one is consumed (the read pipeline plans in segments of half its budget,
    docs/decisions/0004)."""
    # A window holds at most every chunk: a dataset of 3 chunks needs no budget for 16.
    window = min(window, max(1, ds.num_chunks)) if shuffle == "chunk" else 1
    whole_windows = 2 * window * ds.largest_chunk_bytes
    if memory_budget is None:
        return max(DEFAULT_MIN_BUDGET, whole_windows)
    if shuffle == "chunk" and int(memory_budget) < whole_windows:
        # Measured from S3 (16 MiB chunks, window 16, `epoch_bench --budget`): 512 MiB read
        # the 518 MB epoch once, 256 MiB read 1.02 GB, 128 MiB 1.07 GB in 2,133 requests.
        fits = max(1, int(memory_budget) // (2 * ds.largest_chunk_bytes))
        warn_user(
            f"memory_budget ({int(memory_budget):,} bytes) is less than 2 x window x the "
            f"largest chunk ({whole_windows:,} bytes): a shuffle window's chunks are read "
            f"in pieces, and up to about twice the dataset's bytes per epoch (see "
            f"stats()['bytes_read']). Raise memory_budget, or lower window to {fits}.")
    return int(memory_budget)


# The smallest read-ahead budget the loader picks by itself (bytes).
DEFAULT_MIN_BUDGET = 256 << 20
