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
import re
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


# The one-host cluster's nodes n0..n3 are names only, and share one network namespace and one
# file system. So each step of the training job runs in a mount namespace of its own whose
# /etc/hosts gives n<k> the address 127.0.1.<k+1> and whose $TMPDIR is the node's own directory,
# and a daemon listens on its node's address where the recipe says 0.0.0.0 (STOKER_WRAP of
# deploy/slurm/train.sbatch; unset on a real cluster).
WRAP = """#!/bin/sh
mkdir -p "%(tmp)s/$SLURMD_NODENAME"
exec unshare --mount sh -c '
  mount --bind "$0" /etc/hosts
  mount --bind "%(tmp)s/$SLURMD_NODENAME" "$TMPDIR"
  addr=$(getent hosts "$SLURMD_NODENAME" | cut -d" " -f1)
  n=$#
  for a in "$@"; do
    case $a in 0.0.0.0:*) a="$addr:${a#0.0.0.0:}";; esac
    set -- "$@" "$a"
  done
  shift $n
  exec "$@"' "%(hosts)s" "$@"
"""


def write_photos(root: Path, classes: int, per_class: int) -> None:
    """Small JPEGs with real photographic content where Debian's wallpapers are installed,
    random noise otherwise (the test is about plumbing, not decode speed)."""
    from PIL import Image
    import random
    rng = random.Random(7)
    for c in range(classes):
        (root / f"class{c}").mkdir(parents=True)
        for i in range(per_class):
            pixels = bytes(rng.getrandbits(8) for _ in range(48 * 40 * 3))
            Image.frombytes("RGB", (48, 40), pixels).save(root / f"class{c}" / f"{i:03d}.jpg")


def packed_photos(stoker_exe: str, tmp_path: Path) -> Path:
    """96 JPEGs in 4 classes, packed in chunks of 16 KiB (so several per rank)."""
    write_photos(tmp_path / "src", classes=4, per_class=24)
    ds = tmp_path / "photos.stoker"
    r = stoker_cli(stoker_exe, "pack", "-q", "--chunk-size", "16KiB", tmp_path / "src", ds)
    assert r.returncode == 0, r.stderr
    return ds


def node_wrap(slurm, tmp_path: Path) -> Path:
    """The STOKER_WRAP program (WRAP above) for this cluster's nodes."""
    hosts = tmp_path / "hosts"
    hosts.write_text(Path("/etc/hosts").read_text() + "".join(
        f"127.0.1.{k + 1} {name}\n" for k, name in enumerate(slurm.nodes)))
    return write_script(tmp_path / "wrap.sh", WRAP % {"hosts": hosts, "tmp": tmp_path / "nodes"})


