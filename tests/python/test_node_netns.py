"""`stoker node` (the job cache, docs/cache.md) across hosts on the network-namespace testbed.

Each test builds its own network (tests/netns/testbed.py): a `stoker serve` storage host and
node hosts, each running one `stoker node` daemon and trainer processes that read through it
(STOKER_NODE=<the daemon's socket>). Needs root and `ip netns`; skipped without them, or
without a stoker CLI that has the `node` subcommand.

What is asserted is behaviour, never speed:
  - an epoch through three daemons delivers every sample, byte for byte, with the sampler's
    per-rank rule (equal counts, padding only to even them out, nothing twice within a rank);
    the daemons were used (trainer gets on every node), each chunk left the store once, and a
    second epoch reads no chunk from the store at all;
  - kill -9 of a random daemon at random moments (and restarts) costs no failed read and no
    wrong byte; the recovery time is measured and printed, not asserted;
  - hostile peers (wrong secret, garbage, oversized frames, corrupt frames, slow-loris) and
    hostile trainer-socket clients are dropped, the daemon stays up and under its memory cap
    while a dataset larger than the cap streams through it, and a legitimate trainer still
    reads every byte.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "netns"))
import testbed as tbm  # noqa: E402
from testbed import Testbed, netns_unavailable, wait_for_port  # noqa: E402

from conftest import STOKER, make_tree  # noqa: E402

SECRET = "node-netns-test-secret-0123456789abcdef"
JOB = "nodetest"
SERVE_PORT, SERVE_METRICS_PORT = 7070, 7072
NODE_PORT, NODE_METRICS_PORT = 7171, 7172
WORLD = 6  # 3 nodes x 2 trainers




def _node_unavailable() -> str | None:
    if STOKER is None:
        return "the stoker CLI is not installed (pip install --no-build-isolation .)"
    for sub in ("serve", "node"):
        try:
            run = subprocess.run([STOKER, sub, "--help"], capture_output=True, text=True,
                                 timeout=30)
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"`stoker {sub} --help` failed: {e}"
        if run.returncode != 0:
            return (f"this stoker CLI has no `{sub}` subcommand (rebuild: .venv/bin/pip install "
                    "--no-build-isolation .)")
    return None


_REASON = netns_unavailable() or _node_unavailable()
pytestmark = [pytest.mark.netns, pytest.mark.skipif(_REASON is not None, reason=_REASON or "")]


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- datasets ----------------------------------------------------------------------------------

class Packed:
    """A packed tree: its path, {path: sha256}, and the sizes the metrics are checked against."""

    def __init__(self, root: Path, *, seed: int, classes: int, files_per_class: int,
                 min_size: int, max_size: int, chunk_size: int):
        import stoker
        tree = make_tree(root / "src", seed=seed, classes=classes,
                         files_per_class=files_per_class, min_size=min_size, max_size=max_size)
        self.path = root / "ds"
        stoker.pack(str(root / "src"), str(self.path), chunk_size=chunk_size)
        self.want = {p: _sha(data) for p, data in tree.items()}
        chunks = sorted((self.path / "chunks").iterdir())
        self.chunk_ids = [int(c.name.split(".")[0], 16) for c in chunks]
        self.chunk_count = len(chunks)
        self.chunk_bytes = sum(c.stat().st_size for c in chunks)
        # What a client reads besides chunks: the version record and the segment.
        self.meta_bytes = sum(p.stat().st_size for p in self.path.rglob("*")
                              if p.is_file() and p.parent.name != "chunks")
        assert sorted(p.name for p in (self.path / "versions").iterdir()) == [
            f"{1:016x}.version"]
        # The dataset's identity, which a trainer presents in its HELLO and a daemon exports to
        # its peers under the virtual path MANIFEST: the (only) version record's bytes.
        self.record_path = self.path / "versions" / f"{1:016x}.version"
        self.manifest = self.record_path.read_bytes()
        self.payload_bytes = sum(len(d) for d in tree.values())


def _write_secret(tmp_path: Path) -> Path:
    secret = tmp_path / "secret"
    secret.write_text(SECRET)
    secret.chmod(0o600)
    return secret


# -- trainers ----------------------------------------------------------------------------------

# One rank's epoch through stoker.Loader: argv uri rank world seed epoch out budget window
# [gate hold]. Prints a progress line {"t", "n"} every 0.25 s (flushed), writes {"samples":
# [[path, sha256], ...], "expected", "error", "held_s", "stats"} to `out`, exits 1 if the loop
# raised. With a gate: before its hold-th sample, waits until the file `gate` exists.
_TRAINER = r"""
import hashlib, json, os, sys, threading, time
import stoker
uri, rank, world, seed, epoch, out, budget, window = sys.argv[1:9]
gate, hold = (sys.argv[9], int(sys.argv[10])) if len(sys.argv) > 10 else ("", -1)
rank, world, seed, epoch, budget = int(rank), int(world), int(seed), int(epoch), int(budget)
loader = stoker.Loader(uri, shuffle="chunk", seed=seed, rank=rank, world_size=world,
                       memory_budget=budget or None, window=int(window))
loader.set_epoch(epoch)
expected = len(loader)
state = {"n": 0, "stop": False}
def ticker():
    while not state["stop"]:
        print(json.dumps({"t": time.time(), "n": state["n"]}), flush=True)
        time.sleep(0.25)
