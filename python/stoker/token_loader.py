"""stoker.TokenLoader: blocks of consecutive tokens for LLM training.

    with stoker.Writer("corpus.stoker", columns={"tokens": "tokens:uint16"}) as w:
        for doc in docs:
            w.write({"tokens": tokenizer.encode(doc)})
    loader = stoker.TokenLoader("corpus.stoker", block_size=2048, batch_size=8)
    for batch in loader:                  # (8, 2049) uint16 NumPy array
        x, y = batch[:, :-1], batch[:, 1:]

The tokens column is one stream (docs/format.md §9; loader/token_stream.h): chunk after chunk,
and in a chunk the documents that start in it, in order. Block k is tokens [k*B, k*B + B + 1)
of the stream (B = block_size): documents cross block edges, as in Megatron and LitData's
TokensLoader, and each token is the input of exactly one block per epoch (a final remainder
shorter than a block is left out). Blocks are shuffled chunk-wise, by the same C++ sampler as
stoker.Loader (a block belongs to the chunk it starts in): chunks in random order, blocks
shuffled within windows of `window` chunks, so the reads are whole chunks. Ranks get equal
shares (position p of the epoch's order goes to rank p mod world_size); state_dict() is a
position in the epoch's order, so load_state_dict() resumes exactly with any world size.

Reading (C++, _core.TokenBatches): whole chunks, CRC-checked, by two threads ahead of the
consumer in the order the plan needs them; a chunk is dropped after the last block that needs
it, so memory is about (2 x window + prefetch) chunks (the next window is read while this one
is handed out; "sequential" holds 2 + prefetch). Batches are copied out in C++ with the GIL
released: no per-block or per-token Python.

A stoker.Mix of token datasets mixes blocks (stoker.mix): each batch comes with the source of
every row, `for blocks, sources in TokenLoader(mix, ...)`; memory is that of one loader
per source.
"""
from __future__ import annotations

import os
import zlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from ._core import Dataset, EpochCursor, Sampler, TokenBatches, TokenStream
from .loader import _Epochs, env_world, reopen_dataset
from .mix import Mix, MixReading, mix_label
from .stalls import StallMeter, now
from .views import dataset_and_indices

_ORDER_KEYS = ("dataset_version", "view", "column", "block_size", "num_blocks", "shuffle",
               "seed", "window")


def _check_options(block_size: int, batch_size: int | None, shuffle: str, prefetch: int) -> None:
    if int(block_size) < 1:
        raise ValueError("block_size must be at least 1")
    if batch_size is not None and int(batch_size) < 1:
        raise ValueError("batch_size must be at least 1, or None")
    if int(prefetch) < 0:
        raise ValueError("prefetch must be at least 0")
    if shuffle not in ("chunk", "sequential"):
        # A uniform permutation of blocks would keep nearly every chunk in memory until its
        # last block: chunk mode mixes within windows at whole-chunk reads instead.
        raise ValueError(f"shuffle must be 'chunk' or 'sequential', not {shuffle!r}")


def _check_not_ndarray(ds: Dataset, column: str) -> None:
    """Refuses an ndarray column (what stoker.optimize infers from NumPy token arrays) with what
    to write instead: the token stream reads a tokens column's files as raw tokens back to
    back, and an ndarray's are .npy files, each with a header."""
    kind = ds.columns.get(column, "")
    if not kind.startswith("ndarray"):
        return  # TokenStream says what else is wrong
    dtype = kind.rstrip("?").partition(":")[2]
    element = dtype if dtype and np.dtype(dtype).kind in "iu" else "int32"  # the default
    raise ValueError(
        f"{column!r} is an {kind!r} column of {ds.uri}, and TokenLoader reads a tokens column: "
        f"write it with columns={{{column!r}: 'tokens:{element}'}} in stoker.Writer or "
        f"stoker.optimize (each value a 1-D integer array or list)")


class _Blocks:
    """A tokens column cut into blocks of `block` (+ 1) tokens: its TokenStream and a Sampler
    over the blocks, each block in the chunk its first token lies in."""

    def __init__(self, ds: Dataset, column: str, block: int, shuffle: str, seed: int,
                 window: int, drop_last: bool, samples: np.ndarray | None = None) -> None:
        _check_not_ndarray(ds, column)
        self.stream = TokenStream(ds, column, samples)
        ends = np.cumsum(np.asarray(self.stream.chunk_tokens, dtype=np.int64), dtype=np.int64)
        self.num_tokens = int(ends[-1]) if len(ends) else 0
        blocks = (self.num_tokens - 1) // block if self.num_tokens > 1 else 0
        starts = np.arange(blocks, dtype=np.int64) * block
        chunks = np.searchsorted(ends, starts, side="right").astype(np.uint32)
        self.sampler = Sampler.from_chunks(chunks, ds.version, mode=shuffle, seed=seed,
                                           window=window, drop_last=drop_last)


