"""Prometheus metrics of this process's loaders (issue 17): is training waiting for data.

    stoker.serve_metrics(9200)                 # http://host:9200/metrics, or:
    prometheus_client.REGISTRY.register(stoker.metrics.LoaderCollector())

Every loader (Loader, ImageLoader, TokenLoader, over a Mix too) adds each batch to the totals of
its (loader, dataset) pair, labelled with the process's rank (RANK); `stoker serve` and `stoker
node` export theirs on --metrics-port in the same scheme (stoker_<component>_<what>_<unit>):

    stoker_loader_batches_total{loader, dataset, rank}
    stoker_loader_step_seconds_total{loader, dataset, rank}      wall time of the passes (from
                                                                  each pass's first request to
                                                                  its latest batch)
    stoker_loader_wait_seconds_total{loader, dataset, rank, stage}  waiting for batches, by the
                                                                  stage to blame (stoker.stalls)
    stoker_loader_starved_ratio{loader, dataset, rank}           waiting / wall of the latest
                                                                  pass (so far)

An ImageLoader with feeders (`stoker feed`) adds, per feeder ("host:port"):

    stoker_loader_feeder_slices_total{loader, dataset, rank, feeder}       slices it made
    stoker_loader_feeder_samples_total{...}                                their samples
    stoker_loader_feeder_pixel_bytes_total{...}                            image bytes received
    stoker_loader_feeder_failures_total{...}                               slices it failed
                                                                           (made again)
    stoker_loader_feeder_seconds_total{...}                                round trips, summed
    stoker_loader_feeder_in_flight{...}                                    slices it holds now
    stoker_loader_feeder_up{...}                                           1 if its last
                                                                           connection or answer
                                                                           succeeded

Data-starved % over any window is rate(wait_seconds_total) / rate(step_seconds_total) summed
over stages: what deploy/grafana/stoker.json plots. prometheus_client (PyPI) is needed only to
serve or collect them.
"""
from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import Any

STAGES = ("storage", "cache", "decode", "queue", "feeders")


class _Totals:
    __slots__ = ("batches", "step_seconds", "wait", "ratio")

    def __init__(self) -> None:
        self.batches = 0
        self.step_seconds = 0.0
        self.wait = dict.fromkeys(STAGES, 0.0)
        self.ratio = 0.0


_LOCK = threading.Lock()
_TOTALS: dict[tuple[str, str], _Totals] = {}


def record(loader: str, dataset: str, step_seconds: float, split: dict[str, float],
           ratio: float) -> None:
    """One batch of `loader` over `dataset`: the wall time it added to its pass, the waiting by
    stage, and the pass's starved ratio so far (called by stoker.stalls.StallMeter)."""
    with _LOCK:
        t = _TOTALS.get((loader, dataset))
        if t is None:
            t = _TOTALS[(loader, dataset)] = _Totals()
        t.batches += 1
        t.step_seconds += step_seconds
        for stage, seconds in split.items():
            t.wait[stage] += seconds
        t.ratio = ratio


FEEDER_COUNTERS = ("slices", "samples", "pixel_bytes", "failures", "seconds")
_FEEDERS: dict[tuple[str, str, str], dict[str, float]] = {}


def record_feeders(loader: str, dataset: str, feeders: list[dict[str, Any]],
                   seen: dict[str, dict[str, Any]]) -> None:
    """A pass's feeders as its pipeline counts them now (ImageLoader's stats()["feeders"]):
    what each made since `seen` (the same pass's previous call, updated here) is added to the
    totals of (loader, dataset, feeder); in_flight and up are set."""
    with _LOCK:
        for f in feeders:
            before = seen.get(f["address"], {})
            t = _FEEDERS.setdefault((loader, dataset, f["address"]),
                                    dict.fromkeys(FEEDER_COUNTERS + ("in_flight", "up"), 0.0))
            for name in FEEDER_COUNTERS:
                t[name] += f[name] - before.get(name, 0)
            t["in_flight"] = f["in_flight"]
            t["up"] = 1.0 if f["reachable"] else 0.0
            seen[f["address"]] = f


