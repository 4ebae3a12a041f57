#!/usr/bin/env python3
"""One epoch of WebDataset-style tar shards from S3.

    wds_reader.py BUCKET PREFIX EXPECTED_JSON --impl webdataset|tarfile [--workers 4]
                  [--shuffle-buffer 1000] [--seed N]

webdataset: the `webdataset` package, shards opened with `pipe:curl … --aws-sigv4` (curl signs the
  GET itself), wds.WebDataset(urls, shardshuffle=…) + .shuffle(buffer), iterated through a
  torch DataLoader with --workers processes (shards split across workers; batch_size=None).
tarfile: no webdataset: --workers threads each stream one shard at a time (boto3 GET body into
  tarfile 'r|'), shard order shuffled, samples handed to the consumer through a queue.
"""
from __future__ import annotations

import os
import queue
import random
import sys
import tarfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Checker, bucket_reader_args, s3_client  # noqa: E402

ap = bucket_reader_args()
ap.add_argument("--impl", choices=("webdataset", "tarfile"), default="webdataset")
ap.add_argument("--workers", type=int, default=4)
ap.add_argument("--shuffle-buffer", type=int, default=1000)
args = ap.parse_args()

chk = Checker(args.expected)
listing = s3_client().list_objects_v2(Bucket=args.bucket, Prefix=args.prefix + "/")
shards = sorted(o["Key"] for o in listing.get("Contents", []))
endpoint = os.environ["AWS_ENDPOINT_URL"].rstrip("/")
region = os.environ.get("AWS_REGION", "us-east-1")

if args.impl == "webdataset":
    import torch
    import webdataset as wds
    user = f"{os.environ['AWS_ACCESS_KEY_ID']}:{os.environ['AWS_SECRET_ACCESS_KEY']}"
    # curl 7.88 signs x-amz-* headers it is given but does not add x-amz-content-sha256 itself,
    # which RGW requires
    urls = [f"pipe:curl -s -f -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' "
            f"--aws-sigv4 aws:amz:{region}:s3 --user {user} "
            f"{endpoint}/{args.bucket}/{k}" for k in shards]
    random.Random(args.seed).shuffle(urls)
    ds = wds.WebDataset(urls, shardshuffle=len(urls), seed=args.seed,
                        nodesplitter=wds.single_node_only, workersplitter=wds.split_by_worker,
                        empty_check=False)
    if args.shuffle_buffer:
        ds = ds.shuffle(args.shuffle_buffer)
    ds = ds.to_tuple("__key__", "jpg")
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=args.workers,
                                     prefetch_factor=4 if args.workers else None)
    chk.t0 = time.perf_counter()
    for key, data in dl:
        chk.check(key + ".JPEG", data)
    chk.report(reader="wds", impl="webdataset " + wds.__version__ if hasattr(wds, "__version__")
               else "webdataset", workers=args.workers, shuffle_buffer=args.shuffle_buffer,
               shards=len(shards))
else:
    client = s3_client(args.workers)
    order = list(shards)
    random.Random(args.seed).shuffle(order)
    todo: queue.Queue = queue.Queue()
    for k in order:
        todo.put(k)
    out: queue.Queue = queue.Queue(maxsize=4096)
    DONE = object()

    def work():
        try:
            while True:
                try:
                    k = todo.get_nowait()
                except queue.Empty:
                    return
                body = client.get_object(Bucket=args.bucket, Key=k)["Body"]
                with tarfile.open(fileobj=body, mode="r|") as tar:
                    for m in tar:
                        if m.name.endswith(".jpg"):
                            out.put((m.name[:-4] + ".JPEG", tar.extractfile(m).read()))
        finally:
            out.put(DONE)

    chk.t0 = time.perf_counter()
    threads = [threading.Thread(target=work, daemon=True) for _ in range(args.workers)]
    for t in threads:
        t.start()
    live = len(threads)
    while live:
        item = out.get()
        if item is DONE:
            live -= 1
            continue
        chk.check(*item)
    chk.report(reader="wds", impl="tarfile", workers=args.workers, shards=len(shards))
