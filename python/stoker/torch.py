"""PyTorch adapters: stoker datasets for torch.utils.data.DataLoader.

    import stoker.torch
    ds = stoker.torch.StokerIterableDataset("/data/train.stoker", transform=decode)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=8)
    for epoch in range(epochs):
        ds.set_epoch(epoch)
        for sample in loader: ...

    # or map-style, with torch's own samplers:
    ds = stoker.torch.StokerMapDataset("/data/train.stoker", transform=decode)
    sampler = torch.utils.data.DistributedSampler(ds)
    loader = torch.utils.data.DataLoader(ds, batch_size=256, sampler=sampler, num_workers=8)

Both pickle as (URI, dataset version, options) and reopen the dataset lazily in each worker
process, after fork or spawn, pinned to the version the main process opened. Importing this
module imports torch; `import stoker` alone does not.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch.utils.data

from ._core import ReadPipeline, parse_loader_options
from ._reading import SampleReading, renamed_arguments, run_pass, sample_order
from .loader import _identity
from .mix import Mix
from .views import Dataset, DatasetView, reopen_dataset

# A DataLoader worker's read pipeline holds at most this by default (each worker has its own).
_WORKER_MEMORY_BUDGET = 256 << 20


def _worker() -> tuple[int, int]:
    """(worker id, number of workers) of this DataLoader worker process; (0, 1) outside one."""
    info = torch.utils.data.get_worker_info()
    return (0, 1) if info is None else (info.id, info.num_workers)


class StokerIterableDataset(SampleReading, torch.utils.data.IterableDataset):
    """This rank's share of a packed dataset (or view, or stoker.Mix), in stoker's order
    (docs/sampler.md), as a torch IterableDataset. Yields transform((bytes, label, path)) — over
    a Mix, (transform(sample), source).

    Args:
      source: a path / URI, a stoker.Dataset, a view of one, or a stoker.Mix.
      transform: applied to each sample in the worker.
      loader_batch_size: see Workers.
      memory_budget: the most bytes each worker's read pipeline holds (bytes or text like
        256MiB; default 256 MiB per worker).

    As for stoker.Loader (these lines and the signature are generated from
    src/loader/loader_option_table.cc):
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
      io_depth: concurrent reads of the read pipeline.
      block_size: the shuffle unit of chunk mode, in bytes. None: chosen from the labels in the
        metadata (whole chunks when they mix classes, as `stoker pack` stores them by default, else
        the largest block of a chunk, 1/4 ... 1/256 of one, whose windows mix classes within 5 % of
        a full shuffle, with a warning that names the cost and the fix). 0: whole chunks always; an
        int: blocks of that many bytes. See docs/sampler.md.

    Workers: with K DataLoader workers, worker k takes the rank's samples i with
    (i // loader_batch_size) % K == k. With loader_batch_size=1 (default) that is i % K == k, so
    DataLoader's round-robin over workers delivers exactly the rank's order when it fetches
    single samples (batch_size=None or 1). When the DataLoader batches (batch_size=B), each batch
    is made of one worker's samples, so with the default the batches hold the rank's samples
    interleaved (batch j: samples of worker j mod K); pass loader_batch_size=B to have worker k
    take whole batches k, k+K, ... instead, so batch j is exactly samples [jB, (j+1)B) of the
    rank's order. Either way every sample of the rank's share arrives exactly once.

    Epochs: call set_epoch(epoch) at the start of every epoch, as with DistributedSampler.
    Worker processes read a copy of this object, so the main process learns of the epoch only
    through set_epoch; with num_workers=0 (or persistent workers) a copy that finishes a pass
    moves on to the next epoch by itself. set_epoch for the current epoch keeps a loaded
    position. Do not combine persistent_workers=True with set_epoch: persistent workers keep
    their own copies and never see it.

    State: state_dict(samples_consumed) in the main process returns the rank-level state of
    stoker.Loader (epoch, position, planned_world_size, ...): samples_consumed is how many
    samples this rank has taken from the DataLoader in the current pass (e.g. steps x batch
    size); it may be left out with num_workers=0, where this object counts them itself. It is
    exact when those samples are a prefix of the rank's order (single-sample fetching, or
    loader_batch_size equal to the DataLoader's batch_size) and all ranks save at the same step;
    load_state_dict() then continues with any number of ranks and workers. Called inside a
    worker (as torchdata's StatefulDataLoader does), state_dict() returns that worker's own
    state, which load_state_dict() restores in the worker of the same id, number of workers,
    rank and world size.
    """

    @renamed_arguments(uri="source")
    def __init__(self, source: str | os.PathLike | Dataset | DatasetView | Mix, *,
                 transform: Callable | None = None, loader_batch_size: int = 1,
                 memory_budget: int | str = _WORKER_MEMORY_BUDGET,
                 # BEGIN GENERATED shared-signature
                 shuffle: str = "chunk", seed: int = 0, window: int = 16, drop_last: bool = False,
                 rank: int | None = None, world_size: int | None = None, io_depth: int = 8,
                 block_size: int | None = None,
                 # END GENERATED shared-signature
                 ) -> None:
        if loader_batch_size < 1:
            raise ValueError("loader_batch_size must be at least 1")
        # Per DataLoader worker: each worker runs its own read pipeline over its share, hence a
        # smaller default memory_budget than stoker.Loader's.
        options = parse_loader_options({
            "memory_budget": memory_budget,
            # BEGIN GENERATED shared-dict
            'shuffle': shuffle,
            'seed': seed,
            'window': window,
            'drop_last': drop_last,
            'rank': rank,
            'world_size': world_size,
            'io_depth': io_depth,
            'block_size': block_size,
            # END GENERATED shared-dict
        })
        self._start_reading(sample_order(source, options), options["rank"],
                            options["world_size"], options["drop_last"])
        self._transform = transform
        self._block = int(loader_batch_size)
        self._io_depth: int = options["io_depth"]
        # None keeps this class's default, as for every other option.
        self._memory_budget: int = (options["memory_budget"] if options["memory_budget"] is not None
                                    else _WORKER_MEMORY_BUDGET)
        self._worker_skip = 0  # samples of its own share a worker skips (per-worker resume)

    def __len__(self) -> int:
        """Samples this rank yields in the current pass (all workers together)."""
        return self._units_in_pass(None)

    def __iter__(self) -> Iterator[Any]:
        worker, workers = _worker()
        skip, self._worker_skip = self._worker_skip, 0
        if torch.utils.data.get_worker_info() is not None:
            # A (persistent) worker's count is not a rank position, and the main process may
            # not have taken all it produced: a pass abandoned there restarts, as DataLoader's
            # passes do, instead of continuing like the single-process case.
            self._cursor.set_yielded(0)
        token, sources, samples = self._begin()
        if token == self._cursor.pass_token:
            self._cursor.set_yielded(skip)  # a resumed worker's count includes what it read before
        # This worker's share of the rank's plan (positions in it), read ahead by the C++ read
        # pipeline: one per source.
        block = self._block
        mine = np.concatenate([np.arange(b, min(b + block, len(samples)), dtype=np.int64)
                               for b in range(worker * block, len(samples), workers * block)]
                              or [np.zeros(0, dtype=np.int64)])[skip:]
        orders = self._order.sources if sources is not None else [self._order]
        which = (np.zeros(len(mine), dtype=np.int64) if sources is None
                 else sources[mine].astype(np.int64))
        pipes = [ReadPipeline(o.dataset(), np.ascontiguousarray(samples[mine][which == i]),
                              memory_budget=self._memory_budget, io_depth=self._io_depth)
                 for i, o in enumerate(orders)]

        def finish() -> None:
            for p in pipes:
                p.close()

        return run_pass(self._cursor, token, None, self._steps(pipes, which, sources is not None),
                        finish)

    def _steps(self, pipes: list, which: np.ndarray, mixed: bool) -> Iterator[Any]:
        transform = self._transform or _identity
        for s in which.tolist():
            item = transform(next(pipes[s]))
            yield ((item, s) if mixed else item), 1, 0.0, 0.0, 0.0

    def state_dict(self, samples_consumed: int | None = None) -> dict[str, Any]:
        """See the class docstring: rank-level in the main process, per-worker in a worker."""
        worker, workers = _worker()
        if workers > 1:
            state = self._state(0)
            state["samples_yielded"] = self._cursor.yielded
            state["worker"] = {"id": worker, "num_workers": workers,
                               "yielded": self._cursor.yielded, "loader_batch_size": self._block}
            return state
        consumed = self._cursor.yielded if samples_consumed is None else int(samples_consumed)
        if consumed < 0:
            raise ValueError("samples_consumed must be >= 0")
        return self._state(consumed)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continues from `state`: a rank-level state with any number of ranks and workers, a
        per-worker one in the matching worker (see the class docstring)."""
        saved = state.get("worker")
        self._load(state)
        if saved is None:
            return
        worker, workers = _worker()
        same = (saved["id"] == worker and saved["num_workers"] == workers and
                saved["loader_batch_size"] == self._block and
                state.get("rank") == self._rank and state.get("world_size") == self._world_size)
        if not same:
            raise ValueError(
                f"this state is worker {saved['id']} of {saved['num_workers']}'s (rank "
                f"{state.get('rank')} of {state.get('world_size')}); it can only be restored in "
                "that same worker. For a different number of workers or ranks, save a "
                "rank-level state in the main process: state_dict(samples_consumed=...)")
        self._worker_skip = int(saved["yielded"])


class StokerMapDataset(torch.utils.data.Dataset):
    """A packed dataset as a map-style torch Dataset: len(ds) samples, ds[i] ->
    transform((bytes, label, path)). For DataLoader with torch's samplers (DistributedSampler,
    RandomSampler, ...). Opens the dataset now (pinning its version); workers reopen it lazily,
    after fork or spawn."""

    def __init__(self, uri: str | os.PathLike | Dataset,
                 transform: Callable | None = None) -> None:
        ds = uri if isinstance(uri, Dataset) else Dataset(os.fspath(uri))
        self._uri: str = ds.uri
        self._version: int = ds.version
        self._len: int = len(ds)
        self._transform = transform
        self._ds: Dataset | None = ds
        self._pid = os.getpid()

    def _dataset(self) -> Dataset:
        if self._ds is None or self._pid != os.getpid():
            self._ds = reopen_dataset(self._uri, self._version)
            self._pid = os.getpid()
        return self._ds

    @property
    def dataset_version(self) -> int:
        return self._version

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, index: int) -> Any:
        return (self._transform or _identity)(self._dataset()[int(index)])

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_ds"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