def feeder_snapshot() -> dict[tuple[str, str, str], dict[str, float]]:
    """The feeders' totals so far, per (loader, dataset, feeder)."""
    with _LOCK:
        return {key: dict(t) for key, t in _FEEDERS.items()}


def snapshot() -> dict[tuple[str, str], dict[str, Any]]:
    """The totals so far, per (loader, dataset)."""
    with _LOCK:
        return {key: {"batches": t.batches, "step_seconds": t.step_seconds,
                      "wait_seconds": dict(t.wait), "starved_ratio": t.ratio}
                for key, t in _TOTALS.items()}


class LoaderCollector:
    """A prometheus_client collector of the loaders' metrics (see the module docstring)."""

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
        rank = os.environ.get("RANK", "0")
        labels = ["loader", "dataset", "rank"]
        batches = CounterMetricFamily("stoker_loader_batches", "Batches handed to training.",
                                      labels=labels)
        steps = CounterMetricFamily(
            "stoker_loader_step_seconds",
            "Wall time of the loaders' passes, from each pass's first request to its latest "
            "batch.", labels=labels)
        wait = CounterMetricFamily(
            "stoker_loader_wait_seconds",
            "Time training waited for batches, by the stage that was short.",
            labels=labels + ["stage"])
        ratio = GaugeMetricFamily(
            "stoker_loader_starved_ratio",
            "Waiting / wall time of the latest pass (so far): the data-starved share.",
            labels=labels)
        for (loader, dataset), t in snapshot().items():
            key = [loader, dataset, rank]
            batches.add_metric(key, t["batches"])
            steps.add_metric(key, t["step_seconds"])
            for stage, seconds in t["wait_seconds"].items():
                wait.add_metric(key + [stage], seconds)
            ratio.add_metric(key, t["starved_ratio"])
        yield from (batches, steps, wait, ratio)
        yield from _feeder_families(rank)


def _feeder_families(rank: str) -> Iterator[Any]:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
    labels = ["loader", "dataset", "rank", "feeder"]
    helps = {"slices": "Slices feeders made for this loader.",
             "samples": "Samples of the slices feeders made.",
             "pixel_bytes": "Image bytes received from feeders.",
             "failures": "Slices feeders failed (made again here or by another feeder).",
             "seconds": "Round trips of the slices feeders made, summed."}
    counters = {name: CounterMetricFamily(f"stoker_loader_feeder_{name}", text, labels=labels)
                for name, text in helps.items()}
    in_flight = GaugeMetricFamily("stoker_loader_feeder_in_flight",
                                  "Slices each feeder is making now.", labels=labels)
    up = GaugeMetricFamily("stoker_loader_feeder_up",
                           "1 if the feeder's last connection or answer succeeded.",
                           labels=labels)
    for (loader, dataset, feeder), t in feeder_snapshot().items():
        key = [loader, dataset, rank, feeder]
        for name, family in counters.items():
            family.add_metric(key, t[name])
        in_flight.add_metric(key, t["in_flight"])
        up.add_metric(key, t["up"])
    yield from counters.values()
    yield from (in_flight, up)


def serve_metrics(port: int, addr: str = "0.0.0.0", registry: Any = None) -> Any:
    """Serves the loaders' metrics (and, with `registry`, that registry's) over HTTP at
    http://addr:port/metrics, from a daemon thread. A port in use is an OSError naming it;
    returns the server (its .shutdown() stops it)."""
    try:
        import prometheus_client
    except ImportError as e:
        raise ImportError("serve_metrics needs prometheus_client: pip install "
                          "'stoker[metrics]'") from e
    if registry is None:
        registry = prometheus_client.CollectorRegistry()
    registry.register(LoaderCollector())
    try:
        server, _ = prometheus_client.start_http_server(port, addr=addr, registry=registry)
    except OSError as e:
        raise OSError(e.errno, f"cannot serve metrics on {addr}:{port}: {e.strerror}") from e
    return server
