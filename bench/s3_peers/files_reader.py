#!/usr/bin/env python3
"""One epoch of per-file GETs: one object per image, a shuffled order, a boto3 thread pool
(what a torch Dataset doing a GET in __getitem__ under DataLoader workers amounts to).

    files_reader.py BUCKET PREFIX EXPECTED_JSON [--threads 32] [--seed N]
"""
from __future__ import annotations

import json
import random
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Checker, bucket_reader_args, s3_client  # noqa: E402

ap = bucket_reader_args()
ap.add_argument("--threads", type=int, default=32)
args = ap.parse_args()

chk = Checker(args.expected)
keys = sorted(chk.expected)            # the index a Dataset would hold (no LIST in the epoch)
random.Random(args.seed).shuffle(keys)
client = s3_client(args.threads)


def get(rel: str) -> bytes:
    return client.get_object(Bucket=args.bucket, Key=f"{args.prefix}/{rel}")["Body"].read()


chk.t0 = __import__("time").perf_counter()
with ThreadPoolExecutor(args.threads) as pool:
    for rel, data in zip(keys, pool.map(get, keys)):
        chk.check(rel, data)
chk.report(reader="files", threads=args.threads)
