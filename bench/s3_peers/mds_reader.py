#!/usr/bin/env python3
"""One epoch of MosaicML Streaming (StreamingDataset over MDS shards in S3, S3_ENDPOINT_URL set
to the gateway), shuffled, local cache emptied first.

    mds_reader.py REMOTE EXPECTED_JSON --cache DIR [--workers 0] [--seed N]
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Checker  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("remote")
ap.add_argument("expected")
ap.add_argument("--cache", required=True)
ap.add_argument("--workers", type=int, default=0)
ap.add_argument("--seed", type=int, default=0)
args = ap.parse_args()
os.environ.setdefault("S3_ENDPOINT_URL", os.environ["AWS_ENDPOINT_URL"])
shutil.rmtree(args.cache, ignore_errors=True)

import streaming  # noqa: E402
from streaming import StreamingDataset  # noqa: E402
from streaming.base.util import clean_stale_shared_memory  # noqa: E402

clean_stale_shared_memory()
chk = Checker(args.expected)
ds = StreamingDataset(remote=args.remote, local=args.cache, shuffle=True, shuffle_seed=args.seed,
                      batch_size=1)
if args.workers:
    import torch
    it = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=args.workers)
else:
    it = ds
for s in it:
    chk.check(s["key"], s["image"])
chk.report(reader="mds", impl=f"mosaicml-streaming {streaming.__version__}",
           workers=args.workers, predownload=ds.predownload,
           download_threads=getattr(ds, "_download_threads", None))
shutil.rmtree(args.cache, ignore_errors=True)
