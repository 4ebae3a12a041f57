"""stoker.Mix: datasets mixed by proportion (issue 16 item 5), for stoker.Loader, ImageLoader
and TokenLoader.

    mix = stoker.Mix(["web.stoker", "books.stoker"], weights=[0.7, 0.3])
    loader = stoker.Loader(mix, batch_size=32, seed=0)
    for batch, sources in loader:          # sources[i]: which dataset batch[i] came from
        ...
    for images, labels, sources in stoker.ImageLoader(mix, batch_size=256): ...
    for blocks, sources in stoker.TokenLoader(mix, block_size=2048): ...

A loader mixes units — samples, or token blocks for TokenLoader. Epoch e of a mix of E units
(`epoch_size`, default: all sources' units together) takes n_i = w_i * E units from source i,
rounded by largest remainder (so each source's share of every epoch is within one unit of its
weight), in an order the C++ sampler decides from (seed, e) (a uniform permutation of the
sources' slots, docs/sampler.md's algorithm, so every machine computes the same). Source i is
read as a stream of its own epochs, each in its own sampler order (chunk-wise shuffled by
default): mix epoch e takes stream positions [e * n_i, (e + 1) * n_i), so a source that runs out
goes on with its next epoch, a new permutation. Position p of the mix's order goes to rank
p mod world_size, and the state is a position in it, as for a single dataset: ranks are equal
and resume is exact with any world size.
"""
from __future__ import annotations

import functools
import math
import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ._core import Dataset, EpochCursor, ReadPipeline, Sampler, sample_chunks
from .loader import (
    Loader,
    _Epochs,
    _identity,
    choose_block_size,
    collate_columns,
    env_world,
    reopen_dataset,
    transformed,
)
from .stalls import StallMeter, now
from .views import DatasetView, dataset_and_indices

Source = Dataset | DatasetView

# Sampler.from_chunks wants a dataset version for its seed; the mix's order is its own.
_MIX_SALT = 0x6D6978


class Mix:
    """Datasets and their weights (see the module docstring). `sources`: paths, URIs, open
    stoker.Datasets or views of them (ds.subset / ds.filter); `weights`: non-negative, any scale
    (default: the sources' sizes, i.e. one pass over each per epoch); `epoch_size`: units per
    epoch (default: all sources'). `counts` and `epoch_size` are in samples; a TokenLoader counts
    token blocks instead."""

    def __init__(self, sources: Sequence[str | os.PathLike | Dataset | DatasetView],
                 weights: Sequence[float] | None = None, epoch_size: int | None = None) -> None:
        if not sources:
            raise ValueError("Mix needs at least one source")
        if len(sources) > 65535:
            raise ValueError("a Mix takes at most 65535 sources")
        self.sources: list[Source] = [s if isinstance(s, (Dataset, DatasetView))
                                      else Dataset(os.fspath(s)) for s in sources]
        self._weights = None if weights is None else [float(x) for x in weights]
        if self._weights is not None:
            w = self._weights
            if len(w) != len(self.sources):
                raise ValueError(f"{len(w)} weights for {len(self.sources)} sources")
            if any(not math.isfinite(x) or x < 0 for x in w) or sum(w) <= 0:
                raise ValueError("weights must be finite, non-negative and not all 0")
        self._epoch_size = None if epoch_size is None else int(epoch_size)
        if self._epoch_size is not None and self._epoch_size < 1:
            raise ValueError("epoch_size must be at least 1")
        self.weights, self.counts, self.epoch_size = self.split(
            [len(s) for s in self.sources], "samples")

    def split(self, sizes: Sequence[int], unit: str) -> tuple[list[float], list[int], int]:
        """(weights, units per epoch of each source, epoch size) for sources of `sizes` units:
        the weights given (normalized) or the sizes, the epoch size given or their sum, each
        count within one unit of its share (largest remainder)."""
        raw = self._weights if self._weights is not None else [float(n) for n in sizes]
        if sum(raw) <= 0:
            raise ValueError(f"the sources hold no {unit}")
        weights = [x / sum(raw) for x in raw]
        epoch_size = self._epoch_size if self._epoch_size is not None else sum(sizes)
        exact = [x * epoch_size for x in weights]
        counts = [math.floor(x) for x in exact]
        for i in sorted(range(len(exact)), key=lambda i: (counts[i] - exact[i], i))[
                :epoch_size - sum(counts)]:
            counts[i] += 1
        for s, n, size in zip(self.sources, counts, sizes, strict=True):
            if n > 0 and size == 0:
                raise ValueError(f"source {_named(s)} has no {unit} but a weight above 0")
        return weights, counts, epoch_size

    def __len__(self) -> int:
        return self.epoch_size

    def __reduce__(self):
        return (Mix, (self.sources, self._weights, self._epoch_size))

    def __repr__(self) -> str:
        parts = ", ".join(f"{_named(s)}: {w:.3g}"
                          for s, w in zip(self.sources, self.weights, strict=True))
        return f"stoker.Mix({{{parts}}}, epoch_size={self.epoch_size})"

    def reopened(self) -> Mix:
        """The same mix with its datasets opened again (in a forked or spawned process)."""
        def again(s: Source) -> Source:
            if isinstance(s, DatasetView):
                return DatasetView(reopen_dataset(s.uri, s.version), s.indices)
            return reopen_dataset(s.uri, s.version)
        return Mix([again(s) for s in self.sources], self._weights, self._epoch_size)


