"""stoker.Mix: datasets mixed by proportion (issue 16 item 5), for stoker.Loader.

    mix = stoker.Mix(["web.stoker", "books.stoker"], weights=[0.7, 0.3])
    loader = stoker.Loader(mix, batch_size=32, seed=0)
    for batch, sources in loader:          # sources[i]: which dataset batch[i] came from
        ...

Epoch e of a mix of E samples (`epoch_size`, default: all sources' samples together) takes
n_i = w_i * E samples from source i, rounded by largest remainder (so each source's share of
every epoch is within one sample of its weight), in an order the C++ sampler decides from
(seed, e) (a uniform permutation of the sources' slots, docs/sampler.md's algorithm, so every
machine computes the same). Source i is read as a stream of its own epochs, each in its own
sampler order (chunk-wise shuffled by default): mix epoch e takes stream positions
[e * n_i, (e + 1) * n_i), so a source that runs out goes on with its next epoch, a new
permutation. Position p of the mix's order goes to rank p mod world_size, and the state is a
position in it, as for a single dataset: ranks are equal and resume is exact with any world
size.
"""
from __future__ import annotations

import math
import os
from typing import Any, Iterator, Sequence

import numpy as np

from ._core import Dataset, EpochCursor, ReadPipeline, Sampler
from .loader import (_ORDER_KEYS, Loader, choose_block_size, collate_columns, env_world,
                     reopen_dataset, _identity)

# Sampler.from_chunks wants a dataset version for its seed; the mix's order is its own.
_MIX_SALT = 0x6D6978


class Mix:
    """Datasets and their weights (see the module docstring). `sources`: paths, URIs or open
    stoker.Datasets; `weights`: non-negative, any scale (default: the sources' sizes, i.e. one
    pass over each per epoch); `epoch_size`: samples per epoch (default: all sources')."""

    def __init__(self, sources: Sequence[str | os.PathLike | Dataset],
                 weights: Sequence[float] | None = None, epoch_size: int | None = None) -> None:
        if not sources:
            raise ValueError("Mix needs at least one source")
        self.sources = [s if isinstance(s, Dataset) else Dataset(os.fspath(s)) for s in sources]
        sizes = [len(s) for s in self.sources]
        w = [float(x) for x in (weights if weights is not None else sizes)]
        if len(w) != len(self.sources):
            raise ValueError(f"{len(w)} weights for {len(self.sources)} sources")
        if any(not math.isfinite(x) or x < 0 for x in w) or sum(w) <= 0:
            raise ValueError("weights must be finite, non-negative and not all 0")
        self.weights = [x / sum(w) for x in w]
        self.epoch_size = int(epoch_size) if epoch_size is not None else sum(sizes)
        if self.epoch_size < 1:
            raise ValueError("epoch_size must be at least 1")
        # Largest remainder: the counts sum to epoch_size, each within 1 of its share.
        exact = [x * self.epoch_size for x in self.weights]
        counts = [math.floor(x) for x in exact]
        for i in sorted(range(len(exact)), key=lambda i: (counts[i] - exact[i], i))[
                :self.epoch_size - sum(counts)]:
            counts[i] += 1
        self.counts = counts
        for s, n, size in zip(sources, counts, sizes):
            if n > 0 and size == 0:
                raise ValueError(f"source {s!r} has no samples but a weight above 0")

    def __len__(self) -> int:
        return self.epoch_size

    def __reduce__(self):
        return (Mix, (self.sources, self.weights, self.epoch_size))

    def __repr__(self) -> str:
        parts = ", ".join(f"{s.uri!r}: {w:.3g}" for s, w in zip(self.sources, self.weights))
        return f"stoker.Mix({{{parts}}}, epoch_size={self.epoch_size})"

    def identity(self) -> list:
        """What a saved state must match: each source's URI and version, the counts."""
        return [[s.uri, s.version, n] for s, n in zip(self.sources, self.counts)]


