#!/usr/bin/env python3
"""The task-grained distributed cache (issue #5): direct reads vs a shared Redis vs `stoker node`.

    sudo python3 bench/run_cache.py [--rate 1gbit] [--delay-ms 1] [--nodes 3] [--epochs 2]
                                    [--reps 1] [--skip-stoker] [--skip-recovery] [--limit N]

Hosts on the netns testbed (tests/netns/testbed.py): `storage` runs `stoker serve` (with
--metrics-port) on the ImageNet-like subset packed by bench/run_decode.py (5,000 JPEGs,
~518 MB, 4.54 bits/pixel), `cache` runs redis-server, n1..nN are training nodes. Every link is
shaped with tbf to --rate (a transfer crosses the sender's uplink and the receiver's downlink
shaper); the nodes reach the storage server through the delaying relay (--delay-ms each way,
so RTT +2×delay); node↔node and node↔cache traffic goes straight over the switch.

One trainer process per node, rank i of N, reading every sample of its share for --epochs epochs
in stoker.Loader's order (shuffle="chunk", seed 0, set_epoch(e)). All trainers start each epoch
together (a barrier between epochs, as data-parallel training has), so storage bytes are counted
per epoch from the server's /metrics (stoker_serve_answer_bytes_total{type="READ"}).
  link     one TCP stream n1 -> n2: the per-node ceiling
  direct   (a) stoker.Loader("stoker://relay/train", rank=i, world_size=N): every node reads its
           share from the store, every epoch
  redis    (b) a global cache as users build it: redis-server on `cache`, one key per file
           (key = path, value = bytes); each trainer (bench/cache_peers/redis_epoch.py) reads the
           same per-rank plan (stoker.Sampler.plan_rank) with pipelined MGETs of 32 keys, 6
           batches in flight, misses read from the store on 16 threads and SET back pipelined;
           every sample CRC32C-checked. Also Redis's total_net_output_bytes.
  stoker   (c) `stoker node --job bench ...` on every node, the same trainer as (a) with
           STOKER_NODE=/tmp/stoker-bench-<node>.sock
Recovery (d), for redis and stoker: a fresh cache; the trainers start together and run from
epoch to epoch without the epoch barrier, printing progress every 0.25 s; once every trainer
has finished epochs 0..--kill-epoch (the cache is warm) and --pre-seconds more have passed, the
harness kill -9s redis-server (b) or the node daemon of the middle node (c) when the aggregate
next reaches --kill-at (0.4) of an epoch, restarts it --down-seconds later, stops the trainers
--observe s after the restart, and computes: pre-kill aggregate samples/s (over the last
--pre-seconds), recovery time (kill until the aggregate rate over --rate-window is back to
>= 90 % of it for 1 s, after its first dip; 0 if it never dips), samples lost behind the pre-kill
pace, and failed reads (must be 0).
Lock-step: with --step S (default 64) every trainer waits for all the others every S samples
(a tiny barrier server on the switch), as data-parallel training does at each step, so a slow
node slows the job as it would in DDP.
Emulated GPU: with --train-rate R every trainer computes (time.sleep) S/R s at each step of S
samples (S = --step, 64 with --step 0), after it has the step's samples and before the step
barrier, as GPU-bound training does; the loader reads ahead meanwhile (stoker.Loader's C++ read
pipeline up to its memory budget; the Redis trainer's --redis-inflight batches of
--redis-batch keys on its worker pool). A node then consumes at most R samples/s, and recovery
measures whether the job slows down (the pre-kill rate is ~R x nodes when the loaders keep up)
rather than how fast an unthrottled reader refills. Default 0: no compute (read flat out).
Results JSON in $STOKER_BENCH_CACHE/results/cache-*.json; a summary table on stdout.

Caveats. Everything (3 trainers, 3 daemons or redis, the server, the relay, tbf) shares this
machine's CPUs; the trainers only count (and CRC-check) bytes, no decoding. With this 8-chunk
dataset a whole epoch is one shuffle window (window 16), and stoker.Loader's default read budget
(2 x window x largest chunk) fetches a rank's whole share before yielding its first sample
(first_sample_s in the JSON), so direct reading progresses in one burst per epoch
(--loader-budget-mb, e.g. 64, makes it stream). With --memory-limit (1G) >= the dataset every
daemon ends up holding all of it, so from epoch 3 on the stoker setup reads only local memory
(--memory-limit 256M shows the distributed regime). --storage-rate gives the store a slower link
than the nodes and the cache (by default all links are --rate, so the store is as fast as the
single Redis host, and losing Redis costs no bandwidth).
"""
from __future__ import annotations

import bisect
import json
import math
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "netns"))
import benchlib  # noqa: E402
from benchlib import CACHE, log  # noqa: E402
from testbed import Testbed, TestbedError, transfer, wait_for_port  # noqa: E402

