#!/usr/bin/env python3
"""One trainer reading its rank's samples through a shared Redis cache (cache-aside), the way
users build a global cache in front of a file store. Run by bench/run_cache.py on each node.

    redis_epoch.py stoker://HOST:PORT/NAME --redis HOST:PORT --rank R --world-size W
                   [--epochs 2] [--seed 0] [--limit N] [--batch 32] [--inflight 6] [--io-threads 16]
                   [--barrier none|start|epoch] [--step H:P:G:S] [--train-rate R --compute-every S]

Needs the redis (redis-py, with hiredis) and crc32c packages: bash bench/setup_peers.sh redis.

Order: exactly stoker.Loader's. Each epoch e reads stoker.Sampler(ds, mode="chunk", seed=S,
window=16).plan_rank(e, 0, W, W, R), the plan stoker.Loader(uri, shuffle="chunk", seed=S,
rank=R, world_size=W) iterates after set_epoch(e), so all setups read the same samples in the
same order.

Cache: one key per file (key = the file's path in the dataset, value = its bytes).
Per batch of --batch samples: one MGET; the misses are read from the store (ds.read(file index)
over stoker://, concurrently on a pool of --io-threads threads) and written back with one
pipelined SET per batch (no MULTI). Up to --inflight batches are in flight at once on a pool of
threads (each with its own pooled connection; redis-py with the hiredis parser), consumed in plan
order, so the trainer is fed by a prefetching pipeline rather than one blocking GET at a time.

Verification: every sample's CRC32C (hardware crc32c package) is compared with the CRC the
dataset's metadata records (ds.stat), wherever the bytes came from: a mismatch is counted as a
bad sample (crc_errors), and bytes from Redis that fail are re-read from the store.

Failures: any Redis error (connection refused while the server is down, reset, timeout) is a miss
for the whole batch: the batch is read from the store, and the next command reconnects (redis-py
reconnects a pooled connection after an error; retries are off, so a dead server costs one
refused connect per batch, not a backoff). A store read that fails counts as a failed read.

Output (stdout, JSON lines): {"ready": true} once the metadata is loaded, {"t", "epoch",
"samples", "bytes"} every --progress seconds (samples/bytes: totals since start; t: wall clock),
{"epoch_done": e, "samples", "bytes", "failed", "start", "end", "seconds", hits, misses,
redis_errors, set_errors, store_reads, read_errors, crc_errors} after each epoch and
{"done": true, ...totals} at the end. --barrier epoch|start: wait for a "go" line on stdin before
each epoch, or before the first only (the harness starts all nodes together); a "stop" line ends
the run at the next batch. --step: lock-step with the other ranks (data-parallel steps).

Emulated GPU (--train-rate R > 0): after every --compute-every S samples (the step) the trainer
computes (sleeps) S / R seconds, then enters the step barrier; the epoch's last partial step
computes in proportion. Fetching goes on during the compute: the --inflight batches submitted to
the worker pool (up to inflight x batch samples ahead of the consumer, 6 x 32 = 192 by default,
about 3 steps of 64) keep being read from Redis / the store while the main thread sleeps; the
consumer refills the window as it takes each batch. R = 0 (default): no compute.
"""
from __future__ import annotations

import argparse
import collections
import concurrent.futures as cf
import json
import sys
import threading
import time

import crc32c
import redis
import stoker
from redis.backoff import NoBackoff
from redis.retry import Retry


_OUT_LOCK = threading.Lock()