def _named(source: Source) -> str:
    """A source as messages and reprs name it: a view by its repr (its base's URI would not tell
    it from the base, or from another view of it)."""
    return repr(source) if isinstance(source, DatasetView) else repr(source.uri)


def mix_label(mix: Mix) -> str:
    """The `dataset` label of a mix's metrics: its sources' URIs."""
    return "+".join(s.uri for s in mix.sources)


def source_sampler(source: Source, shuffle: str, seed: int, window: int,
                   block_size: int) -> Sampler:
    """The order of a source's own epochs (positions in a view), as stoker.Loader reads it."""
    ds, indices = dataset_and_indices(source)
    if indices is None:
        return Sampler(ds, mode=shuffle, seed=seed, window=window, drop_last=False,
                       block_size=block_size)
    return Sampler.from_chunks(np.asarray(sample_chunks(ds))[indices], ds.version, mode=shuffle,
                               seed=seed, window=window, drop_last=False)


def source_block_size(source: Source, window: int, batch_size: int | None,
                      block_size: int | None, shuffle: str) -> int:
    """A source's shuffle unit in chunk mode (a view's: whole chunks)."""
    if shuffle != "chunk" or isinstance(source, DatasetView):
        return 0
    return choose_block_size(source, window, batch_size, block_size)


def base_samples(source: Source, positions: np.ndarray) -> np.ndarray:
    """The base dataset's samples at `positions` of a source (the same for a whole dataset)."""
    _, indices = dataset_and_indices(source)
    picked = positions if indices is None else indices[positions]
    return np.ascontiguousarray(picked, dtype=np.uint32)


