"""stoker.optimize (issue 16 item 2): fn over inputs in worker processes into one column dataset,
group by group, resumable after a crash, shareable between machines as parts."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import stoker


def square(i: int) -> dict:
    return {"i": i, "sq": i * i, "vec": np.full(3, i, dtype=np.float32), "pid": os.getpid()}


def pairs(i: int):
    yield {"i": 2 * i, "sq": 0, "vec": np.zeros(3, np.float32), "pid": 0}
    yield {"i": 2 * i + 1, "sq": 0, "vec": np.zeros(3, np.float32), "pid": 0}


def rows(ds) -> list[dict]:
    return [ds[j] for j in range(len(ds))]


def test_workers_write_one_dataset(tmp_path):
    out = tmp_path / "o.stoker"
    r = stoker.optimize(square, range(250), out, num_workers=2, group_size=40, progress=False)
    assert r["groups"] == 7 and r["samples"] == 250 and r["groups_skipped"] == 0
    ds = stoker.Dataset(out)
    assert ds.columns == {"i": "int", "pid": "int", "sq": "int", "vec": "ndarray:float32"}
    got = rows(ds)
    assert sorted(x["i"] for x in got) == list(range(250))
    assert all(x["sq"] == x["i"] ** 2 and x["vec"].tolist() == [x["i"]] * 3 for x in got)
    assert len({x["pid"] for x in got}) >= 2  # really several processes
    assert ds.version == 7  # one atomic append per group
    assert sorted(ds.listdir("")) == [f"group-{g:06d}" for g in range(7)]
    # Run again: everything is there, nothing is redone.
    again = stoker.optimize(square, range(250), out, num_workers=2, group_size=40,
                            progress=False)
    assert again["groups"] == 0 and again["groups_skipped"] == 7
    assert stoker.Dataset(out).version == 7


def test_generators_and_parts(tmp_path):
    out = tmp_path / "p.stoker"
    for k in range(3):  # three "machines", one after another here
        stoker.optimize(pairs, range(100), out, num_workers=1, group_size=10, part=(k, 3),
                        progress=False)
    assert sorted(x["i"] for x in rows(stoker.Dataset(out))) == list(range(200))
    with pytest.raises(ValueError, match="part"):
        stoker.optimize(pairs, range(3), tmp_path / "x", part=(3, 3))


def test_a_killed_run_resumes_where_it_stopped(tmp_path):
    out = tmp_path / "k.stoker"
    script = textwrap.dedent(f"""
        import sys, time, stoker
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_optimize import slow
        stoker.optimize(slow, range(60), {str(out)!r}, num_workers=1, group_size=10,
                        progress=False)
        """)
    proc = subprocess.Popen([sys.executable, "-c", script])
    # Wait until some groups are published, then kill it mid-group.
    import time
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if stoker.Dataset(out).version >= 2:
                break
        except FileNotFoundError:
            pass
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    ds = stoker.Dataset(out)
    kept = ds.version
    assert 2 <= kept < 6 and len(ds) == 10 * kept  # whole groups only
    r = stoker.optimize(slow, range(60), out, num_workers=1, group_size=10, progress=False)
    assert r["groups_skipped"] == kept and r["groups"] == 6 - kept
    assert sorted(x["i"] for x in rows(stoker.Dataset(out))) == list(range(60))


def slow(i: int) -> dict:
    import time
    time.sleep(0.02)
    return {"i": i}


def test_bad_samples_stop_with_a_clear_error_and_publish_nothing_of_that_group(tmp_path):
    out = tmp_path / "b.stoker"
    with pytest.raises(TypeError, match="returned int: it must return a sample dict"):
        stoker.optimize(three, range(3), out, num_workers=1, progress=False)
    with pytest.raises(TypeError, match="sets append"):
        stoker.optimize(square, range(3), out, append=True)


def three(i: int) -> int:
    return 3