def emit(msg: dict) -> None:
    """One JSON line to stdout, whole (print() writes the text and the newline apart, so lines
    from two threads could interleave)."""
    with _OUT_LOCK:
        sys.stdout.write(json.dumps(msg) + "\n")
        sys.stdout.flush()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("uri")
    ap.add_argument("--redis", required=True, help="HOST:PORT")
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world-size", type=int, required=True)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--window", type=int, default=16)
    ap.add_argument("--limit", type=int, default=0, help="read only the first N samples of "
                    "each epoch's plan (0: all)")
    ap.add_argument("--batch", type=int, default=32, help="keys per MGET / pipelined SET")
    ap.add_argument("--inflight", type=int, default=6, help="batches in flight at once")
    ap.add_argument("--io-threads", type=int, default=16, help="concurrent store reads")
    ap.add_argument("--progress", type=float, default=0.25, help="seconds between progress lines")
    ap.add_argument("--step", default="", help="HOST:PORT:GROUP:EVERY: lock-step with the "
                    "other ranks every EVERY samples through bench/run_cache.py's step barrier")
    ap.add_argument("--train-rate", type=float, default=0.0, help="emulated GPU: samples/s "
                    "consumed; each step of --compute-every samples sleeps S/R s (0: none)")
    ap.add_argument("--compute-every", type=int, default=64, help="samples per emulated step")
    ap.add_argument("--barrier", choices=("none", "start", "epoch"), default="none",
                    help="wait for a line on stdin before each epoch (epoch) or the first one "
                    "(start): the harness starts every node's epoch together")
    args = ap.parse_args()

    ds = stoker.Dataset(args.uri)
    sampler = stoker.Sampler(ds, mode="chunk", seed=args.seed, window=args.window)
    # Metadata (local once the dataset is open): key, file index, size and CRC of every sample.
    n = len(ds)
    keys, files, crcs = [], [], []
    for i in range(n):
        (path,) = ds.sample_files(i)
        st = ds.stat(path)
        keys.append(path)
        files.append(st["index"])
        crcs.append(st["crc32c"])

    host, port = args.redis.rsplit(":", 1)
    pool = redis.ConnectionPool(host=host, port=int(port), max_connections=args.inflight + 2,
                                socket_connect_timeout=1.0, socket_timeout=10.0,
                                retry=Retry(NoBackoff(), 0))
    r = redis.Redis(connection_pool=pool)

    lock = threading.Lock()
    c = collections.Counter()  # hits, misses, redis_errors, set_errors, store_reads, ...

    def store_read(i: int) -> bytes | None:
        try:
            data = ds.read(files[i])  # CRC-checked by stoker
        except Exception as e:  # noqa: BLE001 - counted, reported
            with lock:
                c["read_errors"] += 1
            print(json.dumps({"read_error": repr(e), "sample": i}), file=sys.stderr, flush=True)
            return None
        return data

    def fetch(batch: list[int]) -> list[bytes | None]:
        bkeys = [keys[i] for i in batch]
        try:
            vals = r.mget(bkeys)
        except redis.RedisError:
            vals = [None] * len(batch)
            with lock:
                c["redis_errors"] += 1
        hits = misses = bad = 0
        miss_at = []
        for k, (i, v) in enumerate(zip(batch, vals)):
            if v is None:
                miss_at.append(k)
            elif crc32c.crc32c(v) != crcs[i]:
                bad += 1  # a corrupt cached value: read the store instead
                miss_at.append(k)
            else:
                hits += 1
        misses = len(miss_at)
        if miss_at:
            got = list(io.map(store_read, [batch[k] for k in miss_at]))
            fill = {}
            for k, data in zip(miss_at, got):
                vals[k] = data
                if data is not None:
                    fill[bkeys[k]] = data
            if fill:
                try:
                    p = r.pipeline(transaction=False)
                    for key, data in fill.items():
                        p.set(key, data)
                    p.execute()
                except redis.RedisError:
                    with lock:
                        c["set_errors"] += 1
        for i, v in zip(batch, vals):  # what the trainer gets is checked, wherever it came from
            if v is not None and crc32c.crc32c(v) != crcs[i]:
                bad += 1
        with lock:
            c["hits"] += hits
            c["misses"] += misses
            c["store_reads"] += misses
            c["crc_errors"] += bad
        return vals

    sync = None
    if args.step:
        import socket
        h, p, group, every = args.step.split(":")
        every = int(every)
        sync = socket.create_connection((h, int(p)))
        sync.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sync.sendall(f"{group} {args.world_size}\n".encode())

    def barrier_step() -> None:
        sync.sendall(b"s")
        if sync.recv(1) != b"k":
            raise RuntimeError("step barrier lost")

    compute = args.compute_every if args.train_rate > 0 else 0

    def gpu(k: int) -> None:  # the emulated compute of a step of k samples
        if k:
            time.sleep(k / args.train_rate)

    io = cf.ThreadPoolExecutor(args.io_threads)
    workers = cf.ThreadPoolExecutor(args.inflight)
    state = {"epoch": 0, "samples": 0, "bytes": 0, "stop": False, "stop_asked": False}
    go = threading.Semaphore(0)

    def control() -> None:  # stdin: "go" lines for the barrier, "stop" to end at the next batch
        for line in sys.stdin:
            if line.strip() == "stop":
                state["stop_asked"] = True
            go.release()
        state["stop_asked"] = True
        go.release()

    threading.Thread(target=control, daemon=True).start()

    def progress() -> None:
        while not state["stop"]:
            emit({"t": time.time(), "epoch": state["epoch"],
                              "samples": state["samples"], "bytes": state["bytes"]})
            time.sleep(args.progress)

    emit({"ready": True})
    ticker = threading.Thread(target=progress, daemon=True)
    ticker.start()
    t_all = time.perf_counter()
    for epoch in range(args.epochs):
        if args.barrier == "epoch" or (args.barrier == "start" and epoch == 0):
            go.acquire()
        if state["stop_asked"]:
            break
        state["epoch"] = epoch
        plan, _, _ = sampler.plan_rank(epoch, 0, args.world_size, args.world_size, args.rank)
        plan = list(plan)
        if args.limit:
            plan = plan[:args.limit]
        before = dict(c)
        t0 = time.time()
        samples = nbytes = failed = consumed = 0
        first = None
        stopped = False
        batches = [plan[b:b + args.batch] for b in range(0, len(plan), args.batch)]
        pending: collections.deque = collections.deque()
        nxt = 0
        while nxt < len(batches) or pending:
            if state["stop_asked"]:
                stopped = True
                for f in pending:
                    f.result()  # let the batches in flight finish (they may SET)
                break
            while nxt < len(batches) and len(pending) < args.inflight:
                pending.append(workers.submit(fetch, batches[nxt]))
                nxt += 1
            for v in pending.popleft().result():  # in plan order, like a loader
                if first is None:
                    first = time.time() - t0
                consumed += 1
                if v is None:
                    failed += 1
                else:
                    samples += 1
                    nbytes += len(v)
                    state["samples"] += 1
                    state["bytes"] += len(v)
                if compute and consumed % compute == 0:
                    gpu(compute)  # the worker pool keeps fetching the batches in flight
                if sync is not None and consumed % every == 0:
                    barrier_step()
        if compute and not stopped:
            gpu(consumed % compute)  # the epoch's last, partial step
        if sync is not None and consumed % every and not stopped:
            barrier_step()  # the epoch's last, partial step
        t1 = time.time()
        delta = {k: c.get(k, 0) - before.get(k, 0) for k in
                 ("hits", "misses", "redis_errors", "set_errors", "store_reads", "read_errors",
                  "crc_errors")}
        emit({"epoch_done": epoch, "samples": samples, "bytes": nbytes,
                          "failed": failed, "stopped": stopped, "start": t0, "end": t1,
                          "seconds": t1 - t0,
                          "first_sample_s": first,
                          **delta})
        if stopped:
            break
    state["stop"] = True
    ticker.join()
    emit({"done": True, "seconds": time.perf_counter() - t_all,
                      "samples": state["samples"], "bytes": state["bytes"],
                      **c})
    workers.shutdown()
    io.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
