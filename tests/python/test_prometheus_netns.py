"""Metrics against a real Prometheus (issue 17 item 3): Debian's `prometheus` scrapes a
`stoker serve` storage host, a `stoker node` daemon and a trainer (stoker.serve_metrics) in the
network-namespace testbed, and its HTTP API answers what they did: every target up, the
trainer's batches, the daemon's trainer reads, the server's requests, and the data-starved
share computed the way deploy/grafana/stoker.json computes it."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "netns"))
from testbed import Testbed, netns_unavailable, wait_for_port  # noqa: E402

from test_node_netns import (SERVE_METRICS_PORT, SERVE_PORT, NODE_METRICS_PORT,  # noqa: E402
                             Packed, _node_unavailable, _write_secret, start_job,
                             start_storage)

PROMETHEUS = shutil.which("prometheus")
PROM_PORT, TRAINER_METRICS_PORT = 9090, 9200

_REASON = (netns_unavailable() or _node_unavailable()
           or (None if PROMETHEUS else "no prometheus binary (apt-get install prometheus)"))
pytestmark = [pytest.mark.netns, pytest.mark.skipif(_REASON is not None, reason=_REASON or "")]

_TRAINER = textwrap.dedent("""
    import json, sys, time
    import stoker
    uri, ip, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    server = stoker.serve_metrics(port, addr=ip)
    loader = stoker.Loader(uri, batch_size=16, seed=1)
    batches = sum(1 for _ in loader)
    print(json.dumps({"batches": batches, "stats": loader.stats()}), flush=True)
    time.sleep(120)  # scraped until the test stops it
    """)

_QUERY = textwrap.dedent("""
    import json, sys, urllib.parse, urllib.request
    url = sys.argv[1] + "/api/v1/query?" + urllib.parse.urlencode({"query": sys.argv[2]})
    print(urllib.request.urlopen(url, timeout=10).read().decode())
    """)


def query(host, expr: str) -> list[dict]:
    out = host.python(_QUERY, f"http://{host.ip}:{PROM_PORT}", expr, timeout=30).stdout
    reply = json.loads(out)
    assert reply["status"] == "success", reply
    return reply["data"]["result"]


def test_prometheus_scrapes_server_node_and_trainer(tmp_path):
    data = Packed(tmp_path, seed=77, classes=3, files_per_class=60, min_size=0,
                  max_size=20_000, chunk_size=64 << 10)
    secret = _write_secret(tmp_path)
    with Testbed("stkt-prom", ["storage", "n1"]) as tb:
        storage, n1 = tb["storage"], tb["n1"]
        start_storage(tb, storage, data.path, secret)
        uri = f"stoker://{storage.ip}:{SERVE_PORT}/train"
        (daemon,) = start_job(tb, [n1], uri, secret)
        env = dict(os.environ, STOKER_SECRET_FILE=str(secret), STOKER_NODE=str(daemon.socket))
        trainer = n1.popen([sys.executable, "-c", _TRAINER, uri, n1.ip,
                            str(TRAINER_METRICS_PORT)], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
        config = tmp_path / "prometheus.yml"
        config.write_text(textwrap.dedent(f"""
            global:
              scrape_interval: 1s
              scrape_timeout: 1s
            scrape_configs:
              - job_name: serve
                static_configs: [{{targets: ["{storage.ip}:{SERVE_METRICS_PORT}"]}}]
              - job_name: node
                static_configs: [{{targets: ["{n1.ip}:{NODE_METRICS_PORT}"]}}]
              - job_name: trainer
                static_configs: [{{targets: ["{n1.ip}:{TRAINER_METRICS_PORT}"]}}]
            """))
        prom = storage.popen([PROMETHEUS, f"--config.file={config}",
                              f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                              f"--web.listen-address={storage.ip}:{PROM_PORT}"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_port(storage, storage.ip, PROM_PORT, timeout=30)
        line = trainer.stdout.readline()
        assert line, trainer.stderr.read()
        done = json.loads(line)
        assert done["batches"] > 0
        # Until Prometheus has scraped all three after the epoch (1 s interval).
        deadline = time.monotonic() + 30
        while True:
            up = {r["metric"]["job"]: r["value"][1] for r in query(storage, "up")}
            batches = query(storage, "sum(stoker_loader_batches_total)")
            if (up == {"serve": "1", "node": "1", "trainer": "1"} and batches
                    and float(batches[0]["value"][1]) == done["batches"]):
                break
            assert time.monotonic() < deadline, (up, batches)
            time.sleep(0.5)
        gets = query(storage, "sum(stoker_node_trainer_gets_total)")
        assert float(gets[0]["value"][1]) > 0  # the trainer read through the job cache
        requests = query(storage, "sum(stoker_serve_requests_total)")
        assert float(requests[0]["value"][1]) > 0
        # The dashboard's data-starved share, from the totals (no rate window needed).
        starved = query(storage, "sum(stoker_loader_wait_seconds_total) / "
                                 "sum(stoker_loader_step_seconds_total)")
        assert float(starved[0]["value"][1]) == pytest.approx(
            done["stats"]["starved_fraction"], rel=1e-6)
        stages = {r["metric"]["stage"] for r in query(storage, "stoker_loader_wait_seconds_total")}
        assert stages == {"storage", "cache", "decode", "queue", "feeders"}
        storage.kill(prom)
        n1.kill(trainer)