class TokenLoader(_Epochs):
    """Yields batches of token blocks: NumPy arrays of shape (batch_size, block_size + 1), in
    the column's dtype (or `dtype`); with batch_size=None, single blocks.

    Args:
      dataset: a path / URI of a column dataset (stoker.Writer), an open stoker.Dataset, or a
        view of one (ds.subset / ds.filter: the stream holds its documents, in storage order).
      column: its tokens column.
      block_size: tokens per block, plus the one that follows (the last target).
      batch_size: blocks per batch; None yields blocks one by one.
      shuffle: "chunk" (default) or "sequential" (the stream's order), as stoker.Loader.
      seed, window, drop_last, rank, world_size: as stoker.Loader (rank and world size from
        torchrun's RANK and WORLD_SIZE by default).
      dtype: convert blocks to this NumPy dtype (e.g. "int64" for torch embeddings).
      prefetch: chunks read ahead beyond those in use.

    Passed a stoker.Mix of token datasets, it yields (batch, sources): the source of each row.
    """

    def __new__(cls, dataset: Any = None, *args: Any, **kwargs: Any) -> TokenLoader:
        if cls is TokenLoader and isinstance(dataset, Mix):
            return super().__new__(MixTokenLoader)
        return super().__new__(cls)

    def __init__(self, dataset: str | os.PathLike | Dataset, column: str = "tokens",
                 block_size: int = 2048, batch_size: int | None = 8, *,
                 shuffle: str = "chunk", seed: int = 0, window: int = 16,
                 drop_last: bool = False, rank: int | None = None,
                 world_size: int | None = None, dtype: str | None = None,
                 prefetch: int = 2) -> None:
        _check_options(block_size, batch_size, shuffle, prefetch)
        self._rank, self._world_size = env_world(rank, world_size)
        # A view's documents alone make the stream (in storage order, whatever the view's).
        ds, self._indices = dataset_and_indices(dataset)
        self._uri, self._version = ds.uri, ds.version
        self._column = column
        self._block = int(block_size)
        self._batch_size = None if batch_size is None else int(batch_size)
        self._shuffle, self._seed, self._window = shuffle, int(seed), int(window)
        self._drop_last = bool(drop_last)
        self._dtype = None if dtype is None else np.dtype(dtype)
        self._prefetch = int(prefetch)
        self._ds: Dataset | None = ds
        self._pid = os.getpid()
        self._blocks: _Blocks | None = None
        stream, sampler = self._handles()  # a bad column or option fails here
        self._num_blocks = sampler.num_samples
        self._cursor = EpochCursor(self._num_blocks, self._world_size, self._drop_last)
        self._stats: dict[str, Any] = {}

    # -- per-process handles ----------------------------------------------------------------

    def _handles(self) -> tuple[TokenStream, Sampler]:
        if self._pid != os.getpid() or self._ds is None:
            self._ds = reopen_dataset(self._uri, self._version)
            self._blocks = None
            self._pid = os.getpid()
        if self._blocks is None:
            self._blocks = _Blocks(self._ds, self._column, self._block, self._shuffle,
                                   self._seed, self._window, self._drop_last, self._indices)
        return self._blocks.stream, self._blocks.sampler

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_ds"] = state["_blocks"] = state["_meter"] = None
        return state

    def _ahead(self) -> int:
        """Chunks held beyond those released: in chunk mode two windows, so the next window
        is read while this one's blocks are handed out (with one, the readers would wait for
        the window to end and the consumer for the next window's reads: 1.5x slower)."""
        return (2 * self._window if self._shuffle == "chunk" else 2) + self._prefetch

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    # -- properties ----------------------------------------------------------------------------

    @property
    def num_blocks(self) -> int:
        """Blocks in an epoch (all ranks)."""
        return self._num_blocks

    @property
    def num_tokens(self) -> int:
        """Tokens in the stream."""
        self._handles()
        assert self._blocks is not None
        return self._blocks.num_tokens

    def __len__(self) -> int:
        blocks = self._cursor.pass_samples()
        if self._batch_size is None:
            return blocks
        return blocks // self._batch_size if self._drop_last else -(-blocks // self._batch_size)

    # -- iteration -------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[np.ndarray]:
        token = self._cursor.begin_pass()
        stream, sampler = self._handles()
        c = self._cursor
        plan, _, _ = sampler.plan_rank(c.epoch, c.position, c.planned_world_size,
                                       self._world_size, self._rank)
        return self._generate(stream, np.asarray(plan, dtype=np.int64), token)

    def _generate(self, stream: TokenStream, plan: np.ndarray, token: int) -> Iterator[np.ndarray]:
        size = self._batch_size
        if size is not None and self._drop_last:
            plan = plan[:len(plan) - len(plan) % size]
        batches = TokenBatches(stream, np.ascontiguousarray(plan, dtype=np.uint32), self._block,
                               size or 1, self._ahead())
        stats = {"blocks": 0, "tokens": 0, "chunks_read": 0}
        meter = self._meter = StallMeter(self._ds, "TokenLoader")
        try:
            asked = now()
            while True:
                waited = batches.wait_seconds
                if (batch := batches.next()) is None:
                    break
                if self._dtype is not None:
                    batch = batch.astype(self._dtype)
                stats["blocks"] += len(batch)
                stats["tokens"] += len(batch) * self._block
                self._cursor.add_yielded(token, len(batch))
                meter.step(asked, now(), read=batches.wait_seconds - waited)
                yield batch[0] if size is None else batch
                asked = now()
        finally:
            stats["chunks_read"] = batches.chunks_read
            self._stats = stats
        self._cursor.end_pass(token)

    # -- state -----------------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Counters of the last pass: blocks, tokens (block_size per block), chunks_read; and
        whether training waited for data: starved_fraction, wall_seconds, waiting_seconds,
        stall_seconds ({"storage", "cache", "decode", "queue": seconds}, see stoker.stalls)."""
        return self._with_stalls(self._stats)

    def state_dict(self) -> dict[str, Any]:
        """Where this loader is, as stoker.Loader's: plain ints, strs and bools."""
        c = self._cursor
        return {
            "epoch": c.epoch, "position": c.consumed_position(c.yielded),
            "planned_world_size": c.planned_world_size, "world_size": self._world_size,
            "rank": self._rank, "dataset_version": self._version,
            "view": self._view_id(),
            "column": self._column,
            "block_size": self._block, "num_blocks": self._num_blocks,
            "shuffle": self._shuffle, "seed": self._seed, "window": self._window,
            "drop_last": self._drop_last,
        }

    def _view_id(self) -> str | None:
        """Which documents a view holds (their count and the CRC32 of their sorted indices),
        so that a state of another view is refused; None for the whole dataset."""
        if self._indices is None:
            return None
        return f"{len(self._indices)}:{zlib.crc32(np.sort(self._indices).tobytes()):08x}"

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continues from `state` (any world size); ValueError if it belongs to another order."""
        mine = self.state_dict()
        for key in _ORDER_KEYS:
            if state.get(key) != mine[key]:
                raise ValueError(f"the state was saved with {key}={state.get(key)!r}, this "
                                 f"loader has {key}={mine[key]!r}: the epoch's order would "
                                 "differ")
        self._cursor.load(int(state["epoch"]), int(state["position"]),
                          int(state["planned_world_size"]))

    def __repr__(self) -> str:
        return (f"stoker.TokenLoader('{self._uri}', column='{self._column}', "
                f"block_size={self._block}, batch_size={self._batch_size}, "
                f"shuffle='{self._shuffle}', rank={self._rank}, world_size={self._world_size}, "
                f"epoch={self.epoch})")


class MixTokenLoader(MixReading, TokenLoader):
    """TokenLoader over a stoker.Mix: blocks of each source's tokens column (the same column
    name and element type in every source), mixed by the Mix's weights counted in blocks;
    yields (batch, sources) — (block, source) with batch_size=None."""

    def __init__(self, mix: Mix, column: str = "tokens", block_size: int = 2048,
                 batch_size: int | None = 8, *, shuffle: str = "chunk", seed: int = 0,
                 window: int = 16, drop_last: bool = False, rank: int | None = None,
                 world_size: int | None = None, dtype: str | None = None,
                 prefetch: int = 2) -> None:
        _check_options(block_size, batch_size, shuffle, prefetch)
        self._rank, self._world_size = env_world(rank, world_size)
        self._column, self._block = column, int(block_size)
        self._batch_size = None if batch_size is None else int(batch_size)
        self._shuffle, self._seed, self._window = shuffle, int(seed), int(window)
        self._drop_last = bool(drop_last)
        self._dtype = None if dtype is None else np.dtype(dtype)
        self._prefetch = int(prefetch)
        self._pid = os.getpid()
        self._sources: list[_Blocks] | None = None
        self._mix = mix
        sources = self._handles_mix()
        types = {b.stream.dtype for b in sources}
        if len(types) > 1:
            raise ValueError(f"the sources' {column!r} columns hold different types "
                             f"({', '.join(sorted(types))}): write them with one")
        self._element = np.dtype(types.pop())
        self._init_mix(mix, [b.sampler.num_samples for b in sources], "token blocks")
        self._num_blocks = self._epoch_size
        self._stats: dict[str, Any] = {}

    def _handles_mix(self) -> list[_Blocks]:
        if self._pid != os.getpid():
            self._mix = self._mix.reopened()
            self._sources = None
            self._pid = os.getpid()
        if self._sources is None:
            # Each source's own order over all its blocks; the mix's drop_last acts on it.
            self._sources = [_Blocks(ds, self._column, self._block, self._shuffle, self._seed,
                                     self._window, False, indices)
                             for ds, indices in map(dataset_and_indices, self._mix.sources)]
        return self._sources

    def _source_order(self, source: int, k: int) -> np.ndarray:
        return np.asarray(self._handles_mix()[source].sampler.global_order(k, 1))

    def __getstate__(self) -> dict[str, Any]:
        state = MixReading.__getstate__(self)
        state["_sources"] = None
        return state

    @property
    def num_tokens(self) -> int:
        """Tokens in the sources' streams together."""
        return sum(b.num_tokens for b in self._handles_mix())

    def __iter__(self) -> Iterator[Any]:
        token = self._cursor.begin_pass()
        return self._generate_mix(token)

    def _generate_mix(self, token: int) -> Iterator[Any]:
        sources = self._handles_mix()
        source, block = self._rank_order()
        size = self._batch_size
        if size is not None and self._drop_last:
            source, block = source[:len(source) - len(source) % size], block[:len(block) - len(
                block) % size]
        batches = [TokenBatches(b.stream, np.ascontiguousarray(block[source == i],
                                                               dtype=np.uint32),
                                self._block, size or 1, self._ahead())
                   if np.any(source == i) else None for i, b in enumerate(sources)]
        step = size or 1
        stats = {"blocks": 0, "tokens": 0, "chunks_read": 0}
        live = [b for b in batches if b is not None]
        meter = self._meter = StallMeter(dataset_and_indices(self._mix.sources[0])[0],
                                         "TokenLoader", mix_label(self._mix))
        try:
            asked = now()
            for begin in range(0, len(source), step):
                part = source[begin:begin + step]
                waited = sum(b.wait_seconds for b in live)
                out = np.empty((len(part), self._block + 1), dtype=self._element)
                for i in np.unique(part).tolist():
                    batches[i].fill(out, np.flatnonzero(part == i).astype(np.uint32))
                if self._dtype is not None:
                    out = out.astype(self._dtype)
                stats["blocks"] += len(part)
                stats["tokens"] += len(part) * self._block
                self._cursor.add_yielded(token, len(part))
                meter.step(asked, now(), read=sum(b.wait_seconds for b in live) - waited)
                if size is None:
                    yield out[0], int(part[0])
                else:
                    yield out, part.astype(np.int64)
                asked = now()
        finally:
            stats["chunks_read"] = sum(b.chunks_read for b in batches if b is not None)
            self._stats = stats
        self._cursor.end_pass(token)

    def _order_state(self) -> dict[str, Any]:
        return {"column": self._column, "block_size": self._block,
                "num_blocks": self._epoch_size, "shuffle": self._shuffle, "seed": self._seed,
                "window": self._window}

    def __repr__(self) -> str:
        return (f"stoker.TokenLoader({self._mix!r}, column='{self._column}', "
                f"block_size={self._block}, batch_size={self._batch_size}, "
                f"shuffle='{self._shuffle}', rank={self._rank}, world_size={self._world_size}, "
                f"epoch={self.epoch})")
