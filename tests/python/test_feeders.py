"""stoker.ImageLoader(feeders=...) (issue 39, decision 0013): other machines' CPUs make part of
every batch, and what the loader yields is byte for byte what it yields alone — with feeders
that answer, that are killed (kill -9) or stopped (SIGSTOP) mid-pass, or that belong to another
job. The feeders are real `stoker feed` processes."""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

import stoker

pytest.importorskip("torch")  # ImageLoader yields torch tensors

SECRET = b"the feeders test's secret, 32 b."


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> str:
    from test_image_loader import write_photo_tree
    root = tmp_path_factory.mktemp("feeders")
    write_photo_tree(root / "src", 90, extra={"c0/cut.jpg": b"\xff\xd8\xff\xe0 truncated"})
    stoker.pack(str(root / "src"), str(root / "ds"), progress=False)
    return str(root / "ds")


@pytest.fixture
def secret_env(tmp_path, monkeypatch):
    path = tmp_path / "job.secret"
    path.write_bytes(SECRET + b"\n")
    path.chmod(0o600)
    monkeypatch.setenv("STOKER_SECRET_FILE", str(path))
    monkeypatch.delenv("STOKER_SECRET", raising=False)
    monkeypatch.delenv("STOKER_FEEDERS", raising=False)
    return path


class Feeders:
    """`stoker feed` processes on loopback, stopped at the end of the test."""

    def __init__(self, exe: str, tmp_path) -> None:
        self.exe, self.tmp_path, self.procs = exe, tmp_path, []

    def start(self, secret=None, announce=None, extra=(), env=None
              ) -> tuple[subprocess.Popen, str, int]:
        secret = secret or os.environ["STOKER_SECRET_FILE"]
        args = [self.exe, "feed", "--job", "j", "--listen", "127.0.0.1:0", "--secret-file",
                str(secret), "--threads", "1", "--metrics-port", "0", "--json", *extra]
        if announce:
            args += ["--announce", str(announce)]
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env)
        line = proc.stdout.readline()
        assert line, f"stoker feed exited {proc.wait()}: {proc.stderr.read()}"
        ready = json.loads(line)
        self.procs.append(proc)
        return proc, ready["listening"], ready["metrics_port"]

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
            proc.wait()


@pytest.fixture
def feeders(stoker_exe, tmp_path, secret_env):
    f = Feeders(stoker_exe, tmp_path)
    yield f
    f.stop()


