"""Shared by the S3 peer readers of bench/run_s3.py (stdlib + boto3 + crc32c).

Every reader loads the expected-sample table written by prepare.py ({relpath: [size, crc32c]}),
checks each sample it yields against it (length and CRC32C of the bytes, by the sample's key) and
prints one JSON line: samples, bytes, seconds (first request to last sample), bad (samples whose
length or CRC did not match, or that were read twice or never), plus reader settings.
"""
from __future__ import annotations

import json
import os
import sys
import time

try:
    from crc32c import crc32c as _crc
except ImportError:  # pragma: no cover - the venvs both have crc32c
    _crc = None


def crc(data) -> int:
    if _crc is None:
        raise SystemExit("crc32c is not installed in this interpreter")
    return _crc(data)


def bucket_reader_args():
    """The arguments every reader of one object layout takes: BUCKET PREFIX EXPECTED_JSON
    [--seed N]; a reader adds its own options and calls parse_args()."""
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("bucket")
    ap.add_argument("prefix")
    ap.add_argument("expected")
    ap.add_argument("--seed", type=int, default=0)
    return ap


def s3_client(max_pool: int = 10):
    import boto3
    from botocore.config import Config
    return boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"],
                        region_name=os.environ.get("AWS_REGION", "us-east-1"),
                        config=Config(s3={"addressing_style": "path"},
                                      max_pool_connections=max_pool,
                                      retries={"max_attempts": 3}))


class Checker:
    def __init__(self, expected_path: str):
        with open(expected_path) as f:
            self.expected = json.load(f)            # relpath -> [size, crc32c]
        self.seen: set[str] = set()
        self.samples = 0
        self.bytes = 0
        self.bad: list[str] = []
        self.t0 = time.perf_counter()

    def check(self, key: str, data) -> None:
        self.samples += 1
        n = len(data)
        self.bytes += n
        want = self.expected.get(key)
        if want is None or key in self.seen or want[0] != n or want[1] != crc(data):
            if len(self.bad) < 20:
                self.bad.append(key)
            else:
                self.bad.append("...")
        self.seen.add(key)

    def report(self, **extra) -> None:
        seconds = time.perf_counter() - self.t0
        missing = len(self.expected) - len(self.seen & self.expected.keys())
        out = {"samples": self.samples, "bytes": self.bytes, "seconds": seconds,
               "bad": len(self.bad), "bad_keys": self.bad[:20], "missing": missing,
               "ok": not self.bad and missing == 0}
        out.update(extra)
        print(json.dumps(out), flush=True)
        if not out["ok"]:
            print(f"CHECK FAILED: {len(self.bad)} bad, {missing} missing", file=sys.stderr)
