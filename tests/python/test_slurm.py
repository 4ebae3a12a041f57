"""Parallel pack on a real batch engine (docs/format.md §5.3, docs/slurm.md): Debian's Slurm,
one host, four slurmd workers (tests/slurm/cluster.py), no mocks.

- An `sbatch --array=0-3` job, each task `stoker pack SRC_<task> DS --part env` over its own
  slice of a tree, then a commit job that depends on it (`--dependency=afterok`): the dataset
  verifies, holds every file of the tree byte for byte, and its file order, labels and classes
  are those of one `stoker pack` of the whole tree. The slices interleave (every part holds
  files of most classes, one class lies in the last part only), so the union must be re-sorted
  and re-labelled, not just concatenated.
- An `--array=1-4` job with task 3 cancelled (part 2 of 4 never written; the task ids start at
  1, so SLURM_ARRAY_TASK_MIN must be subtracted): `stoker commit` exits non-zero naming the
  missing part and publishes nothing; the part packed again by hand then commits.

Skipped where Slurm or munge is missing or not root; with STOKER_REQUIRE_SLURM=1 (scripts/test)
that is a failure instead.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import stoker
from conftest import dataset_contents, make_tree

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "slurm"))
import cluster  # noqa: E402

SLURM_UNAVAILABLE = cluster.available()
REQUIRED = os.environ.get("STOKER_REQUIRE_SLURM", "") not in ("", "0")
pytestmark = pytest.mark.slurm

TASKS = 4
JOB_TIMEOUT = 60  # seconds for an array to finish (it takes ~2 s)

PACK_SCRIPT = """#!/bin/bash
# $1 stoker, $2 the directory of the slices, $3 the dataset: this task packs slice <task id>.
set -eu
exec "$1" pack "$2/task-$SLURM_ARRAY_TASK_ID" "$3" --part env --chunk-size 16KiB --json
"""
COMMIT_SCRIPT = """#!/bin/bash
# $1 stoker, $2 the dataset, $3 the array job's id.
set -eu
exec "$1" commit "$2" --job "slurm-$3"
"""


@pytest.fixture(scope="module")
def slurm():
    """Four one-CPU slurmd workers, started once for this file; stopped (every job cancelled,
    every daemon killed, its directory removed) however the tests end."""
    if SLURM_UNAVAILABLE is not None:
        if REQUIRED:
            pytest.fail(f"STOKER_REQUIRE_SLURM is set but: {SLURM_UNAVAILABLE}")
        pytest.skip(SLURM_UNAVAILABLE)
    # A new short directory under $TMPDIR (Unix socket paths), not pytest's deep tmp_path.
    c = cluster.SlurmCluster(nodes=TASKS, cpus_per_node=1)
    c.start()
    try:
        yield c
    finally:
        c.stop()


def split(tree: dict[str, bytes], root: Path, task_ids: list[int]) -> dict[int, dict[str, bytes]]:
    """Writes root/task-<id>/<path> for a slice of the tree per task; returns the slices.
    class02 goes wholly to the last task; the other files are dealt round-robin in path order."""
    slices: dict[int, dict[str, bytes]] = {t: {} for t in task_ids}
    rest = [p for p in sorted(tree) if not p.startswith("class02/")]
    for i, p in enumerate(rest):
        slices[task_ids[i % len(task_ids)]][p] = tree[p]
    for p in sorted(tree):
        if p.startswith("class02/"):
            slices[task_ids[-1]][p] = tree[p]
    for t, files in slices.items():
        for p, data in files.items():
            dest = root / f"task-{t}" / p
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
    assert sum(map(len, slices.values())) == len(tree)
    return slices


def write_script(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


def check_tasks(slurm, records: list[dict], expect_tasks: list[int], out: Path) -> None:
    """Exactly these array tasks ran, each COMPLETED with exit code 0 and nothing on stderr."""
    assert [r["task"] for r in records] == expect_tasks, (records, slurm.logs())
    for r in records:
        err = out / f"pack-{r['task']}.err"
        err = err.read_text() if err.exists() else "(no stderr file)"
        assert (r["state"], r["exit"], r["signal"]) == ("COMPLETED", 0, 0), (r, err, slurm.logs())
        assert not err.strip(), (r, err)


def check_part_outputs(out: Path, job: int, slices: dict[int, dict[str, bytes]],
                       ran: list[int], task_min: int) -> None:
    """Task t's --json summary: part t - task_min of TASKS of job slurm-<job>, its slice."""
    for t in ran:
        files = slices[t]
        summary = json.loads((out / f"pack-{t}.out").read_text())
        assert summary["part"] == (f"parts/slurm-{job}/part-{t - task_min:06d}-of-{TASKS:06d}.seg")
        assert summary["files_added"] == len(files)
        assert summary["bytes_added"] == sum(map(len, files.values()))