def slices_made(metrics_port: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read()
    for line in text.decode().splitlines():
        if line.startswith("stoker_feed_slices_total "):
            return float(line.split()[1])
    raise AssertionError("no stoker_feed_slices_total")


def passes(photos: str, feeders=None, during=None, **options):
    """Every batch of one pass (epoch 1) as numpy arrays, and the loader's stats; `during(i)`
    runs after batch i."""
    kwargs = dict(batch_size=8, size=40, seed=5, on_error="skip", threads=1, pin_memory=False)
    kwargs.update(options)
    loader = stoker.ImageLoader(photos, feeders=feeders, **kwargs)
    loader.set_epoch(1)
    out = []
    for i, (images, labels) in enumerate(loader):
        out.append((images.numpy().copy(), labels.numpy().copy()))
        if during:
            during(i)
    return out, loader.stats(), loader.errors


def assert_same(got, want) -> None:
    assert len(got) == len(want)
    for i, ((gi, gl), (wi, wl)) in enumerate(zip(got, want, strict=True)):
        assert np.array_equal(gi, wi), f"batch {i}: images differ"
        assert np.array_equal(gl, wl), f"batch {i}: labels differ"


def test_batches_made_with_feeders_are_the_local_ones(photos, feeders):
    local, _, local_errors = passes(photos)
    (_, a, _), (_, b, _) = feeders.start(), feeders.start()
    fed, stats, errors = passes(photos, feeders=[a, b])
    assert_same(fed, local)
    assert errors == local_errors and len(errors) == 1 and "cut.jpg" in errors[0][2]
    made = {f["address"]: f["samples"] for f in stats["feeders"]}
    assert set(made) == {a, b} and sum(made.values()) > 0, stats["feeders"]
    # The same counts in Prometheus, labelled by feeder (what deploy/grafana/stoker.json plots).
    exported = {}
    for family in stoker.metrics.LoaderCollector().collect():
        for sample in family.samples:
            if sample.name.startswith("stoker_loader_feeder_"):
                exported[(sample.name, sample.labels["feeder"])] = sample.value
    for address, samples in made.items():
        assert exported[("stoker_loader_feeder_samples_total", address)] == samples
        assert exported[("stoker_loader_feeder_up", address)] == 1
        assert exported[("stoker_loader_feeder_in_flight", address)] == 0
        assert ("stoker_loader_feeder_failures_total", address) in exported
    # uint8 NHWC, as the wire carries it, and the validation transform.
    for opts in (dict(dtype="uint8", layout="NHWC"), dict(train=False)):
        assert_same(passes(photos, feeders=f"{a},{b}", **opts)[0], passes(photos, **opts)[0])


def test_feeders_from_the_environment_and_an_announce_file(photos, feeders, tmp_path,
                                                           monkeypatch):
    local, _, _ = passes(photos)
    announce = tmp_path / "feeders.txt"
    feeders.start(announce=announce)
    feeders.start(announce=announce)
    lines = announce.read_text().split()
    assert len(lines) == 2 and all(line.startswith("127.0.0.1:") for line in lines)
    fed, stats, _ = passes(photos, feeders=announce)
    assert_same(fed, local)
    assert len(stats["feeders"]) == 2 and sum(f["samples"] for f in stats["feeders"]) > 0
    monkeypatch.setenv("STOKER_FEEDERS", str(announce))
    fed, stats, _ = passes(photos)
    assert_same(fed, local)
    assert len(stats["feeders"]) == 2


def test_a_feeder_killed_mid_pass_costs_only_time(photos, feeders):
    local, _, _ = passes(photos)
    proc, a, metrics = feeders.start()
    _, b, _ = feeders.start()

    def kill(i):
        if i == 1:
            proc.send_signal(signal.SIGKILL)
            proc.wait()

    fed, stats, _ = passes(photos, feeders=[a, b], during=kill)
    assert_same(fed, local)
    killed, alive = stats["feeders"]
    assert killed["failures"] >= 1 and not killed["reachable"], killed
    assert alive["samples"] > 0 and alive["failures"] == 0, alive


def stop_once_it_made_a_slice(proc, metrics):
    """SIGSTOPs a feeder once it has made a slice, so that its deadline follows its pace."""
    deadline = time.monotonic() + 60
    while slices_made(metrics) < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGSTOP)


def test_a_stopped_feeder_is_hedged_past(photos, feeders):
    local, _, _ = passes(photos)
    proc, a, metrics = feeders.start()
    fed, stats, _ = passes(photos, feeders=[a],
                           during=lambda i: i == 1 and stop_once_it_made_a_slice(proc, metrics))
    proc.send_signal(signal.SIGCONT)
    assert_same(fed, local)
    # The slices it held were offered again and made here; the pass did not wait for it (it
    # would hang otherwise), and the wait is blamed on the feeders.
    assert stats["hedged_slices"] >= 1, stats
    assert stats["stall_seconds"]["feeders"] > 0, stats["stall_seconds"]


def test_a_feeder_paused_briefly_stays_in_the_job(photos, feeders):
    local, _, _ = passes(photos, batch_size=4)
    proc, a, metrics = feeders.start()
    marks = {}

    def pause(i):
        # Stopped after batch 1 for 2 s (past its hedge deadline, 1 s; before the give-up one,
        # 5 s) while training goes on, a step every 0.15 s.
        if i == 1:
            stop_once_it_made_a_slice(proc, metrics)
            marks["stopped"] = time.monotonic()
        elif "stopped" in marks and "before" not in marks and \
                time.monotonic() - marks["stopped"] >= 2:
            proc.send_signal(signal.SIGCONT)
            marks["before"] = slices_made(metrics)
        time.sleep(0.15)

    fed, stats, _ = passes(photos, feeders=[a], during=pause, batch_size=4)
    assert "before" in marks, "the pass ended before the pause did"
    assert_same(fed, local)
    feeder = stats["feeders"][0]
    assert stats["hedged_slices"] >= 1 and feeder["failures"] == 0, stats
    assert slices_made(metrics) > marks["before"], "the feeder made nothing after its pause"


