"""Is training waiting for data, and why (issue 17): every loader's stall attribution.

Each loader yields from a generator, so the time between the consumer asking for a batch (the
generator resumes) and the batch being handed over (it yields) is time the training loop spent
waiting for data; the time between a yield and the next request is the consumer's own work
(the training step). Per pass:

    starved_fraction = waiting_seconds / wall_seconds

where wall_seconds runs from the pass's first request to its latest batch. The waiting is split
by the stage that was short, from counters the C++ stages keep while the consumer waits:

    storage  the read pipeline had not read the data yet (from the dataset's store)
    cache    the same, for chunk reads served by the job cache (`stoker node`) and its peers
    decode   decoding / augmenting / transforming had not finished (ImageLoader's C++
             threads; stoker.Loader's transform and collate, which run in the consumer's
             thread)
    queue    the rest: handing the batch over (pinning, copying blocks, Python)
    feeders  slices of the batch that feeders (`stoker feed`, ImageLoader(feeders=...)) were
             making; 0 for every other loader

When a loader has been starved for at least `threshold` of a reporting period (default: 20 % of
5 minutes), it logs one line on the "stoker" logger naming the stage and what to do about it.
stall_report() changes the period and the threshold for every loader of the process.
"""
from __future__ import annotations

import logging
import time
from typing import Any

from . import metrics
from ._core import node_reads, trace_complete, trace_enabled, trace_name_thread
from .metrics import STAGES

_HINTS = {
    "storage": ("storage reads", "raise io_depth or memory_budget, pack larger chunks, or cache "
                "the job's chunks in memory with `stoker node`"),
    "cache": ("job-cache reads (`stoker node` and its peers)",
              "check the node daemons' network and memory (`stoker node --memory-limit`)"),
    "decode": ("decoding and augmentation", "raise threads, lower the resolution, or decode on "
               "the GPU (ImageLoader(device='cuda'))"),
    "queue": ("handing batches over", "raise prefetch_batches; keep batch_transform light"),
    "feeders": ("feeders (`stoker feed`) making slices of the batches",
                "add feeders or CPUs to them, check their network and loader.stats()['feeders'] "
                "(slow or failing ones), or raise threads here"),
}

_REPORT = {"every": 300.0, "threshold": 0.2}

log = logging.getLogger("stoker")


def stall_report(every: float | None = 300.0, threshold: float = 0.2) -> None:
    """Every loader of this process logs a line (logger "stoker", WARNING) when it was starved
    for at least `threshold` (0..1) of the last `every` seconds; every=None turns it off."""
    if every is not None and every <= 0:
        raise ValueError("every must be positive (or None to turn reports off)")
    if not 0 <= threshold <= 1:
        raise ValueError("threshold is a fraction of the time, 0 to 1")
    _REPORT["every"] = float("inf") if every is None else float(every)
    _REPORT["threshold"] = float(threshold)


class StallMeter:
    """One pass's waiting, split by stage (see the module docstring). A loader makes one per
    pass and calls step() for each batch: the interval [asked, ready] in now()'s seconds, and
    how much of it each stage explains. With a trace running (stoker.trace),
    each step is a "next batch" event whose args are the stages' milliseconds."""

    def __init__(self, dataset: Any = None, loader: str = "", label: str | None = None) -> None:
        self._dataset = dataset  # for the node daemon's counters (cache vs storage)
        # What the Prometheus metrics (stoker.metrics) call this loader and its data.
        self._loader = loader
        self._label = label if label is not None else getattr(dataset, "uri", "")
        self._first: float | None = None
        self._last = 0.0
        self._waiting = 0.0
        self._stages = dict.fromkeys(STAGES, 0.0)
        self._period_start: float | None = None
        self._period_waiting = 0.0
        self._period_stages = dict.fromkeys(STAGES, 0.0)
        self._reads = self._node_reads()

    def _node_reads(self) -> tuple[int, int] | None:
        return node_reads(self._dataset) if self._dataset is not None else None

    def step(self, asked: float, ready: float, read: float = 0.0, decode: float = 0.0,
             feeders: float = 0.0) -> None:
        """A batch asked for at `asked` and ready at `ready`: `read` of those seconds waited
        for reads (storage or the job cache), `decode` for decoding, `feeders` for slices
        feeders were making; the rest is queue."""
        waited = max(0.0, ready - asked)
        read = min(max(0.0, read), waited)
        decode = min(max(0.0, decode), waited - read)
        feeders = min(max(0.0, feeders), waited - read - decode)
        cache = 0.0
        if read > 0 and self._reads is not None:
            reads = self._node_reads()
            if reads is not None:
                node = reads[0] - self._reads[0]
                store = reads[1] - self._reads[1]
                if node + store > 0:
                    cache = read * node / (node + store)
                self._reads = reads
        split = {"storage": read - cache, "cache": cache, "decode": decode, "feeders": feeders,
                 "queue": waited - read - decode - feeders}
        if trace_enabled():
            if self._first is None:
                trace_name_thread("training loop (waiting for batches)")
            trace_complete("next batch", "loader", int(asked * 1e9), int(ready * 1e9),
                           ", ".join(f'"{k}": {v * 1e3:.3f}' for k, v in split.items()))
        step = ready - (asked if self._first is None else self._last)
        if self._first is None:
            self._first = asked
            self._period_start = asked
        self._last = ready
        self._waiting += waited
        self._period_waiting += waited
        for stage, seconds in split.items():
            self._stages[stage] += seconds
            self._period_stages[stage] += seconds
        wall = ready - self._first
        metrics.record(self._loader, self._label, step, split,
                       self._waiting / wall if wall > 0 else 0.0)
        assert self._period_start is not None
        if ready - self._period_start >= _REPORT["every"]:
            self._report(ready - self._period_start)
            self._period_start = ready
            self._period_waiting = 0.0
            self._period_stages = dict.fromkeys(STAGES, 0.0)

    def _report(self, period: float) -> None:
        fraction = self._period_waiting / period if period > 0 else 0.0
        if fraction < _REPORT["threshold"] or self._period_waiting <= 0:
            return
        stage = max(STAGES, key=lambda s: self._period_stages[s])
        what, hint = _HINTS[stage]
        share = self._period_stages[stage] / self._period_waiting
        log.warning("stoker: %.0f %% of step time waiting on %s (%.0f %% of the waiting, over "
                    "the last %.0f s): %s", 100 * fraction, what, 100 * share, period, hint)

    def stats(self) -> dict[str, Any]:
        """starved_fraction, wall_seconds, waiting_seconds and stall_seconds ({stage: s})."""
        wall = self._last - self._first if self._first is not None else 0.0
        return {"starved_fraction": self._waiting / wall if wall > 0 else 0.0,
                "wall_seconds": wall, "waiting_seconds": self._waiting,
                "stall_seconds": dict(self._stages)}


def now() -> float:
    """Seconds of the monotonic clock: C++'s trace clock too (CLOCK_MONOTONIC)."""
    return time.monotonic()
