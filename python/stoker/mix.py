"""stoker.Mix: datasets mixed by proportion (issue 16 item 5), for stoker.Loader, ImageLoader
and TokenLoader.

    mix = stoker.Mix(["web.stoker", "books.stoker"], weights=[0.7, 0.3])
    loader = stoker.Loader(mix, batch_size=32, seed=0)
    for batch, sources in loader:          # sources[i]: which dataset batch[i] came from
        ...
    for images, labels, sources in stoker.ImageLoader(mix, batch_size=256): ...
    for blocks, sources in stoker.TokenLoader(mix, seq_len=2048): ...

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

import math
import os
from collections.abc import Sequence
from typing import Any, Protocol, TypeAlias

import numpy as np

from ._core import EpochCursor, Sampler
from .views import Dataset, DatasetView

Source: TypeAlias = Dataset | DatasetView

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


def _named(source: Source) -> str:
    """A source as messages and reprs name it: a view by its repr (its base's URI would not tell
    it from the base, or from another view of it)."""
    return repr(source) if isinstance(source, DatasetView) else repr(source.uri)


def mix_label(mix: Mix) -> str:
    """The `dataset` label of a mix's metrics: its sources' URIs."""
    return "+".join(s.uri for s in mix.sources)


class UnitSource(Protocol):
    """What a MixOrder needs of each source's own order (stoker._reading.SampleOrder,
    stoker.token_loader.BlockOrder)."""

    num_units: int

    def epoch(self, k: int) -> np.ndarray: ...

    def to_base(self, units: np.ndarray) -> np.ndarray: ...


class MixOrder:
    """The order of a loader over a Mix (see the module docstring), whatever its units: the
    source and unit of every position of an epoch, from each source's own order (`sources`,
    one per mix source, each with its epochs of `num_units` units). `unit` names the units in
    messages; `unit_key` and `options` are what state_dict() records besides the mix."""

    def __init__(self, mix: Mix, sources: Sequence[UnitSource], unit: str, seed: int,
                 unit_key: str = "num_samples", options: dict[str, Any] | None = None) -> None:
        self.mix = mix
        # Each loader's own kind (SampleOrder, BlockOrder), which it reads through.
        self.sources: list[Any] = list(sources)
        self._sizes = [int(s.num_units) for s in self.sources]
        _, self.counts, self.num_units = mix.split(self._sizes, unit)
        self._seed = int(seed)
        self._slots: Sampler | None = None
        # What each source is, fixed now: its URI, version, units per epoch and samples.
        self._recorded = [[s.uri, s.version, n, len(s)]
                          for s, n in zip(mix.sources, self.counts, strict=True)]
        self._keys = {unit_key: self.num_units, **(options or {})}

    def epoch_order(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """(source, unit) of every position of `epoch`'s order, all ranks; a unit is a
        position in its source's own order."""
        if self._slots is None:
            # The order of the sources' slots: a uniform permutation from (seed, epoch).
            zeros: Any = np.zeros(self.num_units, dtype=np.uint32)  # a Sequence, to from_chunks
            self._slots = Sampler.from_chunks(zeros,
                                              _MIX_SALT, mode="full", seed=self._seed)
        counts = np.asarray(self.counts, dtype=np.int64)
        base = np.repeat(np.arange(len(counts), dtype=np.uint16), counts)
        source = base[np.asarray(self._slots.global_order(epoch, 1))]
        unit = np.empty(len(source), dtype=np.uint32)
        for i, (size, n) in enumerate(zip(self._sizes, self.counts, strict=True)):
            if n == 0:
                continue
            q = epoch * n + np.arange(n, dtype=np.int64)  # positions in source i's stream
            picked = np.empty(n, dtype=np.uint32)
            for k in np.unique(q // size).tolist():
                here = (q // size) == k
                picked[here] = self.sources[i].epoch(k)[q[here] % size]
            unit[source == i] = picked
        return source, unit

    def rank_plan(self, cursor: EpochCursor, rank: int,
                  world_size: int) -> tuple[np.ndarray, np.ndarray]:
        """(source, the source's base unit) of this rank's positions in the pass under way (or
        the next)."""
        source, unit = self.epoch_order(cursor.epoch)
        start = cursor.consumed_position(0)
        pos = start + rank + world_size * np.arange(cursor.pass_samples(), dtype=np.int64)
        pos %= self.num_units  # the padded last round wraps to the epoch's start
        source, unit = source[pos], unit[pos]
        base = np.empty(len(unit), dtype=np.uint32)
        for i, s in enumerate(self.sources):
            here = source == i
            base[here] = s.to_base(unit[here])
        return source, base

    def state(self) -> dict[str, Any]:
        return {"mix": self._recorded, **self._keys}

    def check(self, state: dict[str, Any]) -> None:
        """ValueError unless `state` was saved for this order."""
        if "mix" not in state:
            raise ValueError("not the state of a loader over a stoker.Mix")
        for key, mine in self.state().items():
            if key in state and state[key] != mine:
                raise ValueError(f"the state was saved with {key}={state[key]!r}, this loader "
                                 f"has {key}={mine!r}: the epoch's order would differ")

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_slots": None}