SERVE_PORT, METRICS_PORT, REDIS_PORT, NODE_PORT, NODE_METRICS_PORT = 7070, 7072, 6379, 7171, 7173
STEP_PORT = 7300
PROGRESS_S = 0.25
SUSTAIN_S = 1.0  # recovery: the rate must stay back this long
COMPUTE_DEFAULT = 64  # --train-rate with --step 0: samples per emulated GPU step

# The step barrier (data-parallel lock-step), run on the switch, and the stoker trainer of (a)
# and (c): programs of their own, started by path.
STEP_BARRIER = HERE / "cache_peers" / "step_barrier.py"
STOKER_TRAINER = HERE / "cache_peers" / "stoker_trainer.py"


class Trainer:
    """A trainer process on a node; its stdout JSON lines are collected by a thread."""

    def __init__(self, host, argv: list[str], env: dict, rank: int):
        self.host, self.rank = host, rank
        self.proc = host.popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        self.lines: list[dict] = []
        self.events: queue.Queue = queue.Queue()
        self.stderr: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                self.stderr.append(line)
                continue
            self.lines.append(msg)
            if "t" not in msg:  # progress lines are only collected
                self.events.put(msg)
        self.events.put({"eof": True})

    def _read_err(self) -> None:
        for line in self.proc.stderr:
            self.stderr.append(line)

    def wait_for(self, key: str, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            try:
                msg = self.events.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise TestbedError(f"{self.host.name}: no {key!r} in {timeout} s; stderr: "
                                   f"{''.join(self.stderr)[-2000:]}") from None
            if key in msg:
                return msg
            if "eof" in msg:
                raise TestbedError(f"{self.host.name}: trainer exited "
                                   f"({self.proc.wait()}) before {key!r}; stderr: "
                                   f"{''.join(self.stderr)[-3000:]}")

    def go(self) -> None:
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def stop(self) -> None:
        try:
            self.proc.stdin.write("stop\n")
            self.proc.stdin.flush()
        except OSError:
            pass

    def finish(self, timeout: float = 60) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.host.kill(self.proc, signal.SIGKILL)
        self.host.testbed._forget(self.proc)

    def progress(self) -> list[tuple[float, int]]:
        return [(m["t"], m["samples"]) for m in self.lines if "t" in m]

    def epochs(self) -> list[dict]:
        return [m for m in self.lines if "epoch_done" in m]


# -- metrics --------------------------------------------------------------------------------------

_METRICS_CODE = ("import sys, urllib.request\n"
                 "print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())")


def storage_read_bytes(storage) -> int:
    out = storage.run([sys.executable, "-c", _METRICS_CODE,
                       f"http://{storage.ip}:{METRICS_PORT}/metrics"]).stdout
    m = re.search(r'^stoker_serve_answer_bytes_total\{type="READ"\} (\d+)', out, re.M)
    if not m:
        raise TestbedError(f"no READ bytes in the metrics: {out[:500]}")
    return int(m.group(1))


def node_metrics(node) -> dict:
    """The node daemon's counters (stoker_node_*_total), by name without prefix and suffix."""
    out = node.run([sys.executable, "-c", _METRICS_CODE,
                    f"http://{node.ip}:{NODE_METRICS_PORT}/metrics"], check=False).stdout
    return {m.group(1): int(m.group(2)) for m in
            re.finditer(r"^stoker_node_(\w+?)(?:_total)? (\d+)$", out, re.M)}


def redis_info(cache) -> dict:
    out = cache.run(["redis-cli", "-h", cache.ip, "-p", str(REDIS_PORT), "info"]).stdout
    info = {}
    for line in out.splitlines():
        if ":" in line and not line.startswith("#"):
            k, v = line.strip().split(":", 1)
            info[k] = v
    return {"net_output_bytes": int(info.get("total_net_output_bytes", 0)),
            "net_input_bytes": int(info.get("total_net_input_bytes", 0)),
            "used_memory": int(info.get("used_memory", 0)),
            "keys": int(re.search(r"keys=(\d+)", info.get("db0", "keys=0")).group(1))}


# -- the setups -----------------------------------------------------------------------------------

class Bench:
    def __init__(self, tb: Testbed, args, uri: str, env: dict, stoker_exe: Path, python: Path,
                 secret: Path):
        self.tb, self.args, self.uri, self.env = tb, args, uri, env
        self.stoker_exe, self.python, self.secret = stoker_exe, python, secret
        self.storage, self.cache = tb["storage"], tb["cache"]
        self.nodes = [tb[f"n{i + 1}"] for i in range(args.nodes)]
        self.redis_proc = None
        self.daemons: dict[str, subprocess.Popen] = {}
        self.num_samples = 0
        self.step_proc, self.step_groups = None, 0

    # redis ------------------------------------------------------------------------------------
    def redis_argv(self) -> list[str]:
        return ["redis-server", "--bind", self.cache.ip, "--port", str(REDIS_PORT),
                "--save", "", "--appendonly", "no", "--maxmemory", self.args.redis_maxmemory,
                "--maxmemory-policy", "allkeys-lru", "--protected-mode", "no",
                "--dir", str(self.tb.workdir), "--logfile", str(self.tb.workdir / "redis.log")]

    def start_redis(self) -> None:
        self.redis_proc = self.cache.popen(self.redis_argv(), stdout=subprocess.DEVNULL,
                                           stderr=subprocess.DEVNULL)
        wait_for_port(self.nodes[0], self.cache.ip, REDIS_PORT)

    def stop_redis(self) -> None:
        if self.redis_proc is not None:
            self.cache.kill(self.redis_proc)
            self.redis_proc = None

    # stoker node ------------------------------------------------------------------------------
    def socket(self, node) -> str:
        return f"/tmp/stoker-bench-{node.name}.sock"

    def daemon_argv(self, node) -> list[str]:
        peers = ",".join(f"{n.ip}:{NODE_PORT}" for n in self.nodes)
        return [str(self.stoker_exe), "node", "--job", "bench", "--store", self.uri,
                "--listen", f"{node.ip}:{NODE_PORT}", "--peers", peers,
                "--socket", self.socket(node), "--memory-limit", self.args.memory_limit,
                "--prefetch", str(self.args.prefetch),
                "--secret-file", str(self.secret), "--metrics-port", str(NODE_METRICS_PORT)]

    def start_daemon(self, node) -> None:
        sock = Path(self.socket(node))
        if sock.exists():
            sock.unlink()
        err = open(self.tb.workdir / f"node-{node.name}.log", "ab")
        self.daemons[node.name] = node.popen(self.daemon_argv(node), env=self.env,
                                             stdout=subprocess.DEVNULL, stderr=err)
        err.close()

    def start_all_daemons(self) -> None:
        for n in self.nodes:
            self.start_daemon(n)
        self.wait_daemons()

    def wait_daemons(self) -> None:
        for node in self.nodes:
            deadline = time.monotonic() + 20
            while not Path(self.socket(node)).exists():
                if self.daemons[node.name].poll() is not None:
                    raise TestbedError(f"stoker node on {node.name} exited: " + (
                        self.tb.workdir / f"node-{node.name}.log").read_text()[-2000:])
                if time.monotonic() > deadline:
                    raise TestbedError(f"stoker node on {node.name}: no socket after 20 s")
                time.sleep(0.05)
            wait_for_port(node, node.ip, NODE_PORT)

    def stop_daemons(self) -> None:
        for name, proc in self.daemons.items():
            self.tb[name].kill(proc)
        self.daemons.clear()

    # trainers ---------------------------------------------------------------------------------
    def start_step_server(self) -> None:
        self.step_proc = self.tb.switch.popen([sys.executable, str(STEP_BARRIER), self.tb.switch.ip,
                                               str(STEP_PORT)], stdout=subprocess.PIPE, text=True)
        if self.step_proc.stdout.readline().strip() != "ready":
            raise TestbedError("step barrier server did not start")
        self.step_groups = 0

    def step_arg(self, kind: str) -> str:
        """The trainers' lock-step option (one new group per set of trainers), or ""."""
        if not self.args.step:
            return ""
        return f"{self.tb.switch.ip}:{STEP_PORT}:{kind}{self.step_groups}:{self.args.step}"

    def compute_every(self) -> int:
        """Samples per emulated GPU step (--train-rate): the lock-step --step, else 64."""
        return self.args.step or COMPUTE_DEFAULT

    def start_trainers(self, kind: str, epochs: int, barrier: str) -> list[Trainer]:
        a, world = self.args, len(self.nodes)
        trainers = []
        self.step_groups += 1
        for rank, node in enumerate(self.nodes):
            env = dict(self.env)
            if kind == "redis":
                argv = [str(self.python), str(HERE / "cache_peers" / "redis_epoch.py"), self.uri,
                        "--redis", f"{self.cache.ip}:{REDIS_PORT}", "--rank", str(rank),
                        "--world-size", str(world), "--epochs", str(epochs), "--seed", "0",
                        "--limit", str(a.limit), "--batch", str(a.redis_batch),
                        "--inflight", str(a.redis_inflight), "--io-threads",
                        str(a.redis_io_threads), "--progress", str(PROGRESS_S),
                        "--barrier", barrier, "--step", self.step_arg(kind)]
                if a.train_rate > 0:
                    argv += ["--train-rate", str(a.train_rate),
                             "--compute-every", str(self.compute_every())]
            else:
                if kind == "stoker":
                    env["STOKER_NODE"] = self.socket(node)
                env["STOKER_BENCH_BLOCK_SIZE"] = a.block_size
                argv = [str(self.python), str(STOKER_TRAINER), self.uri, str(rank), str(world),
                        str(epochs), "0", str(a.limit), barrier, str(PROGRESS_S),
                        str(a.loader_budget_mb), self.step_arg(kind)]
                if a.train_rate > 0:
                    argv += [str(a.train_rate), str(self.compute_every())]
            trainers.append(Trainer(node, argv, env, rank))
        for t in trainers:
            t.wait_for("ready", 120)
        return trainers

    def epochs_with_barrier(self, kind: str) -> dict:
        """(a), (b) or (c): --epochs epochs, all trainers starting each epoch together."""
        a = self.args
        trainers = self.start_trainers(kind, a.epochs, barrier="epoch")
        epochs = []
        try:
            for e in range(a.epochs):
                s0 = storage_read_bytes(self.storage)
                r0 = redis_info(self.cache) if kind == "redis" else None
                m0 = [node_metrics(n) for n in self.nodes] if kind == "stoker" else None
                for t in trainers:
                    t.go()
                done = [t.wait_for("epoch_done", a.epoch_timeout) for t in trainers]
                s1 = storage_read_bytes(self.storage)
                row = epoch_row(done, s1 - s0)
                if kind == "redis":
                    r1 = redis_info(self.cache)
                    row["redis_output_bytes"] = r1["net_output_bytes"] - r0["net_output_bytes"]
                    row["redis_input_bytes"] = r1["net_input_bytes"] - r0["net_input_bytes"]
                    row["redis_used_memory"] = r1["used_memory"]
                    row["redis_keys"] = r1["keys"]
                if kind == "stoker":
                    m1 = [node_metrics(n) for n in self.nodes]
                    for n, before, after in zip(row["nodes"], m0, m1):
                        n["daemon"] = {k: after[k] - before.get(k, 0) for k in after
                                       if k.endswith(("bytes", "fills", "requests", "gets",
                                                      "hits", "failures", "corrupt",
                                                      "prefetches", "evictions"))
                                       and k != "cache_bytes"}
                        n["daemon"]["cache_bytes"] = after.get("cache_bytes", 0)
                    row["peer_bytes"] = sum(n["daemon"].get("peer_bytes", 0)
                                            for n in row["nodes"])
                    row["daemon_store_bytes"] = sum(n["daemon"].get("store_bytes", 0)
                                                    for n in row["nodes"])
                epochs.append(row)
                log(f"  {kind} epoch {e + 1}: " + ", ".join(
                    f"{n['node']} {n['samples_per_s']:.0f}" for n in row["nodes"]) +
                    f" samples/s; aggregate {row['aggregate_samples_per_s']:.0f}; storage "
                    f"{row['storage_bytes'] / 1e6:.0f} MB; failed {row['failed']}" +
                    (f"; redis out {row['redis_output_bytes'] / 1e6:.0f} MB"
                     if kind == "redis" else "") +
                    (f"; peer {row['peer_bytes'] / 1e6:.0f} MB" if kind == "stoker" else ""))
                if any(d.get("error") for d in done):
                    raise TestbedError(f"{kind}: a trainer failed: "
                                       f"{[d.get('error') for d in done]}")
        finally:
            for t in trainers:
                t.finish()
        return {"epochs": epochs}

    def recovery(self, kind: str) -> dict:
        """(d): kill -9 the cache (redis) or one node daemon (stoker) during epoch --kill-epoch.
        The trainers start together and then go on from epoch to epoch without the harness's
        epoch barrier (still in lock-step with --step), until --observe seconds after the
        restart, when the harness stops them."""
        a = self.args
        epochs = 100000  # until stopped
        trainers = self.start_trainers(kind, epochs, barrier="start")
        world = len(self.nodes)
        per_rank = -(-self.num_samples // world)  # the loader pads the last round
        per_epoch_total = world * (min(a.limit, per_rank) if a.limit else per_rank)
        target = warm_at = None
        victim = self.nodes[len(self.nodes) // 2]
        s0 = storage_read_bytes(self.storage)
        t_kill = t_restart = t_stop = None
        try:
            for t in trainers:
                t.go()
            deadline = time.monotonic() + a.epoch_timeout * (a.kill_epoch + 2)
            while t_kill is None:
                done = [t.epochs() for t in trainers]
                if warm_at is None and all(len(d) > a.kill_epoch for d in done):
                    # every trainer has finished epochs 0..kill_epoch: the cache is warm
                    warm_at = max(d[a.kill_epoch]["end"] for d in done)
                progress = [t.progress() for t in trainers]
                total = sum(p[-1][1] if p else 0 for p in progress)
                if target is None and warm_at and time.time() >= warm_at + a.pre_seconds:
                    # the next point at --kill-at of an epoch (aggregate samples)
                    k = math.floor(total / per_epoch_total - a.kill_at) + 1
                    target = per_epoch_total * (k + a.kill_at)
                if target is not None and total >= target:
                    t_kill = time.time()
                    if kind == "redis":
                        self.cache.kill(self.redis_proc, signal.SIGKILL)
                    else:
                        victim.kill(self.daemons[victim.name], signal.SIGKILL)
                    break
                if all(t.proc.poll() is not None for t in trainers) or \
                        time.monotonic() > deadline:
                    raise TestbedError(f"{kind} recovery: no kill point before the trainers "
                                       "ended or the deadline")
                time.sleep(0.02)
            time.sleep(a.down_seconds)
            t_restart = time.time()
            if kind == "redis":
                self.start_redis()
            else:
                self.start_daemon(victim)
            log(f"  {kind}: killed {'redis-server' if kind == 'redis' else victim.name + ' daemon'}"
                f" at {target:.0f} samples, restarted {t_restart - t_kill:.1f} s later")
            time.sleep(max(0.0, t_restart + a.observe - time.time()))
            t_stop = time.time()
            for t in trainers:
                t.stop()
            for t in trainers:
                t.wait_for("done", a.epoch_timeout)
        finally:
            for t in trainers:
                t.finish()
        s1 = storage_read_bytes(self.storage)
        result = recovery_metrics(trainers, max(warm_at, t_kill - a.pre_seconds), t_kill,
                                  t_restart, t_stop, a.threshold, a.rate_window)
        result.update({"victim": "redis-server" if kind == "redis" else f"{victim.name} daemon",
                       "kill_at_samples": target,
                       "kill_in_epoch": target / per_epoch_total if target else None,
                       "warm_after_epoch": a.kill_epoch,
                       "kill_fraction": a.kill_at, "down_seconds": a.down_seconds,
                       "storage_bytes": s1 - s0,
                       "epochs": max(len(t.epochs()) for t in trainers)})
        result["failed_reads"] = sum(e.get("failed", 0) + e.get("read_errors", 0)
                                     for t in trainers for e in t.epochs())
        result["trainer_errors"] = [e["error"] for t in trainers for e in t.epochs()
                                    if e.get("error")]
        if kind == "redis":
            result["redis_errors"] = sum(e.get("redis_errors", 0)
                                         for t in trainers for e in t.epochs())
        result["per_epoch"] = [[{k: e.get(k) for k in ("epoch_done", "samples", "seconds",
                                                        "hits", "misses", "failed", "error")}
                                for e in t.epochs()] for t in trainers]
        log(f"  {kind} recovery: pre-kill {result['pre_kill_samples_per_s']:.0f} samples/s, "
            f"dip to {result['min_rate_after_kill']:.0f}, recovery "
            f"{fmt_s(result['recovery_s'])}, {result['lost_samples']:.0f} samples behind, "
            f"failed reads {result['failed_reads']}")
        return result


def epoch_row(done: list[dict], storage_bytes: int) -> dict:
    nodes = []
    for i, d in enumerate(done):
        nodes.append({"node": f"n{i + 1}", "samples": d["samples"], "bytes": d["bytes"],
                      "seconds": d["seconds"], "samples_per_s": d["samples"] / d["seconds"],
                      "MBps": d["bytes"] / d["seconds"] / 1e6, "failed": d.get("failed", 0),
                      **{k: d[k] for k in ("hits", "misses", "redis_errors", "crc_errors",
                                           "read_errors", "first_sample_s") if k in d},
                      **({"stats": d["stats"]} if "stats" in d else {})})
    span = max(d["end"] for d in done) - min(d["start"] for d in done)
    samples = sum(d["samples"] for d in done)
    return {"nodes": nodes, "seconds": span, "samples": samples,
            "aggregate_samples_per_s": samples / span,
            "aggregate_MBps": sum(d["bytes"] for d in done) / span / 1e6,
            "min_node_samples_per_s": min(n["samples_per_s"] for n in nodes),
            "mean_node_MBps": sum(n["MBps"] for n in nodes) / len(nodes),
            # what each node gets when the epoch ends with its slowest node (data parallel)
            "per_node_MBps": sum(d["bytes"] for d in done) / span / 1e6 / len(nodes),
            "storage_bytes": storage_bytes,
            "failed": sum(n["failed"] + n.get("read_errors", 0) for n in nodes)}


def recovery_metrics(trainers: list[Trainer], warm: float, t_kill: float, t_restart: float,
                     t_stop: float, threshold: float, window: float = 1.0) -> dict:
    """Aggregate progress A(t) = the sum of every trainer's samples (linear between progress
    lines); rate r(t) = (A(t) - A(t - window)) / window. Pre-kill level: the mean rate from
    `warm` (--pre-seconds before the kill, the caches warm) to the kill. Recovery: the first
    window end after the kill from which r stays >= threshold × pre-kill for SUSTAIN_S, after
    the first window below it (0 if none dips); settled: the end of the last window below it.
    Up to the moment the harness stopped the trainers."""
    series = [t.progress() for t in trainers]

    def at(s, t):
        ts = [p[0] for p in s]
        i = bisect.bisect_right(ts, t)
        if i == 0:
            return 0.0
        if i >= len(s):
            return float(s[-1][1])
        (t0, a0), (t1, a1) = s[i - 1], s[i]
        return a0 + (a1 - a0) * (t - t0) / (t1 - t0) if t1 > t0 else float(a1)

    def agg(t):
        return sum(at(s, t) for s in series)

    t_end = t_stop
    pre = (agg(t_kill) - agg(warm)) / (t_kill - warm) if t_kill > warm else float("nan")
    step = 0.05
    grid, t = [], t_kill + step
    while t <= t_end:
        grid.append((t, (agg(t) - agg(t - window)) / window))
        t += step
    low = [g[1] < threshold * pre for g in grid]
    dip = next((i for i, x in enumerate(low) if x), None)
    recovery_s = settled_s = 0.0
    if dip is not None:
        need = int(round(SUSTAIN_S / step))
        back = next((i for i in range(dip, len(grid) - need)
                     if not any(low[i:i + need + 1])), None)
        recovery_s = grid[back][0] - t_kill if back is not None else None
        last = max(i for i, x in enumerate(low) if x)
        settled_s = grid[last][0] - t_kill if last < len(grid) - need else None
    lost = pre * (t_end - t_kill) - (agg(t_end) - agg(t_kill))
    t0 = min(s[0][0] for s in series if s)
    timeline = []  # aggregate rate per 0.5 s, relative to the first progress line
    t = t0 + window
    while t <= max(s[-1][0] for s in series if s):
        timeline.append([round(t - t0, 2), round((agg(t) - agg(t - window)) / window)])
        t += 0.5
    return {"pre_kill_samples_per_s": pre, "threshold": threshold, 
            "kill_s": t_kill - t0, "restart_s": t_restart - t0, "pre_from_s": warm - t0,
            "stop_s": t_end - t0,
            "min_rate_after_kill": min((g[1] for g in grid), default=float("nan")),
            "dipped": dip is not None, "recovery_s": recovery_s, "settled_s": settled_s,
            "sustain_s": SUSTAIN_S, "rate_window_s": window,
            "observed_s": t_end - t_kill, "lost_samples": lost,
            "lost_seconds": lost / pre if pre and pre == pre else float("nan"),
            "aggregate_rate_timeline": timeline,
            "progress": {t.host.name: [[round(p[0] - t0, 3), p[1]] for p in t.progress()]
                         for t in trainers}}


def fmt_s(x) -> str:
    return "not recovered" if x is None else f"{x:.1f} s"


# -- summary --------------------------------------------------------------------------------------

def summary(results: dict) -> str:
    lines = []
    train_rate = results.get("train_rate", 0) or 0
    target = train_rate * results["nodes"]  # the aggregate the emulated GPUs consume
    for rep, run in enumerate(results["runs"]):
        link = run["link_MBps"]
        lines.append(f"rep {rep}: link (one TCP stream n1->n2) {link:.0f} MB/s; "
                     f"dataset {results['dataset_bytes'] / 1e6:.0f} MB, "
                     f"{results['num_samples']} samples, {results['nodes']} nodes")
        if train_rate:
            lines.append(f"emulated GPU: --train-rate {train_rate:g} samples/s per node (a step "
                         f"of {results['compute_every']} samples computes "
                         f"{1e3 * results['compute_every'] / train_rate:.1f} ms), so at most "
                         f"{target:.0f} samples/s in aggregate; storage link "
                         f"{results['storage_rate']}")
        head = (f"{'setup':8} {'epoch':>5} " + " ".join(f"{'n' + str(i + 1):>6}"
                                                       for i in range(results['nodes'])) +
                f" {'aggr':>7} {'MB/s/node':>9} {'%link':>6} {'storage MB':>10} {'cache MB':>8}" +
                (f" {'%GPU':>5}" if train_rate else ""))
        lines += ["n1..: samples/s of each node over its own epoch; aggr: all samples / (last "
                  "end - first start); MB/s/node: aggr MB/s / nodes, %link: of the link row; "
                  "storage MB: READ bytes stoker serve sent; cache MB: bytes Redis sent (redis), "
                  "bytes the daemons got from peers (stoker)" +
                  ("; %GPU: aggr / (train rate x nodes)" if train_rate else ""),
                  head, "-" * len(head)]
        for kind in ("direct", "redis", "stoker"):
            if kind not in run or "epochs" not in run[kind]:
                continue
            for e, row in enumerate(run[kind]["epochs"]):
                lines.append(
                    f"{kind:8} {e + 1:>5} " +
                    " ".join(f"{n['samples_per_s']:6.0f}" for n in row["nodes"]) +
                    f" {row['aggregate_samples_per_s']:7.0f} {row['per_node_MBps']:9.1f}"
                    f" {100 * row['per_node_MBps'] / link:5.0f}%"
                    f" {row['storage_bytes'] / 1e6:10.0f}"
                    f" {row.get('redis_output_bytes', row.get('peer_bytes', 0)) / 1e6:8.0f}" +
                    (f" {100 * row['aggregate_samples_per_s'] / target:4.0f}%" if train_rate
                     else ""))
        for e in range(results["epochs"]):
            def agg(kind):
                try:
                    return run[kind]["epochs"][e]["aggregate_samples_per_s"]
                except (KeyError, IndexError):
                    return None
            d, r, s = agg("direct"), agg("redis"), agg("stoker")
            parts = []
            if s and r:
                parts.append(f"stoker/redis {s / r:.2f}")
            if s and d:
                parts.append(f"stoker/direct {s / d:.2f}")
            if r and d:
                parts.append(f"redis/direct {r / d:.2f}")
            if parts:
                lines.append(f"epoch {e + 1} aggregate ratios: " + ", ".join(parts))
        for kind in ("redis", "stoker"):
            rec = run.get(f"recovery_{kind}")
            if rec and "pre_kill_samples_per_s" in rec:
                lines.append(
                    f"recovery {kind:6}: kill -9 {rec['victim']} at {rec['kill_s']:.1f} s "
                    f"(epoch {rec['kill_in_epoch']:.1f}), "
                    f"restart +{rec['down_seconds']:.0f} s; pre-kill "
                    f"{rec['pre_kill_samples_per_s']:.0f} samples/s" +
                    (f" ({100 * rec['pre_kill_samples_per_s'] / target:.0f}% of the GPUs' "
                     f"{target:.0f})" if train_rate else "") + ", min after kill "
                    f"{rec['min_rate_after_kill']:.0f}; back to >= "
                    f"{100 * rec['threshold']:.0f}% after {fmt_s(rec['recovery_s'])} "
                    f"(settled {fmt_s(rec['settled_s'])}, observed {rec['observed_s']:.1f} s); "
                    f"{rec['lost_samples']:.0f} samples behind the pre-kill pace "
                    f"({rec['lost_seconds']:.1f} s); storage {rec['storage_bytes'] / 1e6:.0f} MB "
                    f"in {rec['epochs']} epochs; failed reads {rec['failed_reads']}")
            elif rec:
                lines.append(f"recovery {kind}: {rec}")
    return "\n".join(lines)


def stoker_node_available(stoker_exe: Path) -> bool:
    r = subprocess.run([str(stoker_exe), "node", "--help"], capture_output=True, text=True)
    return r.returncode == 0 and "--peers" in r.stdout + r.stderr


def main() -> int:
    ap = benchlib.argument_parser(__doc__)
    ap.add_argument("--dataset", type=Path,
                    default=CACHE / "decode" / "imagenet-20000-c100-s1-first25c.stoker")
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--storage-rate", default=None,
                    help="shape the storage host's link to this instead of --rate")
    ap.add_argument("--stoker-exe", type=Path, default=HERE.parent / ".venv" / "bin" / "stoker",
                    help="the stoker CLI (serve, node)")
    ap.add_argument("--delay-ms", type=float, default=1.0)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--limit", type=int, default=0,
                    help="each rank reads only the first N samples of its plan (development)")
    ap.add_argument("--skip-stoker", action="store_true", help="no `stoker node` setups")
    ap.add_argument("--skip-redis", action="store_true")
    ap.add_argument("--skip-direct", action="store_true")
    ap.add_argument("--skip-recovery", action="store_true")
    ap.add_argument("--observe", type=float, default=12.0,
                    help="seconds the recovery runs go on after the restart")
    ap.add_argument("--kill-epoch", type=int, default=3,
                    help="recovery: the kill comes after every trainer finished epochs "
                    "0..KILL_EPOCH (the cache is warm) and --pre-seconds more")
    ap.add_argument("--pre-seconds", type=float, default=3.0,
                    help="recovery: seconds of warm reading measured before the kill")
    ap.add_argument("--kill-at", type=float, default=0.4,
                    help="recovery: kill at this fraction of an epoch (aggregate samples)")
    ap.add_argument("--down-seconds", type=float, default=3.0)
    ap.add_argument("--threshold", type=float, default=0.9)
    ap.add_argument("--step", type=int, default=64,
                    help="lock-step: every trainer waits for all the others every STEP samples, "
                    "as data-parallel training does at each step (0: trainers run freely)")
    ap.add_argument("--train-rate", type=float, default=0.0,
                    help="emulated GPU: samples/s per node that training consumes; every step "
                    "of S samples (--step, or 64 with --step 0) the trainer computes (sleeps) "
                    "S/R s after it has the samples and before the step barrier, the loader "
                    "reading ahead meanwhile (0: no compute, trainers read as fast as they can)")
    ap.add_argument("--rate-window", type=float, default=1.0,
                    help="recovery: seconds over which the aggregate rate is measured")
    ap.add_argument("--loader-budget-mb", type=int, default=0,
                    help="stoker.Loader memory_budget of the stoker trainers (0: its default)")
    ap.add_argument("--memory-limit", default="1G", help="stoker node --memory-limit")
    ap.add_argument("--block-size", default="auto",
                    help="stoker.Loader block_size of the stoker trainers: auto (its default, "
                         "None) or bytes (0: whole chunks, the default before mixed packing)")
    ap.add_argument("--prefetch", type=int, default=8, help="stoker node --prefetch")
    ap.add_argument("--redis-maxmemory", default="2gb")
    ap.add_argument("--redis-batch", type=int, default=32)
    ap.add_argument("--redis-inflight", type=int, default=6)
    ap.add_argument("--redis-io-threads", type=int, default=16)
    ap.add_argument("--epoch-timeout", type=float, default=300)
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (network namespaces)")
    stoker_exe = args.stoker_exe
    python = HERE.parent / ".venv" / "bin" / "python"
    if not (args.dataset / "versions").is_dir():
        sys.exit(f"{args.dataset}: run bench/run_decode.py first (it packs the subset)")
    have_redis = subprocess.run([str(python), "-c", "import redis, crc32c"],
                                capture_output=True).returncode == 0
    if not args.skip_redis and (not have_redis or not any(
            os.access(os.path.join(p, "redis-server"), os.X_OK)
            for p in os.environ.get("PATH", "").split(":"))):
        sys.exit("redis-server or the redis / crc32c Python packages are missing: "
                 "bash bench/setup_peers.sh redis")
    have_node = stoker_node_available(stoker_exe)
    if not args.skip_stoker and not have_node:
        log("`stoker node` is not in this build of the CLI: skipping the stoker setups")
        args.skip_stoker = True
    payload = sum(f.stat().st_size for f in (args.dataset / "chunks").iterdir())
    secret = CACHE / "serve-secret"
    secret.write_text("benchmark-secret-0123456789abcdef\n")
    secret.chmod(0o600)
    env = dict(os.environ, STOKER_SECRET_FILE=str(secret))
    env.pop("STOKER_NODE", None)
    hosts = ["storage", "cache"] + [f"n{i + 1}" for i in range(args.nodes)]
    results = {"machine": benchlib.machine(), "rate": args.rate, "delay_ms": args.delay_ms,
               "storage_rate": args.storage_rate or args.rate,
               "nodes": args.nodes, "epochs": args.epochs, "limit": args.limit,
               "dataset": str(args.dataset), "dataset_bytes": payload,
               "loader_budget_mb": args.loader_budget_mb, "step": args.step,
               "train_rate": args.train_rate,
               "compute_every": (args.step or COMPUTE_DEFAULT) if args.train_rate > 0 else 0,
               "redis_tuning": {"batch": args.redis_batch, "inflight": args.redis_inflight,
                                "io_threads": args.redis_io_threads,
                                "maxmemory": args.redis_maxmemory},
                "stoker_node": not args.skip_stoker, "memory_limit": args.memory_limit,
                "prefetch": args.prefetch,
               "runs": []}
    t_start = time.monotonic()
    with Testbed("stk-bench-cache", hosts, rate=args.rate) as tb:
        storage = tb["storage"]
        if args.storage_rate:
            tb.shape(storage, args.storage_rate)
        server = storage.popen([str(stoker_exe), "serve", "--listen", f"{storage.ip}:{SERVE_PORT}",
                                "--dataset", f"train={args.dataset}", "--secret-file",
                                str(secret), "--metrics-port", str(METRICS_PORT)],
                               stderr=subprocess.DEVNULL)
        wait_for_port(tb["n1"], storage.ip, SERVE_PORT)
        relay = tb.relay(storage, SERVE_PORT, delay_ms=args.delay_ms)
        uri = f"stoker://{relay.address}/train"
        bench = Bench(tb, args, uri, env, stoker_exe, python, secret)
        bench.start_step_server()
        bench.num_samples = int(tb["n1"].run(
            [str(python), "-c", "import stoker, sys; print(len(stoker.Dataset(sys.argv[1])))",
             uri], env=env).stdout)
        results["num_samples"] = bench.num_samples
        for rep in range(args.reps):
            run: dict = {}
            link = transfer(tb["n1"], tb["n2"], min(payload, 256 << 20), verify=False)
            run["link_MBps"] = link["bytes"] / link["seconds"] / 1e6
            log(f"rep {rep}: link n1 -> n2 {run['link_MBps']:.0f} MB/s")
            if not args.skip_direct:
                run["direct"] = bench.epochs_with_barrier("direct")
            # Each cache setup: start it, run the epochs, then (fresh) the kill -9 recovery.
            setups = [("redis", args.skip_redis, bench.start_redis, bench.stop_redis),
                      ("stoker", args.skip_stoker, bench.start_all_daemons, bench.stop_daemons)]
            for kind, skip, start, stop in setups:
                if not skip:
                    start()
                    try:
                        run[kind] = bench.epochs_with_barrier(kind)
                    finally:
                        stop()
            for kind, skip, start, stop in setups:
                if skip or args.skip_recovery:
                    continue
                start()
                try:
                    run[f"recovery_{kind}"] = bench.recovery(kind)
                except TestbedError as e:
                    log(f"{kind} recovery failed: {e}")
                    run[f"recovery_{kind}"] = {"error": str(e)}
                finally:
                    stop()
            results["runs"].append(run)
        storage.kill(server)
    results["wall_seconds"] = time.monotonic() - t_start
    path = benchlib.save("cache", results)
    print(summary(results))
    print(f"({path}; {results['wall_seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