def test_another_jobs_feeder_is_refused_and_warned_about_once(photos, feeders, tmp_path,
                                                               caplog):
    other = tmp_path / "other.secret"
    other.write_bytes(b"another job's secret of 32 bytes")
    other.chmod(0o600)
    _, a, _ = feeders.start(secret=other)
    local, _, _ = passes(photos)
    with caplog.at_level(logging.WARNING, logger="stoker"):
        fed, stats, _ = passes(photos, feeders=[a])
        time.sleep(2 * stoker._log.POLL_S)  # the library's lines reach logging in a thread
        stoker._log._drain()
    assert_same(fed, local)
    assert stats["feeders"][0]["samples"] == 0 and not stats["feeders"][0]["reachable"]
    warned = [r.getMessage() for r in caplog.records if a in r.getMessage()]
    assert len(warned) == 1 and "PermissionDenied" in warned[0], warned


def test_elastic_resume_is_unchanged_by_feeders(photos, feeders):
    """Two ranks stop after 3 batches; three ranks resume from rank 0's state. With feeders,
    every batch of every rank, before and after, is the one made without them."""
    _, a, _ = feeders.start()

    def job(feeders_list):
        def loader(rank, world):
            return stoker.ImageLoader(photos, 4, size=32, seed=9, threads=1, pin_memory=False,
                                      on_error="skip",
                                      rank=rank, world_size=world, feeders=feeders_list)
        out, ranks = [], [loader(r, 2) for r in range(2)]
        for ldr in ranks:
            it = iter(ldr)
            out += [next(it)[0].numpy().copy() for _ in range(3)]
        state = ranks[0].state_dict()
        for r in range(3):
            resumed = loader(r, 3)
            resumed.load_state_dict(state)
            out += [x.numpy().copy() for x, _ in resumed]
        return out

    fed, local = job([a]), job([])
    assert len(fed) == len(local)
    assert all(np.array_equal(f, w) for f, w in zip(fed, local, strict=True))


