"""Traces (issue 17 item 2): stoker.trace / STOKER_TRACE write Chrome trace events (reads,
decodes, waits, loader steps, per thread) that Perfetto opens and that line up with
torch.profiler's traces by baseTimeNanoseconds; `stoker profile` summarizes and plots them; a
trace that cannot be written never stops training."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import stoker


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    d = tmp_path_factory.mktemp("trace")
    images, tokens = d / "img.stoker", d / "tok.stoker"
    from PIL import Image
    rng = np.random.default_rng(0)
    with stoker.Writer(images, columns={"image": "jpeg", "label": "int"}, progress=False) as w:
        for i in range(48):
            buf = io.BytesIO()
            Image.fromarray(rng.integers(0, 255, (60, 80, 3), dtype=np.uint8)).save(buf, "JPEG")
            w.write({"image": buf.getvalue(), "label": i % 4})
    with stoker.Writer(tokens, columns={"tokens": "tokens:uint16"}, progress=False) as w:
        for _ in range(300):
            w.write({"tokens": rng.integers(0, 5000, 200, dtype=np.uint16)})
    return images, tokens


def events(path: Path) -> list[dict]:
    data = json.loads(path.read_text())  # the whole file is valid JSON
    assert abs(data["baseTimeNanoseconds"] - time.time_ns()) < 600e9
    return data["traceEvents"]


def test_a_trace_holds_reads_decodes_waits_and_steps(datasets, tmp_path, stoker_cli):
    pytest.importorskip("torch")
    images, tokens = datasets
    path = tmp_path / "t.json"
    with stoker.trace(path) as t:
        batches = sum(1 for _ in stoker.ImageLoader(images, batch_size=8, size=32, threads=2))
        batches += sum(1 for _ in stoker.Loader(images, batch_size=16))
        batches += sum(1 for _ in stoker.TokenLoader(tokens, seq_len=64, batch_size=4))
    assert t.path == str(path)
    evs = events(path)
    names = {e["name"] for e in evs}
    assert {"decode", "crc", "read", "read chunk", "next batch", "wait batch"} <= names
    steps = [e for e in evs if e["name"] == "next batch"]
    assert len(steps) == batches
    assert all(set(e["args"]) == {"storage", "cache", "decode", "queue", "feeders"} for e in steps)
    decodes = [e for e in evs if e["name"] == "decode"]
    assert len(decodes) == 48 and sorted(e["args"]["sample"] for e in decodes) == list(range(48))
    begins = [e for e in evs if e["ph"] == "b"]
    assert begins and len(begins) == len([e for e in evs if e["ph"] == "e"])
    threads = {e["args"]["name"] for e in evs if e["name"] == "thread_name"}
    assert {"stoker decode", "stoker dispatch", "stoker token reader"} <= threads
    # Each thread's complete events are in time order and do not overlap (Perfetto nests them).
    by_thread: dict[int, list] = {}
    for e in evs:
        if e["ph"] == "X":
            by_thread.setdefault(e["tid"], []).append(e)
    for tid, xs in by_thread.items():
        xs.sort(key=lambda e: e["ts"])
        for a, b in zip(xs, xs[1:]):
            assert b["ts"] >= a["ts"] + a["dur"] - 1e-3 or b["ts"] + b["dur"] <= a["ts"] + \
                a["dur"] + 1e-3, (tid, a, b)  # sequential, or nested (a CRC inside a read)
    # stoker profile: the summary agrees with the trace, and the plot is drawn.
    proc = stoker_cli("profile", path, "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["steps"] == batches and 0 < summary["starved_fraction"] <= 1
    assert summary["events"]["decode"]["count"] == 48
    pytest.importorskip("matplotlib")
    proc = stoker_cli("profile", path, "--plot", tmp_path / "p.png")
    assert proc.returncode == 0, proc.stderr
    assert "loader steps" in proc.stdout
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_stoker_trace_from_the_environment_per_rank(datasets, tmp_path):
    _, tokens = datasets
    script = (f"import stoker\n"
              f"for b in stoker.TokenLoader({str(tokens)!r}, seq_len=64, batch_size=4): pass\n")
    env = dict(os.environ, STOKER_TRACE=str(tmp_path / "t.json"), RANK="1", WORLD_SIZE="2")
    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=120)
    evs = events(tmp_path / "t-rank1.json")  # finished at exit
    assert any(e["name"] == "next batch" for e in evs)
    assert any(e.get("args", {}).get("name", "").startswith("stoker rank 1") for e in evs)


def test_a_trace_that_cannot_be_written_never_stops_training(datasets, tmp_path):
    _, tokens = datasets
    with pytest.raises(OSError, match="nonexistent"):
        stoker.trace("/nonexistent-dir/t.json")
    script = (f"import stoker\n"
              f"n = sum(1 for b in stoker.TokenLoader({str(tokens)!r}, seq_len=64))\n"
              f"print(n)\n")
    env = dict(os.environ, STOKER_TRACE="/nonexistent-dir/t.json")
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and int(proc.stdout) > 0
    assert "not tracing" in proc.stderr and "nonexistent-dir" in proc.stderr


def test_profile_reads_a_cut_trace_and_merges_by_base_time(datasets, tmp_path, stoker_cli):
    _, tokens = datasets
    path = tmp_path / "t.json"
    with stoker.trace(path):
        for _ in stoker.TokenLoader(tokens, seq_len=64, batch_size=4):
            pass
    text = path.read_text()
    cut = tmp_path / "cut.json"
    cut.write_text(text[:len(text) * 2 // 3])  # a killed process leaves no end
    proc = stoker_cli("profile", cut, "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["steps"] > 0
    # Another trace (another rank, torch.profiler) based 1 s later: its ts 0 lands 1 s in.
    base = json.loads(text)["baseTimeNanoseconds"]
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"baseTimeNanoseconds": base + 1_000_000_000, "traceEvents": [
        {"ph": "X", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 5}]}))
    merged = tmp_path / "merged.json"
    proc = stoker_cli("profile", path, "--merge", other, "-o", merged)
    assert proc.returncode == 0, proc.stderr
    evs = json.loads(merged.read_text())["traceEvents"]
    mm = next(e for e in evs if e["name"] == "aten::mm")
    assert mm["ts"] == pytest.approx(1e6)
    bad = stoker_cli("profile", tmp_path / "missing.json")
    assert bad.returncode == 1 and "missing.json" in bad.stderr
    # Under --json, as every stoker command: the error is a document on stdout too.
    bad = stoker_cli("profile", tmp_path / "missing.json", "--json")
    assert bad.returncode == 1
    error = json.loads(bad.stdout)["error"]
    assert error["code"] == "NotFound" and "missing.json" in error["message"]
    (tmp_path / "garbage.json").write_text("not a trace")
    bad = stoker_cli("profile", tmp_path / "garbage.json", "--json")
    assert bad.returncode == 1 and json.loads(bad.stdout)["error"]["code"] == "InvalidArgument"
    bad = stoker_cli("profile", "--json")  # no trace: a usage error, still a document
    assert bad.returncode == 2 and json.loads(bad.stdout)["error"]["code"] == "Usage"


def test_it_lines_up_with_torch_profiler(datasets, tmp_path, stoker_cli):
    torch = pytest.importorskip("torch")
    _, tokens = datasets
    ours, theirs = tmp_path / "stoker.json", tmp_path / "torch.json"
    with stoker.trace(ours), torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for batch in stoker.TokenLoader(tokens, seq_len=64, batch_size=4):
            torch.from_numpy(batch.astype(np.float32)).sum()
    prof.export_chrome_trace(str(theirs))
    assert "baseTimeNanoseconds" in json.loads(theirs.read_text())
    merged = tmp_path / "merged.json"
    proc = stoker_cli("profile", ours, "--merge", theirs, "-o", merged)
    assert proc.returncode == 0, proc.stderr
    evs = [e for e in json.loads(merged.read_text())["traceEvents"] if e.get("ph") == "X"]
    steps = [e for e in evs if e["name"] == "next batch"]
    sums = [e for e in evs if e["name"] == "aten::sum"]
    assert steps and sums
    # On one timeline: torch's ops fall between our first and last step (give or take 50 ms).
    lo, hi = min(e["ts"] for e in steps), max(e["ts"] + e["dur"] for e in steps)
    assert all(lo - 5e4 <= e["ts"] <= hi + 5e4 for e in sums), (lo, hi, sums[:3])
