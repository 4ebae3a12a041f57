"""`stoker profile trace.json [--plot out.png] [--merge other.json -o merged.json]`: what a
trace of stoker (stoker.trace, STOKER_TRACE) says.

The summary: the run's span, how much of it the training loop waited for batches (the loaders'
"next batch" events) and which stage it blamed, and per kind of event (reads, CRC checks,
decodes, waits) how many there were and the time they took, per thread. --plot draws, over the
run, each step's time (from one batch to the next) and the part of it spent waiting for the
batch (matplotlib). --merge aligns other Chrome traces (torch.profiler's, other ranks') by their
"baseTimeNanoseconds" and writes one file that Perfetto opens.

A trace cut short (the process was killed) is read up to its last whole event.
"""
from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from ._cli import Parser, error_code, fail
from .metrics import STAGES


def load(path: str | Path) -> dict[str, Any]:
    """A Chrome trace (object form), repaired if its end is missing."""
    text = Path(path).read_text()
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        # Cut short: keep the events up to the last complete one.
        end = text.rfind("}")
        while end > 0:
            try:
                data = json.loads(text[:end + 1] + "\n]}")
                break
            except json.JSONDecodeError:
                end = text.rfind("}", 0, end)
        else:
            raise ValueError(f"{path}: not a Chrome trace") from None
    if isinstance(data, list):
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise ValueError(f"{path}: not a Chrome trace (no traceEvents)")
    return data


def summarize(data: dict[str, Any]) -> dict[str, Any]:
    """The figures the summary prints (see the module docstring)."""
    events = data["traceEvents"]
    complete = [e for e in events if e.get("ph") == "X"]
    threads = {(e.get("pid"), e.get("tid")): e["args"]["name"] for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name"}
    steps = sorted((e for e in complete if e.get("name") == "next batch"),
                   key=lambda e: e["ts"])
    span_start = min((e["ts"] for e in complete), default=0.0)
    span_end = max((e["ts"] + e["dur"] for e in complete), default=0.0)
    out: dict[str, Any] = {"seconds": (span_end - span_start) / 1e6, "steps": len(steps)}
    if steps:
        wall = steps[-1]["ts"] + steps[-1]["dur"] - steps[0]["ts"]
        waiting = sum(e["dur"] for e in steps)
        out["starved_fraction"] = waiting / wall if wall > 0 else 0.0
        out["waiting_seconds"] = waiting / 1e6
        out["stall_seconds"] = {s: sum(e.get("args", {}).get(s, 0.0) for e in steps) / 1e3
                                for s in STAGES}
    kinds: dict[str, dict[str, Any]] = defaultdict(
        lambda: {"count": 0, "seconds": 0.0, "threads": defaultdict(float)})
    for e in complete:
        k = kinds[e["name"]]
        k["count"] += 1
        k["seconds"] += e["dur"] / 1e6
        k["threads"][threads.get((e.get("pid"), e.get("tid")), str(e.get("tid")))] += \
            e["dur"] / 1e6
    reads = [e for e in events if e.get("ph") == "b" and e.get("name") == "read"]
    if reads:
        kinds["read"]["count"] += len(reads)
    out["events"] = {name: {"count": k["count"], "seconds": k["seconds"],
                            "threads": dict(k["threads"])} for name, k in kinds.items()}
    return out


def print_summary(path: str, s: dict[str, Any]) -> None:
    print(f"{path}: {s['seconds']:.3f} s traced, {s['steps']} loader steps")
    if s["steps"]:
        print(f"  the training loop waited {s['waiting_seconds']:.3f} s for batches: "
              f"{100 * s['starved_fraction']:.1f} % of the time between its first and last")
        total = sum(s["stall_seconds"].values()) or 1.0
        for stage, seconds in sorted(s["stall_seconds"].items(), key=lambda kv: -kv[1]):
            print(f"    {stage:8s} {seconds:9.3f} s  {100 * seconds / total:5.1f} %")
    print("  events:")
    for name, k in sorted(s["events"].items(), key=lambda kv: -kv[1]["seconds"]):
        threads = ", ".join(f"{t} {v:.3f} s" for t, v in
                            sorted(k["threads"].items(), key=lambda kv: -kv[1])[:4])
        print(f"    {name:12s} {k['count']:8d}  {k['seconds']:9.3f} s  {threads}")


def plot(data: dict[str, Any], out: str) -> None:
    """Step time and waiting per step over the run (matplotlib, no display needed)."""
    try:
        import matplotlib
    except ImportError as e:
        raise RuntimeError("--plot needs matplotlib: pip install 'stoker[plot]'") from e
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    steps = sorted((e for e in data["traceEvents"]
                    if e.get("ph") == "X" and e.get("name") == "next batch"),
                   key=lambda e: e["ts"])
    if not steps:
        raise ValueError("the trace has no loader steps ('next batch' events) to plot")
    t0 = steps[0]["ts"]
    ends = [e["ts"] + e["dur"] for e in steps]
    x = [(end - t0) / 1e6 for end in ends]
    step_ms = [(ends[i] - (ends[i - 1] if i else steps[0]["ts"])) / 1e3 for i in range(len(ends))]
    wait_ms = [e["dur"] / 1e3 for e in steps]
    fig, ax = plt.subplots(figsize=(10, 4))
    ax.plot(x, step_ms, label="step time (batch to batch)", linewidth=1)
    ax.fill_between(x, wait_ms, step=None, alpha=0.5, label="waiting for the batch")
    ax.set_xlabel("seconds into the run")
    ax.set_ylabel("milliseconds")
    ax.set_title("stoker: step time vs waiting for data")
    ax.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def merge(paths: list[str], out: str) -> None:
    """One trace of several, aligned by their baseTimeNanoseconds (the earliest becomes 0)."""
    traces = [load(p) for p in paths]
    bases = [int(t.get("baseTimeNanoseconds", 0)) for t in traces]
    if any(b == 0 for b in bases):
        missing = [p for p, b in zip(paths, bases, strict=True) if b == 0]
        raise ValueError(f"{', '.join(missing)}: no baseTimeNanoseconds to align by")
    base = min(bases)
    events = []
    for t, b in zip(traces, bases, strict=True):
        shift = (b - base) / 1e3  # microseconds
        for e in t["traceEvents"]:
            if "ts" in e:
                e = dict(e, ts=float(e["ts"]) + shift)
            events.append(e)
    Path(out).write_text(json.dumps({"displayTimeUnit": "ms", "baseTimeNanoseconds": base,
                                     "traceEvents": events}))


def main(argv: list[str]) -> int:
    p = Parser(prog="stoker profile", description=__doc__.split("\n\n")[0])
    p.add_argument("trace")
    p.add_argument("--plot", metavar="OUT.png")
    p.add_argument("--merge", metavar="OTHER.json", action="append", default=[],
                   help="align these traces with TRACE by their baseTimeNanoseconds")
    p.add_argument("-o", "--output", metavar="MERGED.json", help="where --merge writes")
    p.add_argument("--json", action="store_true", help="the summary as JSON")
    a = p.parse_args(argv)
    try:
        data = load(a.trace)
        if a.merge:
            if not a.output:
                p.error("--merge needs -o MERGED.json")
            merge([a.trace, *a.merge], a.output)
        summary = summarize(data)
        if a.json:
            print(json.dumps(summary))
        else:
            print_summary(a.trace, summary)
        if a.plot:
            plot(data, a.plot)
    except (OSError, ValueError, RuntimeError) as e:
        return fail("profile", error_code(e), str(e), a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
