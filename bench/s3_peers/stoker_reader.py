#!/usr/bin/env python3
"""One epoch of stoker.Loader(s3://…, shuffle="chunk") with the default read settings.

    stoker_reader.py URI EXPECTED_JSON [--seed N] [--io-depth N] [--memory-budget BYTES]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Checker  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("uri")
ap.add_argument("expected")
ap.add_argument("--seed", type=int, default=0)
ap.add_argument("--io-depth", type=int, default=None)
ap.add_argument("--memory-budget", type=int, default=None)
args = ap.parse_args()

import stoker  # noqa: E402

kw = {}
if args.io_depth is not None:
    kw["io_depth"] = args.io_depth
if args.memory_budget is not None:
    kw["memory_budget"] = args.memory_budget
chk = Checker(args.expected)
loader = stoker.Loader(args.uri, shuffle="chunk", seed=args.seed, **kw)
ds = loader.dataset
budget = loader._read_budget(ds, loader._memory_budget)  # what the Loader passes the pipeline
for data, label, path in loader:
    chk.check(path, data)
chk.report(reader="stoker", io_depth=loader._io_depth, window=loader._window,
           memory_budget=budget, largest_chunk_bytes=ds.largest_chunk_bytes,
           stats=loader.stats())
