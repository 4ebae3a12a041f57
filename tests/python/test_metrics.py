"""Loader metrics for Prometheus (issue 17 item 3): stoker.serve_metrics serves every loader's
batches, wall time, waiting by stage and starved ratio in the stoker_<component>_* scheme that
`stoker serve` and `stoker node` use; a port in use is a clear error."""
from __future__ import annotations

import time
import urllib.request

import numpy as np
import pytest

import stoker
from conftest import free_port

prometheus_client = pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_loaders_export_their_waiting(tmp_path):
    path = tmp_path / "d.stoker"
    with stoker.Writer(path, columns={"tokens": "tokens:uint16"}, progress=False) as w:
        for _ in range(200):
            w.write({"tokens": np.arange(100, dtype=np.uint16)})
    port = free_port()
    server = stoker.serve_metrics(port, addr="127.0.0.1")
    try:
        def slow(sample):
            time.sleep(0.002)
            return sample

        batches = 0
        for _ in stoker.Loader(path, batch_size=10, transform=slow):
            batches += 1
        for _ in stoker.TokenLoader(path, seq_len=50, batch_size=8):
            time.sleep(0.01)
        got = scrape(port)
        uri = stoker.Dataset(path).uri
        key = (("dataset", uri), ("loader", "Loader"), ("rank", "0"))
        assert got[("stoker_loader_batches_total", key)] == batches
        wall = got[("stoker_loader_step_seconds_total", key)]
        decode = got[("stoker_loader_wait_seconds_total", tuple(sorted(key + (("stage",
                                                                              "decode"),))))]
        assert 0 < decode <= wall
        assert decode > 0.5 * wall  # the slow transform: decoding is to blame
        assert 0.5 < got[("stoker_loader_starved_ratio", key)] <= 1
        tkey = (("dataset", uri), ("loader", "TokenLoader"), ("rank", "0"))
        assert got[("stoker_loader_starved_ratio", tkey)] < 0.5  # it computed 10 ms a batch
        # A second server on the same port: an OSError naming it.
        with pytest.raises(OSError, match=str(port)):
            stoker.serve_metrics(port, addr="127.0.0.1")
    finally:
        server.shutdown()


def test_the_grafana_dashboard_uses_metrics_that_exist():
    """Every metric the dashboard queries is one a loader (above) or `stoker serve` / `stoker
    node` exports (their names are literals in their sources)."""
    import json
    import re
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    dash = json.loads((root / "deploy/grafana/stoker.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    used = {m for e in exprs for m in re.findall(r"stoker_[a-z_]+", e)}
    loader = {"stoker_loader_batches_total", "stoker_loader_step_seconds_total",
              "stoker_loader_wait_seconds_total", "stoker_loader_starved_ratio",
              "stoker_loader_feeder_samples_total", "stoker_loader_feeder_failures_total",
              "stoker_loader_feeder_in_flight", "stoker_loader_feeder_up"}
    sources = "".join(p.read_text() for d in ("src/server", "src/node")
                      for p in (root / d).glob("*.cc"))
    missing = {m for m in used - loader if m not in sources}
    assert not missing, missing
    assert used & loader and used - loader
