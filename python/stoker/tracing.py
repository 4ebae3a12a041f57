"""Traces people already open (issue 17): Chrome / Perfetto trace events of what stoker does.

    with stoker.trace("trace.json"):        # or STOKER_TRACE=trace.json python train.py
        for batch in loader:
            ...

The file holds, per thread, the read pipeline's range reads and CRC checks, the image
pipeline's decodes and waits, the token readers' chunk reads, and every loader step (the time
the training loop waited for a batch, with the stage to blame: stoker.stalls). It opens in
https://ui.perfetto.dev and chrome://tracing. Timestamps are relative to the wall-clock time
in its "baseTimeNanoseconds", as torch.profiler writes its traces, so `stoker profile
trace.json --merge torch_trace.json` (or any tool that aligns traces by that base) puts both on
one timeline. `stoker profile trace.json` prints a summary, `--plot out.png` draws step time
against waiting over the run.

Each process writes its own file: in a job of several ranks (WORLD_SIZE > 1) a path without
"{rank}" gets "-rank<R>" before its extension; "{rank}" and "{pid}" in a path are replaced.
A path that cannot be written is an OSError from stoker.trace; from STOKER_TRACE, a warning,
and training goes on without a trace.
"""
from __future__ import annotations

import atexit
import logging
import os
from pathlib import Path

from . import _core

log = logging.getLogger("stoker")


def trace_path(path: str | os.PathLike) -> str:
    """`path` with {rank} and {pid} filled in, and -rank<R> added in a multi-rank job."""
    text = os.fspath(path)
    rank = os.environ.get("RANK", "0")
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and "{rank}" not in text:
        p = Path(text)
        text = str(p.with_name(f"{p.stem}-rank{{rank}}{p.suffix}"))
    return text.replace("{rank}", rank).replace("{pid}", str(os.getpid()))


class Trace:
    """A trace being written: stop() (or leaving the `with` block) finishes the file."""

    def __init__(self, path: str) -> None:
        self.path = path

    def stop(self) -> None:
        _core.trace_stop()

    def __enter__(self) -> Trace:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"stoker.Trace({self.path!r}, running={_core.trace_enabled()})"


def trace(path: str | os.PathLike) -> Trace:
    """Starts writing this process's trace to `path` (see the module docstring); the returned
    Trace stops it, as does the end of the process."""
    resolved = trace_path(path)
    _core.trace_start(resolved, f"stoker rank {os.environ.get('RANK', '0')} (pid {os.getpid()})")
    return Trace(resolved)


def start_from_environment() -> Trace | None:
    """STOKER_TRACE=path: trace this whole process; a path that cannot be written is logged,
    never raised (observability must not stop training)."""
    path = os.environ.get("STOKER_TRACE")
    if not path:
        return None
    try:
        return trace(path)
    except OSError as e:
        log.warning("stoker: not tracing (STOKER_TRACE): %s", e)
        return None


def _stop_at_exit() -> None:
    try:
        _core.trace_stop()
    except OSError as e:
        log.warning("stoker: the trace is incomplete: %s", e)


atexit.register(_stop_at_exit)
