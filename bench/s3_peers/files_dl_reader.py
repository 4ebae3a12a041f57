#!/usr/bin/env python3
"""One epoch of per-file GETs as training code usually does them: a map-style torch Dataset
whose __getitem__ GETs one object with boto3 (a client per worker process), under a shuffling
DataLoader with --workers processes and batches of --batch samples.

    files_dl_reader.py BUCKET PREFIX EXPECTED_JSON [--workers 8] [--batch 64] [--seed N]
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Checker, bucket_reader_args, s3_client  # noqa: E402

ap = bucket_reader_args()
ap.add_argument("--workers", type=int, default=8)
ap.add_argument("--batch", type=int, default=64)
args = ap.parse_args()

import torch  # noqa: E402

chk = Checker(args.expected)


class PerFileGets(torch.utils.data.Dataset):
    def __init__(self, keys):
        self.keys = keys          # the index a Dataset would hold (no LIST in the epoch)
        self.client = None        # made in each worker: boto3 clients do not survive fork

    def __len__(self):
        return len(self.keys)

    def __getitem__(self, i):
        if self.client is None:
            self.client = s3_client()
        rel = self.keys[i]
        obj = self.client.get_object(Bucket=args.bucket, Key=f"{args.prefix}/{rel}")
        return rel, obj["Body"].read()


chk.t0 = __import__("time").perf_counter()
loader = torch.utils.data.DataLoader(
    PerFileGets(sorted(chk.expected)), batch_size=args.batch, shuffle=True,
    generator=torch.Generator().manual_seed(args.seed), num_workers=args.workers,
    collate_fn=list, persistent_workers=False)
for batch in loader:
    for rel, data in batch:
        chk.check(rel, data)
chk.report(reader="files-dl", workers=args.workers, batch=args.batch)