class MixReading(_Epochs):
    """The order, ranks and state of a loader over a Mix, whatever its units (samples or token
    blocks). A subclass calls _init_mix, implements _source_order (source i's order in its k-th
    epoch) and reads what _rank_order says: (source, unit) of each of this rank's positions in
    the pass under way."""

    _mix: Mix
    _seed: int
    _drop_last: bool
    _batch_size: int | None

    def _init_mix(self, mix: Mix, sizes: Sequence[int], unit: str) -> None:
        self._mix = mix
        self._sizes = [int(n) for n in sizes]
        _, self._counts, self._epoch_size = mix.split(self._sizes, unit)
        self._slots: Sampler | None = None
        self._cursor = EpochCursor(self._epoch_size, self._world_size, self._drop_last)

    def _source_order(self, source: int, k: int) -> np.ndarray:
        raise NotImplementedError

    @property
    def mix(self) -> Mix:
        return self._mix

    @property
    def counts(self) -> list[int]:
        """Units (samples, or token blocks) each source gives every epoch."""
        return list(self._counts)

    def epoch_order(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """(source, unit) of every position of `epoch`'s order, all ranks."""
        if self._slots is None:
            # The order of the sources' slots: a uniform permutation from (seed, epoch).
            self._slots = Sampler.from_chunks(np.zeros(self._epoch_size, dtype=np.uint32),
                                              _MIX_SALT, mode="full", seed=self._seed)
        counts = np.asarray(self._counts, dtype=np.int64)
        base = np.repeat(np.arange(len(counts), dtype=np.uint16), counts)
        source = base[np.asarray(self._slots.global_order(epoch, 1))]
        unit = np.empty(len(source), dtype=np.uint32)
        for i, (size, n) in enumerate(zip(self._sizes, self._counts, strict=True)):
            if n == 0:
                continue
            q = epoch * n + np.arange(n, dtype=np.int64)  # positions in source i's stream
            picked = np.empty(n, dtype=np.uint32)
            for k in np.unique(q // size).tolist():
                here = (q // size) == k
                picked[here] = np.asarray(self._source_order(i, k))[q[here] % size]
            unit[source == i] = picked
        return source, unit

    def _rank_order(self) -> tuple[np.ndarray, np.ndarray]:
        """(source, unit) of this rank's positions in the pass under way (or the next)."""
        c = self._cursor
        source, unit = self.epoch_order(c.epoch)
        start = c.consumed_position(0)
        pos = start + self._rank + self._world_size * np.arange(c.pass_samples(), dtype=np.int64)
        pos %= self._epoch_size  # the padded last round wraps to the epoch's start
        return source[pos], unit[pos]

    def __len__(self) -> int:
        units = self._cursor.pass_samples()
        if self._batch_size is None:
            return units
        return units // self._batch_size if self._drop_last else -(-units // self._batch_size)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_slots"] = state["_meter"] = None
        return state

    # -- state -----------------------------------------------------------------------------------

    def _order_state(self) -> dict[str, Any]:
        """What besides the mix decides the order (the loader's options), for state_dict."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """A position in the mix's order (as stoker.Loader's; valid for any world size), with
        what decides the order: each source's URI, version and count, and the options."""
        c = self._cursor
        return {"epoch": c.epoch, "position": c.consumed_position(c.yielded),
                "planned_world_size": c.planned_world_size, "world_size": self._world_size,
                "rank": self._rank, "drop_last": self._drop_last,
                "mix": [[s.uri, s.version, n, len(s)]
                        for s, n in zip(self._mix.sources, self._counts, strict=True)],
                **self._order_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continues from `state` (any world size); ValueError if it is another order's."""
        if "mix" not in state:
            raise ValueError("not the state of a loader over a stoker.Mix")
        mine = self.state_dict()
        for key in ("mix",) + tuple(self._order_state()):
            if key in state and state[key] != mine[key]:
                raise ValueError(f"the state was saved with {key}={state[key]!r}, this loader "
                                 f"has {key}={mine[key]!r}: the epoch's order would differ")
        self._cursor.load(int(state["epoch"]), int(state["position"]),
                          int(state["planned_world_size"]))


class SampleMixReading(MixReading):
    """A mix whose units are samples (stoker.Loader and ImageLoader over a Mix): each source
    read in its own sampler's order, with the loader's shuffle options."""

    _shuffle: str
    _window: int

    def _init_sample_mix(self, mix: Mix, block_size: int | None) -> None:
        self._blocks = [source_block_size(ds, self._window, self._batch_size, block_size,
                                          self._shuffle) for ds in mix.sources]
        self._samplers: list[Sampler] | None = None
        self._pid = os.getpid()
        self._init_mix(mix, [len(ds) for ds in mix.sources], "samples")

    def _mix_handles(self) -> tuple[Mix, list[Sampler]]:
        """The mix and each source's sampler in this process (reopened after a fork)."""
        if self._pid != os.getpid():
            self._mix = self._mix.reopened()
            self._samplers = None
            self._pid = os.getpid()
        if self._samplers is None:
            self._samplers = [source_sampler(ds, self._shuffle, self._seed, self._window, b)
                              for ds, b in zip(self._mix.sources, self._blocks, strict=True)]
        return self._mix, self._samplers

    def _source_order(self, source: int, k: int) -> np.ndarray:
        return np.asarray(self._mix_handles()[1][source].global_order(k, 1))

    def __getstate__(self) -> dict[str, Any]:
        state = MixReading.__getstate__(self)
        state["_samplers"] = None
        return state

    @property
    def block_size(self) -> list[int]:
        """Each source's shuffle unit (see Loader.block_size)."""
        return list(self._blocks)

    @property
    def dataset(self) -> Mix:
        return self._mix

    def _order_state(self) -> dict[str, Any]:
        return {"num_samples": self._epoch_size, "shuffle": self._shuffle, "seed": self._seed,
                "window": self._window, "block_size": list(self._blocks)}


class MixLoader(SampleMixReading, Loader):
    """stoker.Loader over a Mix: yields (sample, source) — batched, (collate(samples), sources
    as an int array) — with the Loader's options (shuffle, window and block_size apply to each
    source's own order)."""

    def __init__(self, mix: Mix, *, batch_size: int | None = None, shuffle: str = "chunk",
                 seed: int = 0, window: int = 16, drop_last: bool = False,
                 rank: int | None = None, world_size: int | None = None,
                 memory_budget: int | str | None = None, io_depth: int = 8,
                 block_size: int | None = None, transform=None, collate=None) -> None:
        from ._core import parse_loader_options
        options = parse_loader_options({
            "batch_size": batch_size, "shuffle": shuffle, "seed": seed, "window": window,
            "drop_last": drop_last, "rank": rank, "world_size": world_size,
            "memory_budget": memory_budget, "io_depth": io_depth, "block_size": block_size})
        self._rank, self._world_size = env_world(options["rank"], options["world_size"])
        self._batch_size = options["batch_size"]
        self._shuffle, self._seed = options["shuffle"], options["seed"]
        self._window, self._drop_last = options["window"], options["drop_last"]
        self._memory_budget, self._io_depth = options["memory_budget"], options["io_depth"]
        self._transform, self._collate = transform, collate
        self._init_sample_mix(mix, options["block_size"])
        self._stats: dict[str, Any] = {}

    def __iter__(self) -> Iterator[Any]:
        token = self._cursor.begin_pass()
        return self._generate_mix(token)

    def _generate_mix(self, token: int) -> Iterator[Any]:
        mix, _ = self._mix_handles()
        mine_source, mine_sample = self._rank_order()
        budget = self._memory_budget
        pipes = []
        for i, source in enumerate(mix.sources):
            ds, _ = dataset_and_indices(source)
            plan = base_samples(source, mine_sample[mine_source == i])
            pipes.append(ReadPipeline(ds, plan, memory_budget=self._read_budget(ds, budget),
                                      io_depth=self._io_depth) if len(plan) else None)
        transform = self._transform or _identity
        # Stacked columns only when every source has the same ones.
        first = mix.sources[0].columns
        columns = bool(first) and all(ds.columns == first for ds in mix.sources)
        collate = self._collate or (functools.partial(collate_columns, columns=first)
                                    if columns and self._transform is None else _identity)
        order = mine_source.tolist()
        meter = self._meter = StallMeter(dataset_and_indices(mix.sources[0])[0], "Loader",
                                         mix_label(mix))
        live = [p for p in pipes if p is not None]
        size = self._batch_size
        try:
            asked = now()
            for begin in range(0, len(order), size or 1):
                part = order[begin:begin + (size or 1)]
                if size is not None and self._drop_last and len(part) < size:
                    break
                waited = sum(p.wait_seconds for p in live)
                items, decode = [], 0.0
                for s in part:
                    item, spent = transformed(pipes[s], 1, transform)
                    items += item
                    decode += spent
                if size is not None:
                    t = now()
                    items = collate(items)
                    decode += now() - t
                meter.step(asked, now(), read=sum(p.wait_seconds for p in live) - waited,
                           decode=decode)
                self._cursor.add_yielded(token, len(part))
                if size is None:
                    yield items[0], part[0]
                else:
                    yield items, np.asarray(part, dtype=np.int64)
                asked = now()
        finally:
            self._stats = {"samples_per_source": np.bincount(
                mine_source, minlength=len(mix.sources)).tolist()}
            for p in pipes:
                if p is not None:
                    p.close()
        self._cursor.end_pass(token)

    def __repr__(self) -> str:
        return (f"stoker.Loader({self._mix!r}, shuffle='{self._shuffle}', "
                f"batch_size={self._batch_size}, rank={self._rank}, "
                f"world_size={self._world_size}, epoch={self.epoch})")
