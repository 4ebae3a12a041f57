"""The C++ library's log lines (a node daemon not reachable, a trace that stopped, ...) go to
Python's `logging`, logger "stoker", like the package's own runtime messages: configure that
logger to see, filter or redirect them. (Without any configuration, logging prints warnings and
errors to stderr.)

The library queues its lines (python/bindings/log.cc); a daemon thread here takes them out every
POLL_S and logs them, so the library's threads never need the GIL (and this thread never waits
inside C++, which interpreter exit could not end cleanly). A forked child (a DataLoader worker)
starts its own thread; lines still queued at exit are logged then.
"""
from __future__ import annotations

import atexit
import logging
import os
import threading
import time

from . import _core

log = logging.getLogger("stoker")
POLL_S = 0.2


def _pump() -> None:
    while True:
        _drain()
        time.sleep(POLL_S)


def _start() -> None:
    threading.Thread(target=_pump, name="stoker-log", daemon=True).start()


def _drain() -> None:
    while (item := _core.log_next()) is not None:
        log.log(item[0], "%s", item[1])


_start()
os.register_at_fork(after_in_child=_start)
atexit.register(_drain)