threading.Thread(target=ticker, daemon=True).start()
samples, error, held = [], None, 0.0
t0 = time.time()
try:
    for data, label, path in loader:
        if state["n"] == hold:
            h0 = time.time()
            while not os.path.exists(gate):
                time.sleep(0.02)
            held = time.time() - h0
        samples.append([path, hashlib.sha256(data).hexdigest()])
        state["n"] += 1
except Exception as e:
    error = f"{type(e).__name__}: {e}"
state["stop"] = True
print(json.dumps({"t": time.time(), "n": state["n"]}), flush=True)
with open(out, "w") as f:
    json.dump({"rank": rank, "expected": expected, "samples": samples, "error": error,
               "seconds": time.time() - t0, "held_s": held, "stats": loader.stats()}, f)
print(json.dumps({"done": True}), flush=True)
sys.exit(1 if error else 0)
"""


class Trainer:
    """A trainer process on a host; its progress lines are collected by a thread."""

    def __init__(self, host, uri: str, rank: int, *, world: int, seed: int, epoch: int,
                 out: Path, env: dict, budget: int = 0, window: int = 16,
                 gate: tuple[Path, int] | None = None):
        self.host, self.rank, self.out = host, rank, out
        self.proc = host.popen([sys.executable, "-c", _TRAINER, uri, str(rank), str(world),
                                str(seed), str(epoch), str(out), str(budget), str(window),
                                *([str(gate[0]), str(gate[1])] if gate else [])],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
        self.progress: list[tuple[float, int]] = []
        self.stderr: list[str] = []
        self._threads = [threading.Thread(target=self._read, daemon=True),
                         threading.Thread(target=self._read_err, daemon=True)]
        for t in self._threads:
            t.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if "t" in msg:
                self.progress.append((msg["t"], msg["n"]))

    def _read_err(self) -> None:
        for line in self.proc.stderr:
            self.stderr.append(line)

    def samples_done(self) -> int:
        return self.progress[-1][1] if self.progress else 0

    def wait(self, timeout: float) -> dict:
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.host.kill(self.proc, signal.SIGKILL)
            raise AssertionError(f"rank {self.rank} on {self.host.name} did not finish in "
                                 f"{timeout} s; stderr: {''.join(self.stderr)[-3000:]}")
        for t in self._threads:
            t.join(timeout=10)
        self.host.testbed._forget(self.proc)
        assert rc == 0, (f"rank {self.rank} on {self.host.name} exited {rc}; stderr: "
                         f"{''.join(self.stderr)[-3000:]}")
        return json.loads(self.out.read_text())


def check_epoch(results: list[dict], want: dict[str, str], world: int) -> None:
    """Every sample delivered with its right bytes, under the sampler's rule (docs/sampler.md):
    every rank yields ceil(N / world) samples, nothing twice within a rank, and the union is the
    dataset; the only repeats across ranks are the padding that evens out the last round."""
    n = len(want)
    per_rank = -(-n // world)
    assert sorted(r["rank"] for r in results) == list(range(world))
    for r in results:
        assert r["error"] is None, f"rank {r['rank']}: {r['error']}"
        assert r["expected"] == per_rank
        assert len(r["samples"]) == per_rank, f"rank {r['rank']}: {len(r['samples'])} samples"
        paths = [p for p, _ in r["samples"]]
        assert len(set(paths)) == len(paths), f"rank {r['rank']} yielded a sample twice"
        wrong = [p for p, h in r["samples"] if want.get(p) != h]
        assert not wrong, f"rank {r['rank']}: wrong or unknown bytes for {wrong[:5]}"
    # With per_rank * world samples in all, covering all n: exactly per_rank * world - n
    # repeats across ranks (the padding), none missing.
    assert set(p for r in results for p, _ in r["samples"]) == set(want)


# -- daemons and metrics -----------------------------------------------------------------------

_METRICS_CODE = ("import sys, urllib.request\n"
                 "print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())")


def parse_metrics(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def metrics(host, port: int) -> dict[str, float]:
    text = host.run([sys.executable, "-c", _METRICS_CODE,
                     f"http://{host.ip}:{port}/metrics"], timeout=30).stdout
    return parse_metrics(text)


class Daemon:
    """One `stoker node` on a host: started, killed and restarted with the same arguments; its
    stderr goes to a log file (one across restarts)."""

    def __init__(self, host, store: str, peers: list[str], socket_path: Path, log: Path,
                 secret: Path, memory_limit: str = "512M"):
        self.host, self.socket, self.log = host, socket_path, log
        self.argv = [STOKER, "node", "--job", JOB, "--store", store,
                     "--listen", f"{host.ip}:{NODE_PORT}", "--peers", ",".join(peers),
                     "--socket", str(socket_path), "--memory-limit", memory_limit,
                     "--secret-file", str(secret), "--metrics-port", str(NODE_METRICS_PORT)]
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self) -> None:
        with open(self.log, "ab") as err:
            self.proc = self.host.popen(self.argv, stdout=subprocess.DEVNULL, stderr=err)
        self.starts += 1

    def wait_ready(self, timeout: float = 30) -> None:
        """Until this start's "... trainers on SOCKET" line is in the log."""
        deadline = time.monotonic() + timeout
        while self.log_text().count(" trainers on ") < self.starts:
            if self.proc.poll() is not None:
                raise tbm.TestbedError(f"stoker node on {self.host.name} exited "
                                       f"{self.proc.returncode}: {self.log_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise tbm.TestbedError(f"stoker node on {self.host.name} not ready in "
                                       f"{timeout} s: {self.log_text()[-2000:]}")
            time.sleep(0.05)

    def kill9(self) -> None:
        self.host.kill(self.proc, signal.SIGKILL)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def metrics(self) -> dict[str, float]:
        return metrics(self.host, NODE_METRICS_PORT)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def wait_all_live(daemons: list[Daemon], timeout: float = 30) -> None:
    """Until every daemon sees every peer alive (startup: a peer that was not up yet when the
    first heartbeats went out is marked down until one succeeds)."""
    deadline = time.monotonic() + timeout
    while True:
        live = [d.metrics().get("stoker_node_peers_live") for d in daemons]
        if all(v == len(daemons) for v in live):
            return
        if time.monotonic() > deadline:
            raise tbm.TestbedError(f"peers not all live after {timeout} s: {live}")
        time.sleep(0.2)