def metric(metrics_port: int, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read()
    values = [float(line.split()[1]) for line in text.decode().splitlines()
              if line.startswith(name + " ")]
    assert values, f"no {name} on port {metrics_port}"
    return values[0]


def test_a_feeder_can_be_its_own_member_of_the_job_cache(photos, feeders, stoker_exe, tmp_path):
    """`stoker feed --store --rendezvous` runs the job-cache daemon inside the feeder (the job's
    one daemon here, on loopback; test_feeders_netns.py has three, with --peers): its chunks
    come through the cache, whose counters are on the feeder's /metrics and in its last JSON
    line; the socket's private directory goes with the feeder."""
    import socket as sockets
    with sockets.socket() as s:
        s.bind(("127.0.0.1", 0))
        cache = f"127.0.0.1:{s.getsockname()[1]}"
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    proc, address, metrics_port = feeders.start(
        extra=["--store", photos, "--rendezvous", str(tmp_path / "daemons.txt"), "--expect", "1",
               "--cache-listen", cache],
        env=dict(os.environ, TMPDIR=str(scratch)))
    assert [p.name for p in scratch.iterdir()][0].startswith("stoker-feed-")
    fed, stats, _ = passes(photos, feeders=[address])
    assert_same(fed, passes(photos)[0])
    assert stats["feeders"][0]["samples"] > 0, stats["feeders"]
    chunks = len(list((Path(photos) / "chunks").iterdir()))
    assert metric(metrics_port, "stoker_node_store_fills_total") == chunks
    read = metric(metrics_port, "stoker_node_trainer_gets_total")
    assert read >= chunks
    proc.send_signal(signal.SIGTERM)
    end = json.loads(proc.communicate(timeout=30)[0].strip().splitlines()[-1])
    assert end["cache"]["chunks_read"] == read and end["cache"]["store_fills"] == chunks, end
    assert not list(scratch.iterdir())
    assert (tmp_path / "daemons.txt").read_text().split() == [cache]
    # The cache needs the job's dataset, and one way of reading through it.
    for extra, error in ((["--peers", cache], "--store"),
                         (["--peers", cache, "--store", photos, "--node", "/x.sock"], "--node"),
                         (["--store", photos], "--peers or --rendezvous")):
        bad = subprocess.run([stoker_exe, "feed", "--job", "j", "--listen", "127.0.0.1:0",
                              *extra], capture_output=True, text=True, timeout=30)
        assert bad.returncode != 0 and error in bad.stderr, bad.stderr


def test_a_feeder_whose_cache_never_forms_still_feeds(photos, feeders, stoker_exe, tmp_path):
    """A rendezvous that times out (a member of the job cache never came) leaves the feeder
    feeding from the store, warned; while it waits, SIGTERM stops it."""
    import socket as sockets
    with sockets.socket() as s:
        s.bind(("127.0.0.1", 0))
        cache = f"127.0.0.1:{s.getsockname()[1]}"
    rendezvous = ["--store", photos, "--cache-listen", cache, "--expect", "2"]
    waiting = subprocess.Popen(
        [stoker_exe, "feed", "--job", "j", "--listen", "127.0.0.1:0", *rendezvous,
         "--rendezvous", str(tmp_path / "never.txt")], stderr=subprocess.PIPE, text=True)
    assert "waiting for 2 daemon(s)" in waiting.stderr.readline()
    waiting.send_signal(signal.SIGTERM)
    assert waiting.wait(timeout=10) != 0  # stopped in the rendezvous, not minutes later
    proc, address, _ = feeders.start(extra=[*rendezvous, "--rendezvous",
                                            str(tmp_path / "alone.txt"),
                                            "--rendezvous-timeout", "0.5"])
    fed, stats, _ = passes(photos, feeders=[address])
    assert_same(fed, passes(photos)[0])
    assert stats["feeders"][0]["samples"] > 0, stats["feeders"]
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert "1 of 2 daemons" in err and "feeding without it" in err, err
    assert "cache" not in json.loads(out.strip().splitlines()[-1])


def test_an_unreachable_feeder_and_a_full_one_cost_only_time(photos, feeders, caplog):
    """A feeder nobody listens at (warned about once; the trainer makes its share) and one whose
    --memory-limit is below one slice's images (it sheds every slice: ResourceExhausted; the
    trainer makes them): the batches are the local ones."""
    import socket as sockets
    with sockets.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    _, full, metrics_port = feeders.start(extra=["--memory-limit", "1K"])
    local, _, _ = passes(photos)
    with caplog.at_level(logging.WARNING, logger="stoker"):
        fed, stats, _ = passes(photos, feeders=[dead, full])
        time.sleep(2 * stoker._log.POLL_S)  # the library's lines reach logging in a thread
        stoker._log._drain()
    assert_same(fed, local)
    by = {f["address"]: f for f in stats["feeders"]}
    assert by[dead]["samples"] == 0 and not by[dead]["reachable"], by
    assert by[full]["samples"] == 0 and by[full]["failures"] >= 1, by
    assert metric(metrics_port, "stoker_feed_refused_total") >= 1
    for address, why in ((dead, "Unavailable"), (full, "ResourceExhausted")):
        warned = [r.getMessage() for r in caplog.records if address in r.getMessage()]
        assert len(warned) == 1 and why in warned[0], warned


def test_feeders_refuse_what_they_cannot_serve(photos, feeders, monkeypatch):
    with pytest.raises(ValueError, match="host|port|address"):
        list(stoker.ImageLoader(photos, batch_size=8, feeders=["127.0.0.1:notaport"]))
    monkeypatch.delenv("STOKER_SECRET_FILE")
    with pytest.raises(ValueError, match="secret"):
        stoker.ImageLoader(photos, batch_size=8, feeders=["127.0.0.1:7072"])