@pytest.mark.slow
def test_training_job_reads_through_the_job_cache(slurm, stoker_exe, tmp_path):
    """deploy/slurm/train.sbatch on two nodes, as documented: a `stoker node --peers slurm`
    daemon per node (peers from SLURM_JOB_NODELIST), then torchrun with one trainer per node
    (examples/python/train_one_epoch.py, gloo). Each rank trains on its half of the dataset,
    through its node's daemon; the daemons read each chunk from the dataset once for the job
    and the rest from each other."""
    root = Path(__file__).resolve().parents[2]
    ds = packed_photos(stoker_exe, tmp_path)
    chunks = json.loads(stoker_cli(stoker_exe, "info", "--json", ds).stdout)["chunks"]
    assert chunks >= 8
    wrap = node_wrap(slurm, tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    port = cluster._free_ports(1)[0]
    env = dict(slurm.env, PATH=f"{Path(stoker_exe).parent}{os.pathsep}{slurm.env['PATH']}",
               STOKER_WRAP=str(wrap), STOKER_NODE_PORT=str(port), STOKER_NODE_MEMORY="256MiB",
               STOKER_TRAIN_SCRIPT=str(root / "examples" / "python" / "train_one_epoch.py"),
               OMP_NUM_THREADS="1", TMPDIR=str(tmp_path / "scratch"))
    (tmp_path / "scratch").mkdir()
    job = slurm.sbatch("--nodes=2", f"--output={out}/train-%j.out", "--chdir", str(root),
                       str(root / "deploy" / "slurm" / "train.sbatch"), str(ds),
                       "--model", "linear", "--batch", "8", "--size", "32",
                       "--report", str(out / "rank"), env=env)
    records = slurm.wait(job, timeout=600)
    log = (out / f"train-{job}.out").read_text(errors="replace")
    assert [(r["state"], r["exit"]) for r in records] == [("COMPLETED", 0)], (records, log)
    reports = [json.loads((out / f"rank.{rank}").read_text()) for rank in (0, 1)]
    assert [(r["world_size"], r["images"], r["node_cache"]) for r in reports] == \
        [(2, 48, True)] * 2, reports
    # Each daemon says what it did when stopped: every chunk came from the dataset once.
    stopped = [tuple(map(int, m)) for m in re.findall(
        r"stopped: (\d+) chunk\(s\) handed to trainers, (\d+) read from the store, (\d+) from "
        r"peers, (\d+) served to peers", log)]
    assert len(stopped) == 2, log
    assert sum(s[1] for s in stopped) == chunks, (stopped, chunks, log)
    assert all(s[0] > 0 for s in stopped) and sum(s[2] for s in stopped) > 0, stopped
    assert f"job slurm-{job}: 2 peer(s)" in log, log


@pytest.mark.slow
def test_training_job_with_feeders_on_cpu_nodes(slurm, stoker_exe, tmp_path):
    """deploy/slurm/train-feeders.sbatch as documented, a heterogeneous job: component 0 two
    training nodes (torchrun, one trainer each, examples/python/train_one_epoch.py), component 1
    two CPU nodes with a `stoker feed` each that announces itself in a file the trainers get as
    STOKER_FEEDERS. The feeders make part of both ranks' batches, and print their counters when
    the script stops them with SIGTERM. All four nodes are the job cache (a `stoker node` per
    training node, each feeder its own member, found in a rendezvous file): every chunk is read
    from the dataset once for the job."""
    root = Path(__file__).resolve().parents[2]
    ds = packed_photos(stoker_exe, tmp_path)
    chunks = json.loads(stoker_cli(stoker_exe, "info", "--json", ds).stdout)["chunks"]
    out, shared = tmp_path / "out", tmp_path / "shared"
    out.mkdir()
    shared.mkdir()
    (tmp_path / "scratch").mkdir()
    env = dict(slurm.env, PATH=f"{Path(stoker_exe).parent}{os.pathsep}{slurm.env['PATH']}",
               STOKER_WRAP=str(node_wrap(slurm, tmp_path)), STOKER_SHARED=str(shared),
               STOKER_FEED_PORT=str(cluster._free_ports(1)[0]), STOKER_FEED_MEMORY="256MiB",
               STOKER_FEED_THREADS="1", STOKER_NODE_PORT=str(cluster._free_ports(1)[0]),
               STOKER_NODE_MEMORY="256MiB",
               STOKER_TRAIN_SCRIPT=str(root / "examples" / "python" / "train_one_epoch.py"),
               OMP_NUM_THREADS="1", TMPDIR=str(tmp_path / "scratch"))
    # Options before ':' are component 0's (the trainers), after it component 1's (the feeders).
    # Batches of 4: 12 slices per rank, more than the trainers take before the feeders connect.
    job = slurm.sbatch("--nodes=2", f"--output={out}/train-%j.out", "--chdir", str(root),
                       ":", "--nodes=2",
                       str(root / "deploy" / "slurm" / "train-feeders.sbatch"), str(ds),
                       "--model", "linear", "--batch", "4", "--size", "32",
                       "--report", str(out / "rank"), env=env)
    records = slurm.wait(job, timeout=600)
    log = (out / f"train-{job}.out").read_text(errors="replace")
    # One record per component, each on its own two nodes.
    assert [(r["state"], r["exit"]) for r in records] == [("COMPLETED", 0)] * 2, (records, log)
    assert sorted(r["node"] for r in records) == ["n[0-1]", "n[2-3]"], records
    assert "feeders: 2 of 2 announced" in log, log
    reports = [json.loads((out / f"rank.{rank}").read_text()) for rank in (0, 1)]
    assert [(r["world_size"], r["images"], r["feeders"]) for r in reports] == [(2, 48, 2)] * 2, \
        reports
    fed = sum(r["feeder_samples"] for r in reports)
    assert fed > 0, reports
    # Each feeder's counters at SIGTERM. A feeder also counts a slice whose answer its trainer
    # no longer wanted (past the deadline), so together they made at least what trainers took.
    stopped = [tuple(map(int, m)) for m in re.findall(
        r"stopped: (\d+) slice\(s\), (\d+) sample\(s\) made \((\d+) could not be\), "
        r"(\d+) refused; job cache: (\d+) chunk\(s\) read, (\d+) from the store", log)]
    assert len(stopped) == 2, log
    assert sum(s[1] for s in stopped) >= fed > 0, (stopped, reports, log)
    daemons = [tuple(map(int, m)) for m in re.findall(
        r"stopped: (\d+) chunk\(s\) handed to trainers, (\d+) read from the store", log)]
    assert len(daemons) == 2, log
    assert all(s[4] > 0 for s in stopped) and all(d[0] > 0 for d in daemons), (stopped, daemons)
    assert sum(s[5] for s in stopped) + sum(d[1] for d in daemons) == chunks, \
        (stopped, daemons, chunks, log)
    assert f"job slurm-{job}: 4 peer(s)" in log, log
    assert not list(shared.iterdir()), "the announce or rendezvous file was left behind"


def test_node_without_a_slurm_job_says_so(stoker_exe, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    r = subprocess.run([stoker_exe, "node", "--job", "j", "--store", str(tmp_path), "--peers",
                        "slurm", "--listen", "127.0.0.1:7171"], capture_output=True, text=True,
                       env=env, timeout=30)
    assert r.returncode != 0 and "SLURM_JOB_NODELIST is not set" in r.stderr, r.stderr
    assert "srun --ntasks-per-node=1" in r.stderr
