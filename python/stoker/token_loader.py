"""stoker.TokenLoader: blocks of consecutive tokens for LLM training.

    with stoker.Writer("corpus.stoker", columns={"tokens": "tokens:uint16"}) as w:
        for doc in docs:
            w.write({"tokens": tokenizer.encode(doc)})
    loader = stoker.TokenLoader("corpus.stoker", 8, seq_len=2048)   # batch_size=8
    for batch in loader:                  # (8, 2049) uint16 NumPy array
        x, y = batch[:, :-1], batch[:, 1:]

The tokens column is one stream (docs/format.md §9; loader/token_stream.h): chunk after chunk,
and in a chunk the documents that start in it, in order. Block k is tokens [k*B, k*B + B + 1)
of the stream (B = seq_len): documents cross block edges, as in Megatron and LitData's
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

import functools
import os
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, cast

import numpy as np

from ._core import Dataset, EpochCursor, Sampler, TokenBatches, TokenStream, parse_loader_options
from ._reading import (
    Reading,
    Step,
    StokerDeprecationWarning,
    renamed_arguments,
    run_pass,
    warn_user,
)
from .mix import Mix, MixOrder, mix_label
from .stalls import StallMeter
from .views import DatasetView, dataset_and_indices, reopen_dataset, view_id

_ORDER_KEYS = ("dataset_version", "view", "column", "seq_len", "num_blocks", "shuffle",
               "seed", "window")

F = TypeVar("F", bound=Callable[..., Any])


def _check_options(seq_len: int, shuffle: str, prefetch: int) -> None:
    if int(seq_len) < 1:
        raise ValueError("seq_len (the tokens per block; formerly block_size) must be at least 1")
    if int(prefetch) < 0:
        raise ValueError("prefetch must be at least 0")
    if shuffle not in ("chunk", "sequential"):
        # A uniform permutation of blocks would keep nearly every chunk in memory until its
        # last block: chunk mode mixes within windows at whole-chunk reads instead.
        raise ValueError(f"shuffle must be 'chunk' or 'sequential', not {shuffle!r}")


def _old_positional(init: F) -> F:
    """TokenLoader(source, column, block_size, batch_size), its positional form before it
    agreed with the other loaders' (source, batch_size): still read, with a warning."""
    @functools.wraps(init)
    def call(self: Any, source: Any, *args: Any, **kwargs: Any) -> None:
        if args and isinstance(args[0], str):
            names = ("column", "seq_len", "batch_size")[:len(args)]
            warn_user("TokenLoader(source, column, block_size, batch_size) is deprecated: "
                      "pass TokenLoader(source, batch_size, column=..., seq_len=...) (every "
                      "loader takes its source, then batch_size)", StokerDeprecationWarning)
            kwargs.update(zip(names, args, strict=False))
            args = ()
        init(self, source, *args, **kwargs)
    return call  # type: ignore[return-value]


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