def assert_same_as_one_pack(stoker_exe: str, tmp_path: Path, ds: Path, tree: dict[str, bytes],
                            whole: Path) -> None:
    r = stoker_cli(stoker_exe, "verify", ds)
    assert r.returncode == 0, r.stdout + r.stderr
    got = stoker.Dataset(str(ds))
    assert dataset_contents(got) == tree
    one = tmp_path / "one.stoker"
    r = stoker_cli(stoker_exe, "pack", "-q", whole, one)
    assert r.returncode == 0, r.stderr
    ref = stoker.Dataset(str(one))
    assert got.num_files == ref.num_files == len(tree)
    assert got.classes == ref.classes == [f"class{c:02d}" for c in range(5)]
    for i in range(ref.num_files):
        a, b = got.stat(i), ref.stat(i)
        assert (a["path"], a["label"], a["class"]) == (b["path"], b["label"], b["class"]), i
    assert not list((ds / "parts").rglob("*.seg")), "commit left its parts behind"


def stoker_cli(stoker_exe: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run([stoker_exe, *map(str, args)], capture_output=True, text=True,
                          timeout=120)


def test_array_job_packs_parts_and_dependent_job_commits(slurm, stoker_exe, tmp_path):
    tree = make_tree(tmp_path / "whole", seed=1301, classes=5, files_per_class=16)
    task_ids = list(range(TASKS))
    slices = split(tree, tmp_path / "src", task_ids)
    ds, out = tmp_path / "ds.stoker", tmp_path / "out"
    out.mkdir()
    pack_sh = write_script(tmp_path / "pack.sh", PACK_SCRIPT)
    commit_sh = write_script(tmp_path / "commit.sh", COMMIT_SCRIPT)

    job = slurm.sbatch(f"--array=0-{TASKS - 1}", "-J", "stoker-pack",
                       "-o", f"{out}/pack-%a.out", "-e", f"{out}/pack-%a.err",
                       str(pack_sh), stoker_exe, str(tmp_path / "src"), str(ds))
    commit = slurm.sbatch(f"--dependency=afterok:{job}", "--kill-on-invalid-dep=yes",
                          "-J", "stoker-commit", "-o", f"{out}/commit.out",
                          "-e", f"{out}/commit.err", str(commit_sh), stoker_exe, str(ds), str(job))
    tasks = slurm.wait(job, JOB_TIMEOUT)
    check_tasks(slurm, tasks, task_ids, out)
    assert len({r["node"] for r in tasks}) > 1, tasks  # several slurmd workers ran them
    check_part_outputs(out, job, slices, task_ids, task_min=0)

    [c] = slurm.wait(commit, JOB_TIMEOUT)
    assert (c["state"], c["exit"]) == ("COMPLETED", 0), (c, (out / "commit.err").read_text())
    assert f"committed the parts of job 'slurm-{job}'" in (out / "commit.out").read_text()
    assert "as version 1:" in (out / "commit.out").read_text()
    assert_same_as_one_pack(stoker_exe, tmp_path, ds, tree, tmp_path / "whole")


def test_commit_refuses_when_an_array_task_is_missing(slurm, stoker_exe, tmp_path):
    tree = make_tree(tmp_path / "whole", seed=1302, classes=5, files_per_class=12)
    task_ids = [1, 2, 3, 4]
    slices = split(tree, tmp_path / "src", task_ids)
    ds, out = tmp_path / "ds.stoker", tmp_path / "out"
    out.mkdir()
    pack_sh = write_script(tmp_path / "pack.sh", PACK_SCRIPT)

    # Held at submission, task 3 cancelled before anything runs, the rest released: part 2
    # (task 3 - SLURM_ARRAY_TASK_MIN 1) of 4 is never written. Slurm still tells the other
    # tasks SLURM_ARRAY_TASK_COUNT=4.
    job = slurm.sbatch("--hold", "--array=1-4", "-J", "stoker-pack",
                       "-o", f"{out}/pack-%a.out", "-e", f"{out}/pack-%a.err",
                       str(pack_sh), stoker_exe, str(tmp_path / "src"), str(ds))
    slurm.run("scancel", f"{job}_3")
    slurm.run("scontrol", "release", str(job))
    tasks = slurm.wait(job, JOB_TIMEOUT)
    check_tasks(slurm, tasks, [1, 2, 4], out)
    assert not (out / "pack-3.out").exists()
    check_part_outputs(out, job, slices, [1, 2, 4], task_min=1)

    r = stoker_cli(stoker_exe, "commit", ds, "--job", f"slurm-{job}")
    assert r.returncode != 0, r.stdout
    assert f"part 2 of 4 of job 'slurm-{job}' is missing" in r.stderr, r.stderr
    # Nothing published: no version record, the dataset does not open, the parts are kept.
    assert not list(ds.glob("versions/*.version")), list(ds.rglob("*"))
    assert stoker_cli(stoker_exe, "info", ds).returncode != 0
    with pytest.raises(FileNotFoundError):
        stoker.Dataset(str(ds))
    assert sorted(p.name for p in (ds / "parts" / f"slurm-{job}").glob("*.seg")) == [
        f"part-{k:06d}-of-000004.seg" for k in (0, 1, 3)]

    # The missing part packed again (by hand, naming the array's job and K/N), then commit works.
    r = stoker_cli(stoker_exe, "pack", "-q", tmp_path / "src" / "task-3", ds,
                   "--part", "2/4", "--job", f"slurm-{job}", "--chunk-size", "16KiB")
    assert r.returncode == 0, r.stderr
    r = stoker_cli(stoker_exe, "commit", ds, "--job", f"slurm-{job}")
    assert r.returncode == 0, r.stderr
    assert_same_as_one_pack(stoker_exe, tmp_path, ds, tree, tmp_path / "whole")