def start_job(tb: Testbed, nodes, store_uri: str, secret: Path) -> list[Daemon]:
    peers = [f"{n.ip}:{NODE_PORT}" for n in nodes]
    daemons = [Daemon(n, store_uri, peers, tb.workdir / f"{n.name}.sock",
                      tb.workdir / f"node-{n.name}.log", secret) for n in nodes]
    for d in daemons:
        d.start()
    for d in daemons:
        d.wait_ready()
        wait_for_port(d.host, d.host.ip, NODE_PORT)
    wait_all_live(daemons)
    return daemons


def start_storage(tb: Testbed, storage, dataset: Path, secret: Path) -> subprocess.Popen:
    server = storage.popen([STOKER, "serve", "--listen", f"{storage.ip}:{SERVE_PORT}",
                            "--dataset", f"train={dataset}", "--secret-file", str(secret),
                            "--metrics-port", str(SERVE_METRICS_PORT)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_port(storage, storage.ip, SERVE_PORT)
    wait_for_port(storage, storage.ip, SERVE_METRICS_PORT)
    return server


def served_read_bytes(storage) -> int:
    m = metrics(storage, SERVE_METRICS_PORT)
    return int(m['stoker_serve_answer_bytes_total{type="READ"}'])


def run_trainers(tb: Testbed, nodes, daemons: list[Daemon], uri: str, env: dict, *, seed: int,
                 epoch: int, tag: str, budget: int = 0, window: int = 16,
                 gate: tuple[Path, int] | None = None) -> list[Trainer]:
    trainers = []
    for i, (node, daemon) in enumerate(zip(nodes, daemons)):
        node_env = dict(env, STOKER_NODE=str(daemon.socket))
        for local in range(WORLD // len(nodes)):
            rank = (WORLD // len(nodes)) * i + local
            trainers.append(Trainer(node, uri, rank, world=WORLD, seed=seed, epoch=epoch,
                                    out=tb.workdir / f"{tag}-rank{rank}.json", env=node_env,
                                    budget=budget, window=window, gate=gate))
    return trainers


def node_totals(daemons: list[Daemon]) -> tuple[list[dict], dict[str, float]]:
    per = [d.metrics() for d in daemons]
    keys = ("stoker_node_store_fills_total", "stoker_node_store_bytes_total",
            "stoker_node_peer_fills_total", "stoker_node_peer_bytes_total",
            "stoker_node_peer_failures_total", "stoker_node_trainer_gets_total")
    return per, {k: sum(m[k] for m in per) for k in keys}


def _short(name: str) -> str:
    return name.removeprefix("stoker_node_").removesuffix("_total")


# -- 1. an epoch, and a second one, through three daemons --------------------------------------

def test_epoch_through_node_daemons(tmp_path):
    # 308 files (308 mod 6 = 2: the last round is padded) in ~50 chunks of 64 KiB.
    data = Packed(tmp_path, seed=5150, classes=4, files_per_class=77, min_size=0,
                  max_size=20_000, chunk_size=64 << 10)
    secret = _write_secret(tmp_path)
    env = dict(os.environ, STOKER_SECRET_FILE=str(secret))
    env.pop("STOKER_NODE", None)
    with Testbed("stkt-node-epoch", ["storage", "n1", "n2", "n3"]) as tb:
        storage, nodes = tb["storage"], [tb["n1"], tb["n2"], tb["n3"]]
        start_storage(tb, storage, data.path, secret)
        uri = f"stoker://{storage.ip}:{SERVE_PORT}/train"
        daemons = start_job(tb, nodes, uri, secret)
        logs_at = [len(d.log_text()) for d in daemons]
        served0 = served_read_bytes(storage)
        _, before = node_totals(daemons)
        assert before["stoker_node_store_fills_total"] == 0  # nothing read before a trainer asks

        t0 = time.monotonic()
        trainers = run_trainers(tb, nodes, daemons, uri, env, seed=11, epoch=0, tag="e1")
        results = [t.wait(timeout=120) for t in trainers]
        seconds1 = time.monotonic() - t0
        check_epoch(results, data.want, WORLD)
        per1, after1 = node_totals(daemons)
        served1 = served_read_bytes(storage)
        # A peer marked down (a read or heartbeats failing, say on a starved machine) moves its
        # chunks; whether it happened is in the logs (a heartbeat-down peer logs "is back").
        churn = [d.log_text()[at:] for d, at in zip(daemons, logs_at)]
        churned = any("marked down" in c or "is back" in c for c in churn)
        print(f"\nepoch 1: {seconds1:.1f} s; chunks {data.chunk_count} ({data.chunk_bytes} "
              f"bytes); node totals {  {_short(k): int(v) for k, v in after1.items()} }; "
              f"served by storage {served1 - served0} bytes; peer churn: {churned}")
        for d, m in zip(daemons, per1):
            assert m["stoker_node_trainer_gets_total"] > 0, f"{d.host.name}: daemon not used"
            # No daemon reads a chunk from the store twice (512 MiB holds the whole dataset).
            assert m["stoker_node_store_fills_total"] <= data.chunk_count
        if not churned:
            assert after1["stoker_node_peer_failures_total"] == 0
            # Each chunk left the store exactly once, for the job as a whole...
            assert after1["stoker_node_store_fills_total"] == data.chunk_count
            assert after1["stoker_node_store_bytes_total"] == data.chunk_bytes
            # ... and the others got it from its owner.
            assert after1["stoker_node_peer_fills_total"] > 0
        else:
            assert after1["stoker_node_store_fills_total"] >= data.chunk_count
        # The storage server agrees: chunk bytes went out once, plus metadata for each trainer
        # (version record and segment to open the dataset, the version record again for the
        # daemon's HELLO):
        # no trainer read a chunk past its daemon.
        if not churned:
            assert data.chunk_bytes <= served1 - served0 <= data.chunk_bytes + \
                WORLD * (data.meta_bytes + len(data.manifest))

        # Epoch 2: new trainer processes, the next epoch's order, the same daemons. Every chunk
        # is cached at its owner: the store sends version record and segment to the new
        # trainers and not one chunk.
        logs_at = [len(d.log_text()) for d in daemons]
        t0 = time.monotonic()
        trainers = run_trainers(tb, nodes, daemons, uri, env, seed=11, epoch=1, tag="e2")
        results = [t.wait(timeout=120) for t in trainers]
        seconds2 = time.monotonic() - t0
        check_epoch(results, data.want, WORLD)
        per2, after2 = node_totals(daemons)
        served2 = served_read_bytes(storage)
        churn2 = any("marked down" in d.log_text()[at:] for d, at in zip(daemons, logs_at))
        print(f"epoch 2: {seconds2:.1f} s; node totals "
              f"{  {_short(k): int(v - after1[k]) for k, v in after2.items()} } (delta); "
              f"served by storage {served2 - served1} bytes")
        for d, m1, m2 in zip(daemons, per1, per2):
            assert m2["stoker_node_trainer_gets_total"] > m1["stoker_node_trainer_gets_total"], \
                f"{d.host.name}: daemon not used in epoch 2"
        if not churn2:
            assert after2["stoker_node_store_fills_total"] == \
                after1["stoker_node_store_fills_total"]
            assert served2 - served1 <= WORLD * (data.meta_bytes + len(data.manifest))
        for d in daemons:
            assert d.alive(), d.log_text()[-2000:]


# -- 2. kill -9 of random daemons during an epoch ----------------------------------------------

def _aggregate(trainers: list[Trainer], t: float) -> float:
    """Samples all trainers had read at time t (linear between progress lines)."""
    total = 0.0
    for tr in trainers:
        prog = list(tr.progress)
        prev = (prog[0][0], 0) if prog else (t, 0)
        value = 0.0
        for ts, n in prog:
            if ts >= t:
                if ts > prev[0]:
                    value = prev[1] + (n - prev[1]) * (t - prev[0]) / (ts - prev[0])
                else:
                    value = n
                break
            prev = (ts, n)
        else:
            value = prog[-1][1] if prog else 0
        total += value
    return total


def _recovery_seconds(trainers: list[Trainer], t_kill: float, t_end: float) -> tuple:
    """(pre-kill aggregate samples/s over the 3 s before the kill, seconds from the kill until
    the 1-s aggregate rate is back to >= 90 % of it after its first dip; None if it never got
    back before the epoch ended, 0 if it never dipped)."""
    pre = (_aggregate(trainers, t_kill) - _aggregate(trainers, t_kill - 3)) / 3
    if pre <= 0:
        return pre, None
    t, dipped = t_kill + 0.25, False
    while t <= t_end:
        rate = _aggregate(trainers, t) - _aggregate(trainers, t - 1)
        if rate < 0.9 * pre:
            dipped = True
        elif dipped:
            return pre, t - t_kill
        t += 0.1
    return pre, (0.0 if not dipped else None)


@pytest.mark.slow
def test_kill_node_daemons_during_epoch(tmp_path):
    seed = int(os.environ.get("STOKER_TEST_SEED", random.SystemRandom().randrange(1 << 30)))
    rng = random.Random(seed)
    print(f"\nkill schedule seed {seed} (rerun with STOKER_TEST_SEED={seed})")
    # ~18 MB in ~70 chunks of 256 KiB through links shaped to 10 Mbit/s: an epoch of about
    # 20-25 s, most of it waiting for the store. Small windows (2 chunks) and read budgets keep
    # samples flowing as chunks arrive, so the kills below land in the middle of the reading.
    data = Packed(tmp_path, seed=6060, classes=5, files_per_class=121, min_size=1_000,
                  max_size=60_000, chunk_size=256 << 10)
    secret = _write_secret(tmp_path)
    env = dict(os.environ, STOKER_SECRET_FILE=str(secret))
    env.pop("STOKER_NODE", None)
    with Testbed("stkt-node-kill", ["storage", "n1", "n2", "n3"], rate="10mbit") as tb:
        storage, nodes = tb["storage"], [tb["n1"], tb["n2"], tb["n3"]]
        start_storage(tb, storage, data.path, secret)
        uri = f"stoker://{storage.ip}:{SERVE_PORT}/train"
        daemons = start_job(tb, nodes, uri, secret)
        served0 = served_read_bytes(storage)
        total = WORLD * -(-len(data.want) // WORLD)
        # Three kills of a random daemon each: the first once the job has read a random 3-15 %
        # of the epoch, the others a random 0.3-1.5 s after the previous restart; each victim is
        # restarted (same arguments) a random 1.5-2.5 s after its kill. So that every kill hits
        # a running epoch however fast this machine is, the trainers wait before their last
        # 15 % of samples until the last restart (on a slow machine they never have to).
        first = rng.uniform(0.03, 0.15)
        schedule = [(rng.randrange(len(daemons)), rng.uniform(1.5, 2.5), rng.uniform(0.3, 1.5))
                    for _ in range(3)]
        per_rank = total // WORLD
        gate = tb.workdir / "kills-done"
        t_start = time.time()
        trainers = run_trainers(tb, nodes, daemons, uri, env, seed=seed % 1000, epoch=0,
                                tag="kill", budget=4 << 20, window=2,
                                gate=(gate, int(per_rank * 0.85)))
        deadline = time.monotonic() + 120
        while sum(t.samples_done() for t in trainers) < first * total:
            if all(t.proc.poll() is not None for t in trainers) or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        kills = []
        for victim, down, pause in schedule:
            done_at_kill = sum(t.samples_done() for t in trainers)
            d = daemons[victim]
            t_kill = time.time()
            d.kill9()
            time.sleep(down)
            t_restart = time.time()
            d.start()
            d.wait_ready()
            kills.append({"node": d.host.name, "t": t_kill, "down_s": t_restart - t_kill,
                          "ready_s": time.time() - t_restart, "samples_before": done_at_kill})
            time.sleep(pause)
        gate.touch()
        results = [t.wait(timeout=240) for t in trainers]
        t_end = max(tr.progress[-1][0] for tr in trainers)
        wait_all_live(daemons)  # the restarted daemons rejoined
        _, totals = node_totals(daemons)
        served = served_read_bytes(storage) - served0
        print(f"epoch: {t_end - t_start:.1f} s, {total} samples; dataset {data.chunk_bytes} chunk "
              f"bytes; served by storage {served} bytes ({served / data.chunk_bytes:.2f}x); "
              f"node totals now {  {_short(k): int(v) for k, v in totals.items()} } "
              "(restarted daemons count from their restart)")
        t0 = min(tr.progress[0][0] for tr in trainers)
        timeline = [int(_aggregate(trainers, t0 + i)) for i in range(int(t_end - t0) + 2)]
        print(f"  samples read by the job, per second from the first trainer's start: {timeline}")
        for k in kills:
            pre, rec = _recovery_seconds(trainers, k["t"], t_end)
            rec_s = ("not back before the epoch ended" if rec is None
                     else f"back to >= 90 % after {rec:.1f} s")
            print(f"  kill -9 {k['node']} at {k['t'] - t0:5.1f} s "
                  f"({k['samples_before']}/{total} samples), restarted after "
                  f"{k['down_s']:.1f} s (ready {k['ready_s']:.1f} s later); pre-kill "
                  f"{pre:.0f} samples/s, {rec_s}")
        held = max(r["held_s"] for r in results)
        print(f"  the trainers waited at most {held:.1f} s for the kill schedule to end")
        for d in daemons:
            for line in d.log_text().splitlines():
                if "marked down" in line or "is back" in line:
                    print(f"  [{d.host.name}] {line[:160]}")
        check_epoch(results, data.want, WORLD)
        # Each kill hit a running epoch (else the test proved nothing).
        for k in kills:
            assert k["samples_before"] < total, f"the epoch ended before the kill of {k['node']}"
        for d in daemons:
            assert d.alive(), d.log_text()[-2000:]


# -- 3. hostile peers and trainers; the memory cap ----------------------------------------------

# Raw protocol clients (docs/protocol.md). argv: ip port secret job record_path (the dataset's
# version record, which the daemon exports to its peers under the virtual path MANIFEST). Prints
# one JSON object: per attack, whether and when the daemon closed the connection.
_PEER_ATTACKS = r"""
import hashlib, hmac, json, os, select, socket, struct, sys, time
ip, port, secret, job, manifest_path = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode(), \
    sys.argv[4], sys.argv[5]
manifest = open(manifest_path, "rb").read()
MAGIC = 0x464B5453
HELLO, CHALLENGE, AUTH, WELCOME, READ, DATA, ERROR = 1, 2, 3, 4, 18, 19, 31
_T = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    _T.append(c)
def crc32c(b):
    c = 0xFFFFFFFF
    for x in b:
        c = _T[(c ^ x) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF
assert crc32c(b"123456789") == 0xE3069283
def frame(kind, rid, payload, length=None, bad_crc=False):
    h = struct.pack("<IBBHIII", MAGIC, kind, 0, 0, rid,
                    len(payload) if length is None else length, crc32c(payload) ^ bad_crc)
    return h + struct.pack("<I", crc32c(h)) + payload
def recv_exact(s, n):
    b = b""
    while len(b) < n:
        k = s.recv(n - len(b))
        if not k:
            raise EOFError
        b += k
    return b
def read_frame(s):
    h = recv_exact(s, 24)
    magic, kind, _, _, rid, length, pcrc, hcrc = struct.unpack("<IBBHIIII", h)
    assert magic == MAGIC and hcrc == crc32c(h[:20])
    p = recv_exact(s, length)
    assert pcrc == crc32c(p)
    return kind, p
def string(s):
    return struct.pack("<H", len(s)) + s.encode()
def connect():
    return socket.create_connection((ip, port), timeout=10)
def handshake(s, key):
    cn = os.urandom(32)
    s.sendall(frame(HELLO, 0, struct.pack("<H", 1) + cn))
    kind, p = read_frame(s)
    assert kind == CHALLENGE, kind
    sn, proof = p[2:34], p[34:66]
    server_ok = hmac.compare_digest(
        proof, hmac.new(key, b"stoker/1 server" + cn + sn, hashlib.sha256).digest())
    s.sendall(frame(AUTH, 0, hmac.new(key, b"stoker/1 client" + sn + cn,
                                      hashlib.sha256).digest()))
    return server_ok, read_frame(s)
def closed_within(s, seconds):
    # (closed?, seconds until closed, frame types received before the close)
    t0, kinds = time.monotonic(), []
    end = t0 + seconds
    buf = b""
    while time.monotonic() < end:
        s.settimeout(max(end - time.monotonic(), 0.01))
        try:
            k = s.recv(65536)
        except socket.timeout:
            break
        except (ConnectionResetError, BrokenPipeError):
            return True, time.monotonic() - t0, kinds
        if not k:
            return True, time.monotonic() - t0, kinds
        buf += k
        while len(buf) >= 24 and len(buf) >= 24 + struct.unpack("<I", buf[12:16])[0]:
            kinds.append(buf[4]); buf = buf[24 + struct.unpack("<I", buf[12:16])[0]:]
    return False, time.monotonic() - t0, kinds
def drip(s, data, limit_s):
    # Sends `data` one byte per second until the server closes: (closed, seconds, bytes sent).
    t0 = time.monotonic()
    for i, b in enumerate(data):
        try:
            s.send(bytes([b]))
        except OSError:
            return True, time.monotonic() - t0, i
        r, _, _ = select.select([s], [], [], 1.0)
        if r:
            try:
                got = s.recv(65536)
            except OSError:
                got = b""
            if not got:
                return True, time.monotonic() - t0, i + 1
        if time.monotonic() - t0 > limit_s:
            break
    return False, time.monotonic() - t0, len(data)
def read_manifest_request(rid=1):
    return frame(READ, rid, string(job) + string("MANIFEST") + struct.pack("<QI", 0, len(manifest)))
out = {}
mode = sys.argv[6] if len(sys.argv) > 6 else "quick"
if mode == "quick":
    # Control: a well-behaved raw client with the secret reads MANIFEST, the daemon's version
    # record, byte for byte (proves this client speaks the protocol, so the refusals below are
    # about the attacks).
    s = connect()
    server_ok, (kind, _) = handshake(s, secret)
    s.sendall(read_manifest_request())
    k2, p2 = read_frame(s)
    out["control"] = {"server_proof_ok": server_ok, "welcome": kind == WELCOME,
                      "data": k2 == DATA and p2 == manifest}
    s.close()
    # Garbage instead of a HELLO.
    s = connect(); s.sendall(os.urandom(4096))
    out["garbage"] = closed_within(s, 8); s.close()
    # An oversized frame before authentication (limit 256 bytes): refused by its header.
    s = connect(); s.sendall(frame(HELLO, 0, b"", length=1 << 20))
    out["oversized_hello"] = closed_within(s, 8); s.close()
    # A peer that ignores the server's proof and answers with a wrong one: ERROR, then closed.
    s = connect()
    server_ok, (kind, p) = handshake(s, b"not the secret at all, not at all")
    closed = closed_within(s, 8)
    out["wrong_auth"] = [not server_ok, kind == ERROR, b"authentication failed" in p, closed]
    s.close()
    # Authenticated, then an oversized request frame (limit 128 KiB + 64).
    s = connect(); handshake(s, secret)
    s.sendall(frame(READ, 1, b"", length=16 << 20))
    out["oversized_request"] = closed_within(s, 8); s.close()
    # Authenticated, then a request whose payload fails its CRC.
    s = connect(); handshake(s, secret)
    body = string(job) + string("MANIFEST") + struct.pack("<QI", 0, len(manifest))
    s.sendall(frame(READ, 1, body, bad_crc=True))
    out["corrupt_request"] = closed_within(s, 8); s.close()
    # Slow-loris before authentication: a HELLO, one byte per second (handshake limit 5 s).
    s = connect()
    hello = frame(HELLO, 0, struct.pack("<H", 1) + os.urandom(32))
    out["slowloris_handshake"] = drip(s, hello, limit_s=60)
    s.close()
else:
    # Slow-loris after authentication: a READ request, one byte per second (a begun frame must
    # be complete within 30 s).
    s = connect(); handshake(s, secret)
    out["slowloris_request"] = drip(s, read_manifest_request() * 3, limit_s=60)  # > 30 s at 1 B/s
print(json.dumps(out))
"""

# Hostile clients of the trainer socket. argv: socket record_path chunk_id (a HELLO carries the
# dataset's version record). Prints JSON.
_TRAINER_ATTACKS = r"""
import json, socket, struct, sys, time
path, manifest, chunk = sys.argv[1], open(sys.argv[2], "rb").read(), int(sys.argv[3])
def conn():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(10); s.connect(path); return s
def reply(s):
    try:
        m = s.recv(1 << 17)
    except (ConnectionResetError, socket.timeout):
        return None
    if not m:
        return None
    n = struct.unpack("<H", m[1:3])[0]
    return [m[0], m[3:3 + n].decode()]
def hello(s, man):
    s.send(b"\x01" + struct.pack("<I", len(man)) + man); return reply(s)
out = {}
s = conn(); s.send(b"\x02" + struct.pack("<Q", chunk))          # GET before HELLO
out["get_before_hello"] = [reply(s), reply(s)]                   # an error, then the close
s.close()
s = conn(); out["wrong_manifest"] = hello(s, manifest[:-1] + b"X"); s.close()
s = conn(); s.send(b"\x07" * (150 * 1024))                      # above the 128 KiB limit
out["oversized"] = reply(s); s.close()
s = conn(); out["hello_ok"] = hello(s, manifest)
s.send(b"\x02" + struct.pack("<Q", 0x0123456789ABCDEF)); out["unknown_chunk"] = reply(s)
s.send(b"\x02" + struct.pack("<Q", chunk)); s.close()           # leaves without the answer
s = conn(); s.send(b"")                                          # an empty message
out["empty"] = [reply(s), reply(s)]; s.close()
print(json.dumps(out))
"""

# Polls a daemon every 0.05 s until killed, one JSON line each: its /metrics cache gauges, its
# VmRSS, and the bytes of the memfds it holds open (cached chunks live in memfds, which VmRSS
# does not count unless their pages are touched through a mapping of the daemon's).
_MEMORY_POLLER = r"""
import json, os, re, sys, time, urllib.request
url, pid = sys.argv[1], sys.argv[2]
while True:
    try:
        text = urllib.request.urlopen(url, timeout=5).read().decode()
        m = dict(l.rsplit(" ", 1) for l in text.splitlines() if l and not l.startswith("#"))
        memfd = 0
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("/memfd:"):
                    memfd += os.stat(f"/proc/{pid}/fd/{fd}").st_size
            except OSError:
                pass
        rss = re.search(r"^VmRSS:\s+(\d+) kB", open(f"/proc/{pid}/status").read(), re.M)
        print(json.dumps({"cache": int(m["stoker_node_cache_bytes"]),
                          "capacity": int(m["stoker_node_cache_capacity_bytes"]),
                          "rss": int(rss.group(1)) * 1024, "memfd": memfd}), flush=True)
    except Exception as e:
        print(json.dumps({"error": repr(e)}), flush=True)
    time.sleep(0.05)
"""


@pytest.mark.slow
def test_bad_peers_against_daemon(tmp_path):
    # ~60 MB in 1 MiB chunks, through a daemon capped at 24 MiB: it must evict as it goes.
    data = Packed(tmp_path, seed=7070, classes=4, files_per_class=60, min_size=150_000,
                  max_size=350_000, chunk_size=1 << 20)
    cap = 24 << 20
    assert data.chunk_bytes > 2 * cap
    secret = _write_secret(tmp_path)
    env = dict(os.environ)
    for k in ("STOKER_NODE", "STOKER_SECRET", "STOKER_SECRET_FILE"):
        env.pop(k, None)
    with Testbed("stkt-node-hostile", ["node", "evil"]) as tb:
        node, evil = tb["node"], tb["evil"]
        d = Daemon(node, str(data.path), [f"{node.ip}:{NODE_PORT}"], tb.workdir / "node.sock",
                   tb.workdir / "node.log", secret, memory_limit="24M")
        d.start()
        d.wait_ready()
        wait_for_port(evil, node.ip, NODE_PORT)
        poller = node.popen([sys.executable, "-c", _MEMORY_POLLER,
                             f"http://{node.ip}:{NODE_METRICS_PORT}/metrics", str(d.proc.pid)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        polls: list[dict] = []
        threading.Thread(target=lambda: [polls.append(json.loads(line))
                                         for line in poller.stdout], daemon=True).start()
        peer_args = [node.ip, str(NODE_PORT), SECRET, JOB, str(data.record_path)]
        slow = evil.popen([sys.executable, "-c", _PEER_ATTACKS, *peer_args, "slow"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        # A client with the wrong secret: refused at the handshake, and told why.
        wrong = evil.run([sys.executable, "-c",
                          "import stoker, sys; stoker.Dataset(sys.argv[1])",
                          f"stoker://{node.ip}:{NODE_PORT}/{JOB}"], check=False, timeout=60,
                         env=dict(env, STOKER_SECRET="a wrong secret, long enough"))
        assert wrong.returncode != 0
        assert "secrets differ" in wrong.stderr, wrong.stderr

        attacks = json.loads(evil.run([sys.executable, "-c", _PEER_ATTACKS, *peer_args,
                                       "quick"], timeout=120).stdout)
        print(f"\npeer attacks: {attacks}")
        assert attacks["control"] == {"server_proof_ok": True, "welcome": True, "data": True}
        for name in ("garbage", "oversized_hello", "oversized_request", "corrupt_request"):
            closed, seconds, kinds = attacks[name]
            assert closed, f"{name}: the daemon kept the connection open"
        not_server_ok, got_error, says_auth, (closed, _, _) = attacks["wrong_auth"]
        assert not_server_ok and got_error and says_auth and closed
        closed, seconds, sent = attacks["slowloris_handshake"]
        assert closed and sent < 58, f"slow handshake not dropped: {attacks}"

        chunk_id = data.chunk_ids[0]
        hostile = json.loads(node.run([sys.executable, "-c", _TRAINER_ATTACKS, str(d.socket),
                                       str(data.record_path), str(chunk_id)],
                                      timeout=60).stdout)
        print(f"trainer-socket attacks: {hostile}")
        first, then = hostile["get_before_hello"]
        assert first is not None and first[0] != 0 and "HELLO first" in first[1] and then is None
        assert hostile["wrong_manifest"][0] != 0
        assert "another dataset" in hostile["wrong_manifest"][1]
        assert hostile["oversized"] is None or hostile["oversized"][0] != 0
        assert hostile["hello_ok"][0] == 0
        assert hostile["unknown_chunk"][0] != 0 and "no chunk" in hostile["unknown_chunk"][1]
        assert d.alive(), d.log_text()[-2000:]

        # A legitimate trainer on the daemon's host reads a whole epoch, while the post-auth
        # slow-loris is still dribbling, with the dataset > the daemon's cache.
        # (A small read budget paces the trainer, so the poller sees the cache while it works.)
        trainer = Trainer(node, str(data.path), 0, world=1, seed=3, epoch=0,
                          out=tb.workdir / "legit.json", env=dict(env, STOKER_NODE=str(d.socket)),
                          budget=4 << 20)
        result = trainer.wait(timeout=120)
        check_epoch([result], data.want, 1)

        out, err = slow.communicate(timeout=90)
        tb._forget(slow)
        slow_res = json.loads(out)["slowloris_request"]
        print(f"slow request: {slow_res}")
        closed, seconds, sent = slow_res
        assert closed, f"a request dribbled at 1 byte/s was never dropped: {slow_res} {err}"

        m = d.metrics()
        node.kill(poller, signal.SIGKILL)
        assert d.alive(), d.log_text()[-2000:]
        samples = [p for p in polls if "error" not in p]
        assert len(samples) > 10, polls[:5]
        peak_cache = max(p["cache"] for p in samples)
        peak_rss = max(p["rss"] for p in samples)
        peak_memfd = max(p["memfd"] for p in samples)
        # RSS + memfds over-counts (a memfd page the daemon touched is in both): an upper bound.
        peak_total = max(p["rss"] + p["memfd"] for p in samples)
        largest_chunk = max(c.stat().st_size for c in (data.path / "chunks").iterdir())
        print(f"daemon: {int(m['stoker_node_trainer_gets_total'])} trainer gets, "
              f"{int(m['stoker_node_store_fills_total'])} store fills of {data.chunk_count} "
              f"chunks, {int(m['stoker_node_cache_evictions_total'])} evictions; peak cache "
              f"{peak_cache / 2**20:.1f} MiB of {cap / 2**20:.0f}, peak RSS "
              f"{peak_rss / 2**20:.0f} MiB, peak memfd bytes held {peak_memfd / 2**20:.1f} MiB, "
              f"peak RSS + memfd {peak_total / 2**20:.0f} MiB over {len(samples)} polls "
              f"({sum(p['cache'] > cap // 2 for p in samples)} with the cache over half full); "
              f"epoch {result['seconds']:.1f} s; auth failures "
              f"{int(m['stoker_serve_auth_failures_total'])}, protocol errors "
              f"{int(m['stoker_serve_protocol_errors_total'])}, handshake failures "
              f"{int(m['stoker_serve_handshake_failures_total'])}")
        assert all(p["capacity"] == cap for p in samples)
        assert peak_cache <= cap
        assert m["stoker_node_cache_bytes"] <= cap
        # The memfds the daemon holds are its cache (and chunks in flight): under the cap, give
        # or take one chunk created or closed while the poller walked /proc/PID/fd.
        assert 0 < peak_memfd <= cap + largest_chunk
        assert peak_total < cap + (200 << 20)
        assert m["stoker_node_trainer_gets_total"] > 0
        assert m["stoker_node_cache_evictions_total"] > 0
        assert m["stoker_node_store_fills_total"] >= data.chunk_count
        assert m["stoker_serve_auth_failures_total"] >= 1
        assert m["stoker_serve_protocol_errors_total"] >= 3