class BlockOrder:
    """A tokens column (of a dataset, or of a view's documents) cut into blocks of `seq_len`
    (+ 1) tokens, each block in the chunk its first token lies in: its TokenStream and the
    Sampler over the blocks, opened again in each process. Units are blocks."""

    def __init__(self, source: Any, column: str, seq_len: int, shuffle: str, seed: int,
                 window: int, drop_last: bool) -> None:
        ds, self.indices = dataset_and_indices(source)
        _check_not_ndarray(ds, column)
        self.uri: str = ds.uri
        self.version: int = ds.version
        self.column, self.seq_len = column, seq_len
        self.shuffle, self.seed, self.window, self.drop_last = shuffle, seed, window, drop_last
        self._ds: Dataset | None = ds
        self._pid = os.getpid()
        self._handles: tuple[TokenStream, Sampler, int] | None = None
        stream, sampler, self.num_tokens = self.handles()  # a bad column fails here
        self.num_units: int = sampler.num_samples
        self.dtype: str = stream.dtype

    def handles(self) -> tuple[TokenStream, Sampler, int]:
        """(stream, sampler over the blocks, tokens in the stream) in this process."""
        if self._pid != os.getpid() or self._ds is None:
            self._ds = reopen_dataset(self.uri, self.version)
            self._handles = None
            self._pid = os.getpid()
        if self._handles is None:
            stream = TokenStream(self._ds, self.column, self.indices)
            ends = np.cumsum(np.asarray(stream.chunk_tokens, dtype=np.int64), dtype=np.int64)
            tokens = int(ends[-1]) if len(ends) else 0
            blocks = (tokens - 1) // self.seq_len if tokens > 1 else 0
            starts = np.arange(blocks, dtype=np.int64) * self.seq_len
            chunks = np.searchsorted(ends, starts, side="right").astype(np.uint32)
            # from_chunks takes any sequence of ints; its stub says Sequence, not ndarray.
            sampler = Sampler.from_chunks(cast(Any, chunks), self.version, mode=self.shuffle,
                                          seed=self.seed, window=self.window,
                                          drop_last=self.drop_last)
            self._handles = (stream, sampler, tokens)
        return self._handles

    def dataset(self) -> Dataset:
        self.handles()
        assert self._ds is not None
        return self._ds

    def epoch(self, k: int) -> np.ndarray:
        return np.asarray(self.handles()[1].global_order(k, 1))

    def to_base(self, units: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(units, dtype=np.uint32)

    def rank_plan(self, cursor: EpochCursor, rank: int,
                  world_size: int) -> tuple[None, np.ndarray]:
        plan, _, _ = self.handles()[1].plan_rank(cursor.epoch, cursor.position,
                                                 cursor.planned_world_size, world_size, rank)
        return None, self.to_base(np.asarray(plan))

    def state(self) -> dict[str, Any]:
        return {"dataset_version": self.version, "view": view_id(self.indices),
                "column": self.column, "seq_len": self.seq_len, "num_blocks": self.num_units,
                "shuffle": self.shuffle, "seed": self.seed, "window": self.window}

    def check(self, state: dict[str, Any]) -> None:
        mine = self.state()
        for key in _ORDER_KEYS:
            if state.get(key) != mine[key]:
                raise ValueError(f"the state was saved with {key}={state.get(key)!r}, this "
                                 f"loader has {key}={mine[key]!r}: the epoch's order would "
                                 "differ")

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_ds": None, "_handles": None}


def _narrowed(batch: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """`batch` in `dtype`; OverflowError for a token it cannot hold (a wrapped token id would be
    another token: training on it is silently wrong)."""
    if batch.size and not np.can_cast(batch.dtype, dtype, casting="safe"):
        low, high = int(batch.min()), int(batch.max())
        if dtype.kind in "iu":
            info = np.iinfo(dtype)
            if low < info.min or high > info.max:
                raise OverflowError(
                    f"token {low if low < info.min else high} does not fit dtype={dtype.name} "
                    f"(the column holds {batch.dtype.name}): choose a wider dtype")
        elif dtype.kind == "f" and max(abs(low), abs(high)) > 2 ** (np.finfo(dtype).nmant + 1):
            raise OverflowError(
                f"token {high if abs(high) >= abs(low) else low} is not exact in "
                f"dtype={dtype.name}: choose a wider dtype")
    return batch.astype(dtype)


class TokenLoader(Reading):
    """Yields batches of token blocks: NumPy arrays of shape (batch_size, seq_len + 1), in
    the column's dtype (or `dtype`); with batch_size=None, single blocks.

    Args:
      source: a path / URI of a column dataset (stoker.Writer), an open stoker.Dataset, a
        view of one (ds.subset / ds.filter: the stream holds its documents, in storage order),
        or a stoker.Mix of them (then each batch comes with the source of every row:
        (batch, sources); stoker.mix).
      batch_size: blocks per batch; None yields blocks one by one.
      column: its tokens column.
      seq_len: tokens per block, plus the one that follows (the last target). (It was called
        block_size, which stoker.Loader uses for its shuffle unit in bytes: block_size= still
        works, with a deprecation warning.)
      shuffle: "chunk" (default) or "sequential" (the stream's order), as stoker.Loader.
      dtype: convert blocks to this NumPy dtype (e.g. "int64" for torch embeddings).
      prefetch: chunks read ahead beyond those in use.

    As for stoker.Loader (these lines and the signature are generated from
    src/loader/loader_option_table.cc):
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

    Every loader takes its source, then batch_size, then keyword arguments; the options the
    loaders share have one description and one default (the table's). state_dict() is a
    position in the epoch's order, as stoker.Loader's: load_state_dict() resumes exactly with
    any world size.
    """

    @renamed_arguments(dataset="source", block_size=(
        "seq_len", "block_size is stoker.Loader's shuffle unit in bytes"))
    @_old_positional
    def __init__(self, source: str | os.PathLike | Dataset | DatasetView | Mix,
                 batch_size: int | None = 8, *, column: str = "tokens", seq_len: int = 2048,
                 shuffle: str = "chunk",
                 # BEGIN GENERATED shared-signature
                 seed: int = 0, window: int = 16, drop_last: bool = False, rank: int | None = None,
                 world_size: int | None = None,
                 # END GENERATED shared-signature
                 dtype: str | None = None, prefetch: int = 2) -> None:
        _check_options(seq_len, shuffle, prefetch)
        options = parse_loader_options({
            "batch_size": batch_size, "shuffle": shuffle,
            # BEGIN GENERATED shared-dict
            'seed': seed,
            'window': window,
            'drop_last': drop_last,
            'rank': rank,
            'world_size': world_size,
            # END GENERATED shared-dict
        })
        self._seq_len = int(seq_len)
        self._batch_size: int | None = options["batch_size"]
        self._dtype = None if dtype is None else np.dtype(dtype)
        self._prefetch = int(prefetch)
        self._column = column

        def blocks(s: Any, drop_last: bool) -> BlockOrder:
            return BlockOrder(s, column, self._seq_len, options["shuffle"], options["seed"],
                              options["window"], drop_last)
        if isinstance(source, Mix):
            # Each source's own order over all its blocks; the mix's drop_last acts on it.
            sources = [blocks(s, False) for s in source.sources]
            types = {b.dtype for b in sources}
            if len(types) > 1:
                raise ValueError(f"the sources' {column!r} columns hold different types "
                                 f"({', '.join(sorted(types))}): write them with one")
            order: Any = MixOrder(source, sources, "token blocks", options["seed"],
                                  "num_blocks", {"column": column, "seq_len": self._seq_len,
                                                 "shuffle": options["shuffle"],
                                                 "seed": options["seed"],
                                                 "window": options["window"]})
        else:
            order = blocks(source, options["drop_last"])
        self._start_reading(order, options["rank"], options["world_size"],
                            options["drop_last"])
        self._stats: dict[str, Any] = {}
        for s in self._sources:
            if s.num_units == 0:  # else a training loop would run no step, silently
                warn_user(f"TokenLoader: '{s.uri}' has no block of seq_len={self._seq_len} "
                          f"(a block takes seq_len + 1 tokens; the stream holds "
                          f"{s.handles()[2]}): an epoch yields nothing")

    # -- properties ----------------------------------------------------------------------------

    @property
    def _sources(self) -> list[BlockOrder]:
        return self._order.sources if self.mixed else [self._order]

    @property
    def num_blocks(self) -> int:
        """Blocks in an epoch (all ranks)."""
        return self._order.num_units

    @property
    def num_tokens(self) -> int:
        """Tokens in the stream (over a Mix, in the sources' streams together)."""
        return sum(b.handles()[2] for b in self._sources)

    @property
    def seq_len(self) -> int:
        return self._seq_len

    @property
    def batch_size(self) -> int | None:
        return self._batch_size

    @property
    def mix(self) -> Mix | None:
        return self._order.mix if self.mixed else None

    def __len__(self) -> int:
        return self._units_in_pass(self._batch_size)

    def _ahead(self) -> int:
        """Chunks held beyond those released: in chunk mode two windows, so the next window
        is read while this one's blocks are handed out (with one, the readers would wait for
        the window to end and the consumer for the next window's reads: 1.5x slower)."""
        first = self._sources[0]
        return (2 * first.window if first.shuffle == "chunk" else 2) + self._prefetch

    # -- iteration -------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        token, sources, blocks = self._begin()
        size = self._batch_size
        if size is not None and self._drop_last:
            keep = len(blocks) - len(blocks) % size
            blocks = blocks[:keep]
            sources = None if sources is None else sources[:keep]
        parts = ([blocks] if sources is None else
                 [blocks[sources == i] for i in range(len(self._sources))])
        readers = [TokenBatches(b.handles()[0], np.ascontiguousarray(part, dtype=np.uint32),
                                self._seq_len, size or 1, self._ahead())
                   if sources is None or len(part) else None
                   for b, part in zip(self._sources, parts, strict=True)]
        first = self._sources[0].dataset()
        meter = self._meter = StallMeter(first, "TokenLoader",
                                         mix_label(self._order.mix) if self.mixed else None)
        stats = {"blocks": 0, "tokens": 0, "chunks_read": 0}

        def finish() -> None:
            stats["chunks_read"] = sum(r.chunks_read for r in readers if r is not None)
            self._stats = stats

        return run_pass(self._cursor, token, meter,
                        self._steps(readers, sources, len(blocks), stats), finish)

    def _steps(self, readers: list, sources: np.ndarray | None, n: int,
               stats: dict[str, int]) -> Iterator[Step]:
        size = self._batch_size
        live = [r for r in readers if r is not None]
        element = np.dtype(self._sources[0].dtype)
        for begin in range(0, n, size or 1):
            waited = sum(r.wait_seconds for r in live)
            if sources is None:
                batch = readers[0].next()
                if batch is None:
                    return
            else:
                part = sources[begin:begin + (size or 1)]
                batch = np.empty((len(part), self._seq_len + 1), dtype=element)
                for i in np.unique(part).tolist():
                    readers[i].fill(batch, np.flatnonzero(part == i).astype(np.uint32))
            if self._dtype is not None:
                batch = _narrowed(batch, self._dtype)
            stats["blocks"] += len(batch)
            stats["tokens"] += len(batch) * self._seq_len
            read = sum(r.wait_seconds for r in live) - waited
            if sources is None:
                out = batch[0] if size is None else batch
            else:
                out = (batch[0], int(part[0])) if size is None else (batch, part.astype(np.int64))
            yield out, len(batch), read, 0.0, 0.0

    # -- state -----------------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Counters of the last pass: blocks, tokens (seq_len per block), chunks_read; and
        whether training waited for data: starved_fraction, wall_seconds, waiting_seconds,
        stall_seconds ({"storage", "cache", "decode", "queue", "feeders": seconds}, see
        stoker.stalls)."""
        return self._with_stalls(self._stats)

    def state_dict(self) -> dict[str, Any]:
        """Where this loader is, as stoker.Loader's: plain ints, strs and bools."""
        return self._state(self._cursor.yielded)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continues from `state` (any world size); ValueError if it belongs to another order.
        A state saved before seq_len had its name holds it as block_size."""
        if "seq_len" not in state and "block_size" in state:
            state = {**state, "seq_len": state["block_size"]}
        self._load(state)

    def __repr__(self) -> str:
        first = self._sources[0]
        source = repr(self._order.mix) if self.mixed else f"'{first.uri}'"
        return (f"stoker.TokenLoader({source}, column='{self._column}', "
                f"seq_len={self._seq_len}, batch_size={self._batch_size}, "
                f"shuffle='{first.shuffle}', rank={self._rank}, world_size={self._world_size}, "
                f"epoch={self.epoch})")