class MixLoader(Loader):
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
        self._mix = mix
        self._rank, self._world_size = env_world(options["rank"], options["world_size"])
        self._batch_size = options["batch_size"]
        self._shuffle, self._seed = options["shuffle"], options["seed"]
        self._window, self._drop_last = options["window"], options["drop_last"]
        self._memory_budget, self._io_depth = options["memory_budget"], options["io_depth"]
        self._transform, self._collate = transform, collate
        self._blocks = [choose_block_size(ds, self._window, self._batch_size,
                                          options["block_size"])
                        if self._shuffle == "chunk" else 0 for ds in mix.sources]
        self._num_samples = mix.epoch_size
        self._version = 0  # a mix has no version of its own; its identity() is checked
        self._samplers: list[Sampler] | None = None
        self._slots: Sampler | None = None
        self._pid = os.getpid()
        self._cursor = EpochCursor(self._num_samples, self._world_size, self._drop_last)
        self._stats: dict[str, Any] = {}

    # -- handles ---------------------------------------------------------------------------------

    def _handles(self):
        if self._pid != os.getpid():
            self._mix = Mix([reopen_dataset(s.uri, s.version) for s in self._mix.sources],
                            self._mix.weights, self._mix.epoch_size)
            self._samplers = self._slots = None
            self._pid = os.getpid()
        if self._samplers is None:
            self._samplers = [Sampler(ds, mode=self._shuffle, seed=self._seed,
                                      window=self._window, drop_last=False, block_size=b)
                              for ds, b in zip(self._mix.sources, self._blocks)]
            # The order of the sources' slots: a uniform permutation from (seed, epoch).
            self._slots = Sampler.from_chunks(np.zeros(self._num_samples, dtype=np.uint32),
                                              _MIX_SALT, mode="full", seed=self._seed)
        return self._mix, self._samplers, self._slots

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_samplers"] = state["_slots"] = None
        return state

    @property
    def mix(self) -> Mix:
        return self._mix

    @property
    def block_size(self) -> list[int]:  # type: ignore[override]
        """Each source's shuffle unit (see Loader.block_size)."""
        return list(self._blocks)

    @property
    def dataset(self) -> Mix:
        return self._mix

    # -- the epoch's order -----------------------------------------------------------------------

    def epoch_order(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """(source, sample) of every position of `epoch`'s order, all ranks."""
        mix, samplers, slots = self._handles()
        counts = np.asarray(mix.counts, dtype=np.int64)
        base = np.repeat(np.arange(len(counts), dtype=np.uint16), counts)
        source = base[np.asarray(slots.global_order(epoch, 1))]
        sample = np.empty(len(source), dtype=np.uint32)
        for i, (ds, n) in enumerate(zip(mix.sources, mix.counts)):
            if n == 0:
                continue
            q = epoch * n + np.arange(n, dtype=np.int64)  # positions in source i's stream
            size = len(ds)
            picked = np.empty(n, dtype=np.uint32)
            for k in np.unique(q // size).tolist():
                here = (q // size) == k
                picked[here] = np.asarray(samplers[i].global_order(k, 1))[q[here] % size]
            sample[source == i] = picked
        return source, sample

    def _rank_positions(self) -> np.ndarray:
        c = self._cursor
        count = c.pass_samples()
        start = c.consumed_position(0)
        pos = start + self._rank + self._world_size * np.arange(count, dtype=np.int64)
        return pos % self._num_samples  # the padded last round wraps to the epoch's start

    def __len__(self) -> int:
        samples = self._cursor.pass_samples()
        if self._batch_size is None:
            return samples
        return samples // self._batch_size if self._drop_last else -(-samples // self._batch_size)

    def __iter__(self) -> Iterator[Any]:
        token = self._cursor.begin_pass()
        return self._generate_mix(token)

    def _generate_mix(self, token: int) -> Iterator[Any]:
        mix, _, _ = self._handles()
        source, sample = self.epoch_order(self._cursor.epoch)
        positions = self._rank_positions()
        mine_source = source[positions]
        budget = self._memory_budget
        pipes = []
        for i, ds in enumerate(mix.sources):
            plan = np.ascontiguousarray(sample[positions][mine_source == i], dtype=np.uint32)
            pipes.append(ReadPipeline(ds, plan, memory_budget=self._read_budget(ds, budget),
                                      io_depth=self._io_depth) if len(plan) else None)
        transform = self._transform or _identity
        # Stacked columns only when every source has the same ones.
        first = mix.sources[0].columns
        columns = bool(first) and all(ds.columns == first for ds in mix.sources)
        collate = self._collate or (collate_columns if columns and self._transform is None
                                    else _identity)
        order = mine_source.tolist()
        try:
            if self._batch_size is None:
                for s in order:
                    item = transform(next(pipes[s]))
                    self._cursor.add_yielded(token, 1)
                    yield item, s
            else:
                size = self._batch_size
                for begin in range(0, len(order), size):
                    part = order[begin:begin + size]
                    if self._drop_last and len(part) < size:
                        break
                    batch = collate([transform(next(pipes[s])) for s in part])
                    self._cursor.add_yielded(token, len(part))
                    yield batch, np.asarray(part, dtype=np.int64)
        finally:
            self._stats = {"samples_per_source": np.bincount(
                mine_source, minlength=len(mix.sources)).tolist()}
            for p in pipes:
                if p is not None:
                    p.close()
        self._cursor.end_pass(token)

    # -- state -----------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        c = self._cursor
        return {"epoch": c.epoch, "position": c.consumed_position(c.yielded),
                "planned_world_size": c.planned_world_size, "world_size": self._world_size,
                "rank": self._rank, "mix": self._mix.identity(), "num_samples": self._num_samples,
                "shuffle": self._shuffle, "seed": self._seed, "window": self._window,
                "block_size": list(self._blocks), "drop_last": self._drop_last}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        mine = self.state_dict()
        for key in ("mix",) + tuple(k for k in _ORDER_KEYS if k != "dataset_version"):
            if key in state and state[key] != mine[key]:
                raise ValueError(f"the state was saved with {key}={state[key]!r}, this loader "
                                 f"has {key}={mine[key]!r}: the epoch's order would differ")
        if "mix" not in state:
            raise ValueError("not the state of a loader over a stoker.Mix")
        self._cursor.load(int(state["epoch"]), int(state["position"]),
                          int(state["planned_world_size"]))

    def __repr__(self) -> str:
        return (f"stoker.Loader({self._mix!r}, shuffle='{self._shuffle}', "
                f"batch_size={self._batch_size}, rank={self._rank}, "
                f"world_size={self._world_size}, epoch={self.epoch})")
