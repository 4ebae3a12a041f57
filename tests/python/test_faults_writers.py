"""Writer faults through the real CLI (issue 13): each gives a clear error and loses no published
data (docs/format.md §5 publishing, §5.3 parts and commit, §6 gc).

(a) a part written twice, (b) a part missing at commit, (c) writers SIGKILLed between writing
their chunks and publishing, several at once, then `stoker gc --keep 1 --grace 0s`, (d)
`stoker gc --grace 0s` racing appending writers, (e) two `stoker commit` of one job at once,
(f) a corrupted version record, (g) concurrent appends to one s3:// dataset (the gateway of
test_s3.py; skipped the same way when it is missing, an error under STOKER_REQUIRE_S3=1).

For every fault: the failing command exits non-zero and its message names what went wrong;
every version published before still verifies (`stoker verify DS --version N`) and reads back
the same bytes (stoker.Dataset(path, version=N)); no version is partial (each adds exactly one
writer's whole input), and what failed left nothing a version names.

The CLI has no fault-injection hook (no STOKER_* variable or option for it), so kills come at
seeded random delays, as in test_writers.py, and gc runs in a loop beside the writers. Where
`strace` can inject into the CLI, some tests also use it to kill or stop a process at one exact
system call (a writer's link(2) of its segment or record, its stat of versions/ just before the
record; gc's listing of versions/ after it has read them), which makes those interleavings
deterministic; without strace they skip. Random choices come from fixed seeds, so a failure can
be replayed (process timing varies).

Tests marked xfail(strict=True, raises=Observed) pin a misbehaviour found here (none at
present; the reason says what was observed); they fail only through `expect`, so a broken
setup still fails them.
"""
from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

import stoker
from conftest import dataset_contents, make_tree, s3_skip

KILLED = (-signal.SIGKILL, 128 + signal.SIGKILL)  # the CLI itself, or strace re-raising it
GC_LOOP_ROUNDS = 16  # a round shows a violation about every other time (stops at the first)


# --- helpers --------------------------------------------------------------------------------

def run(exe: str, *args, env: dict | None = None,
        timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([exe, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env=env)


def ok(exe: str, *args, env: dict | None = None) -> subprocess.CompletedProcess:
    r = run(exe, *args, env=env)
    assert r.returncode == 0, f"stoker {' '.join(map(str, args))}: exit {r.returncode}\n{r.stderr}"
    return r


def record_name(version: int) -> str:
    return f"{version:016x}.version"


def versions_of(ds: Path) -> list[int]:
    """The published versions: the record names in versions/ (temporary files left out)."""
    d = ds / "versions"
    if not d.is_dir():
        return []
    return sorted(int(p.name[:16], 16) for p in d.iterdir()
                  if re.fullmatch(r"[0-9a-f]{16}\.version", p.name))


def on_disk(ds: Path) -> set[str]:
    """Every file under chunks/, segments/ and versions/, temporary files included."""
    return {f"{sub}/{p.name}" for sub in ("chunks", "segments", "versions")
            if (ds / sub).is_dir() for p in (ds / sub).iterdir()}


def used_by(ds: Path, versions: list[int]) -> set[str]:
    """What the given versions name: their records, their segments (from the record text) and
    their files' chunks (through the Python API)."""
    out: set[str] = set()
    for v in versions:
        out.add(f"versions/{record_name(v)}")
        text = (ds / "versions" / record_name(v)).read_text()
        out |= {f"segments/{line.split()[1]}.seg" for line in text.splitlines()
                if line.startswith("segment ")}
        d = stoker.Dataset(str(ds), version=v)
        out |= {f"chunks/{d.stat(i)['chunk']:016x}.chunk" for i in range(d.num_files)}
    return out


def published(ds: Path) -> dict[int, dict[str, bytes]]:
    """{version: {path: bytes}} of every published version."""
    return {v: dataset_contents(stoker.Dataset(str(ds), version=v)) for v in versions_of(ds)}


def assert_intact(exe: str, ds: Path | str, before: dict[int, dict[str, bytes]],
                  env: dict | None = None) -> None:
    """Every version of `before` still verifies and holds exactly the same files and bytes."""
    for v, contents in before.items():
        r = run(exe, "verify", ds, "--version", v, env=env)
        assert r.returncode == 0, f"version {v} no longer verifies (exit {r.returncode}):\n" \
                                  f"{r.stdout[-2000:]}{r.stderr}"
        assert dataset_contents(stoker.Dataset(str(ds), version=v)) == contents, \
            f"version {v} reads back other files or bytes"


def assert_each_version_adds_one_whole_writer(history: dict[int, dict[str, bytes]],
                                              trees: dict[str, dict[str, bytes]]) -> dict[int, str]:
    """Every version after the first holds its parent's files unchanged plus exactly one
    writer's whole input: nothing half-published. Returns {version: writer}."""
    by_version = {}
    vs = sorted(history)
    for prev, v in zip(vs, vs[1:]):
        assert v == prev + 1, f"versions {vs} have a gap"
        old, new = history[prev], history[v]
        assert {p: new.get(p) for p in old} == old, f"version {v} changed files of version {prev}"
        added = {p: b for p, b in new.items() if p not in old}
        owners = [w for w, t in trees.items() if t == added]
        assert len(owners) == 1, \
            f"version {v} adds {len(added)} files that are no single writer's whole input " \
            f"(e.g. {sorted(added)[:3]})"
        by_version[v] = owners[0]
    return by_version


def pack_popen(argv: list[str], env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)


def finish(p: subprocess.Popen, timeout: float = 300) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of a started process."""
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out, err


def base_dataset(exe: str, tmp_path: Path, seed: int = 1) -> tuple[Path, dict[str, bytes]]:
    files = make_tree(tmp_path / "base", seed=seed, classes=2, files_per_class=6)
    ok(exe, "pack", "-q", "--chunk-size", "16KiB", tmp_path / "base", tmp_path / "ds")
    return tmp_path / "ds", files


class Observed(AssertionError):
    """The misbehaviour an xfail marker of this file names was observed. The markers say
    raises=Observed, so any other failure (of the test's own setup) still fails the test."""


def expect(condition, message: str) -> None:
    if not condition:
        raise Observed(message)


# strace as a fault hook: stop or kill the CLI at one exact system call.

def _strace_usable() -> str | None:
    exe = shutil.which("strace")
    if exe is None:
        return "strace is not installed"
    try:
        r = subprocess.run([exe, "-f", "-qq", "-o", "/dev/null", "-e", "trace=getpid", "true"],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"strace does not run: {e}"
    return None if r.returncode == 0 else f"strace cannot trace here: {r.stderr.strip()}"


STRACE_UNUSABLE = _strace_usable()
needs_strace = pytest.mark.skipif(STRACE_UNUSABLE is not None, reason=STRACE_UNUSABLE or "")


def under_strace(argv: list[str], *, syscall: str, action: str, when: int,
                 path: Path | None = None, log: Path | None = None) -> list[str]:
    """argv run under strace, which sends SIG`action` to the process on entering its
    `when`-th `syscall` (counted among those on `path`, if given); strace's report goes to
    `log`. SIGKILL ends it before the call; SIGSTOP takes effect when the call returns."""
    out = ["strace", "-f", "-qq", "-o", str(log or "/dev/null"), "-e", f"trace={syscall}",
           "-e", f"inject={syscall}:signal=SIG{action}:when={when}"]
    if path is not None:
        out += ["-P", str(path)]
    return out + argv


class Stopped:
    """argv under strace, stopped right after its `when`-th `syscall` (on `path`) returned,
    until resume(). It runs in a session of its own: the kernel sends SIGHUP to a stopped
    process whose process group is orphaned when another member exits, and this test's other
    CLI processes are members of pytest's group."""

    def __init__(self, argv: list[str], log: Path, **inject):
        self.log = log
        self.proc = subprocess.Popen(under_strace(argv, action="STOP", log=log, **inject),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        self.pid = None

    def wait(self) -> str:
        """Waits until strace reports the stop (a hang guard, not a threshold); returns the
        system call it stopped after, as strace printed it."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            lines = self.log.read_text().splitlines() if self.log.exists() else []
            stops = [i for i, line in enumerate(lines) if "--- SIGSTOP {" in line]
            if stops and any("--- stopped by SIGSTOP ---" in line for line in lines):
                tid = lines[stops[0]].split()[0]
                status = Path(f"/proc/{tid}/status").read_text()
                self.pid = int(re.search(r"^Tgid:\s*(\d+)", status, re.M).group(1))
                return next(line for line in reversed(lines[:stops[0]])
                            if line.split()[0] == tid)
            if self.proc.poll() is not None:
                _, err = self.proc.communicate()
                raise AssertionError(f"the traced process ended (exit {self.proc.returncode}) "
                                     f"before its stop point: {err}\n" + "\n".join(lines))
            time.sleep(0.001)
        raise AssertionError("the traced process never reached its stop point")

    def resume(self) -> tuple[int, str, str]:
        if self.pid is not None and self.proc.poll() is None:
            os.kill(self.pid, signal.SIGCONT)
        out, err = self.proc.communicate(timeout=120)
        return self.proc.returncode, out, err


# --- (a) a part written twice ---------------------------------------------------------------

def test_a_part_written_twice_is_refused_and_the_first_stays(tmp_path, stoker_exe):
    exe = stoker_exe
    ds, base = base_dataset(exe, tmp_path)
    before = published(ds)
    first = make_tree(tmp_path / "p0", seed=10, classes=2, files_per_class=8, prefix="p0-")
    # The same paths with other bytes: if the second write won, commit would publish these.
    again = make_tree(tmp_path / "p0again", seed=11, classes=2, files_per_class=8, prefix="p0-")
    assert again.keys() == first.keys() and again != first
    second = make_tree(tmp_path / "p1", seed=12, classes=2, files_per_class=8, prefix="p1-")
    ok(exe, "pack", "-q", "--chunk-size", "16KiB", tmp_path / "p0", ds, "--part", "0/2",
       "--job", "j")
    part = ds / "parts" / "j" / "part-000000-of-000002.seg"
    part_bytes = part.read_bytes()
    files_before = on_disk(ds)

    r = run(exe, "pack", "-q", "--chunk-size", "16KiB", tmp_path / "p0again", ds, "--part", "0/2",
            "--job", "j")
    assert r.returncode > 0, r
    assert "parts/j/part-000000-of-000002.seg was already written" in r.stderr, r.stderr
    assert "part 0 of job 'j' packed twice" in r.stderr, r.stderr
    # The first part is untouched; the refused writer removed its chunks; nothing published.
    assert part.read_bytes() == part_bytes
    assert sorted(p.name for p in part.parent.iterdir()) == [part.name]
    assert on_disk(ds) == files_before
    assert versions_of(ds) == [1]
    assert_intact(exe, ds, before)

    # The job still commits, with the first write of part 0.
    ok(exe, "pack", "-q", "--chunk-size", "16KiB", tmp_path / "p1", ds, "--part", "1/2",
       "--job", "j")
    ok(exe, "commit", ds, "--job", "j")
    assert versions_of(ds) == [1, 2]
    assert_intact(exe, ds, {**before, 2: {**base, **first, **second}})


# --- (b) a part missing at commit -----------------------------------------------------------

def test_b_a_part_missing_at_commit_publishes_nothing(tmp_path, stoker_exe):
    exe = stoker_exe
    ds, base = base_dataset(exe, tmp_path)
    before = published(ds)
    parts = [make_tree(tmp_path / f"p{k}", seed=20 + k, classes=2, files_per_class=6,
                       prefix=f"p{k}-") for k in range(3)]
    for k in (0, 2):
        ok(exe, "pack", "-q", "--chunk-size", "16KiB", tmp_path / f"p{k}", ds, "--part", f"{k}/3",
           "--job", "j")
    files_before = on_disk(ds)
    part_names = sorted(p.name for p in (ds / "parts" / "j").iterdir())

    r = run(exe, "commit", ds, "--job", "j")
    assert r.returncode > 0, r
    assert "part 1 of 3 of job 'j' is missing" in r.stderr, r.stderr
    assert versions_of(ds) == [1] and on_disk(ds) == files_before
    assert sorted(p.name for p in (ds / "parts" / "j").iterdir()) == part_names  # not spent
    assert_intact(exe, ds, before)

    # The late writer arrives: now the job commits, each file once.
    ok(exe, "pack", "-q", "--chunk-size", "16KiB", tmp_path / "p1", ds, "--part", "1/3",
       "--job", "j")
    ok(exe, "commit", ds, "--job", "j")
    assert versions_of(ds) == [1, 2]
    assert_intact(exe, ds, {**before, 2: {**base, **parts[0], **parts[1], **parts[2]}})
    assert not list((ds / "parts" / "j").iterdir())  # spent


def test_b_a_discarded_job_publishes_nothing_and_refuses_late_parts(tmp_path, stoker_exe):
    """`stoker commit --discard`: a job given up (a failed array, an engine's failed write)."""
    exe = stoker_exe
    ds, _ = base_dataset(exe, tmp_path)
    before = published(ds)
    for k in range(2):
        make_tree(tmp_path / f"p{k}", seed=30 + k, classes=2, files_per_class=4, prefix=f"p{k}-")
    ok(exe, "pack", "-q", tmp_path / "p0", ds, "--part", "0/2", "--job", "gone")
    # gc keeps the open job's chunks and names the job (a dead engine driver's job stays so).
    r = run(exe, "gc", ds, "--dry-run")
    assert "job 'gone': 1 part(s) not published yet" in r.stdout, r
    assert "once all 2 are in" in r.stdout and "--job gone --discard" in r.stdout, r
    gc = json.loads(ok(exe, "gc", ds, "--dry-run", "--json").stdout)
    assert [(j["job"], j["parts"], j["count"]) for j in gc["open_jobs"]] == [("gone", 1, 2)]
    r = run(exe, "commit", ds, "--job", "gone", "--discard")
    assert r.returncode == 0 and "discarded job 'gone'" in r.stdout, r
    assert "1 part removed" in r.stdout, r
    assert [p.name for p in (ds / "parts" / "gone").iterdir()] == ["closed"]
    late = run(exe, "pack", "-q", tmp_path / "p1", ds, "--part", "1/2", "--job", "gone")
    assert late.returncode > 0 and "already committed or discarded" in late.stderr, late
    r = run(exe, "commit", ds, "--job", "gone")
    assert r.returncode > 0 and "published once" in r.stderr, r
    r = run(exe, "commit", ds, "--job", "gone", "--discard")
    assert r.returncode == 0 and "already committed" in r.stdout, r
    r = run(exe, "commit", ds, "--job", "typo", "--discard")
    assert r.returncode == 1 and "holds no parts of job 'typo'" in r.stderr, r
    assert versions_of(ds) == [1]
    assert_intact(exe, ds, before)
    assert json.loads(ok(exe, "gc", ds, "--dry-run", "--json").stdout)["open_jobs"] == []


# --- (c) writers killed between writing their chunks and publishing --------------------------

def gc_removes_exactly_the_leftovers(exe: str, ds: Path, history: dict[int, dict[str, bytes]]):
    """`stoker gc --keep 1 --grace 0s --writer-timeout 0s` (no writer runs any more) removes the
    older records and exactly the files no version names (killed writers' chunks, segments,
    temporary files) and the killed writers' leases; the newest version stays intact."""
    versions = versions_of(ds)
    newest = versions[-1]
    leftovers = on_disk(ds) - used_by(ds, versions)
    kept = used_by(ds, [newest])
    leases = sorted(p.name.removesuffix(".lease") for p in (ds / "gc" / "writers").iterdir())
    gc = json.loads(ok(exe, "gc", ds, "--keep", "1", "--grace", "0s", "--writer-timeout", "0s",
                       "--json").stdout)
    assert gc["versions_removed"] == versions[:-1] and gc["versions_kept"] == [newest]
    assert sorted(gc["files_removed"]) == sorted(leftovers)
    # Killed on this machine: their leases name processes that are gone, found so at once.
    assert sorted(w["writer"] for w in gc["writers_gone"]) == leases
    assert gc["writers_expired"] == [] and not list((ds / "gc" / "writers").iterdir())
    # And the hint for readers without a listing, written before the records went.
    assert on_disk(ds) == kept | {"versions/latest"}
    assert (ds / "versions" / "latest").read_text() == f"{newest}\n"
    assert_intact(exe, ds, {newest: history[newest]})
    return leftovers


@pytest.mark.slow
def test_c_writers_killed_at_random_moments_publish_all_or_nothing(tmp_path, stoker_exe):
    """Rounds of 4 `pack --append` writers at once; in each, 2 are SIGKILLed at seeded random
    moments within the time a round takes (round 0, with no kill, measures it): while writing
    chunks, between chunks and publishing, or after. A killed writer is all or nothing; the
    others land; nothing published before changes; then gc removes exactly the leftovers."""
    exe = stoker_exe
    ds, base = base_dataset(exe, tmp_path)
    rng = random.Random(1313)
    writers, rounds = 4, 3
    trees = {}
    history = published(ds)
    outcomes = []
    duration = None
    for round_ in range(rounds + 1):  # round 0: nobody killed, to time a round
        names = [f"r{round_}w{w}" for w in range(writers)]
        for w, name in enumerate(names):
            trees[name] = make_tree(tmp_path / name, seed=100 * round_ + w, classes=2,
                                    files_per_class=40, min_size=2000, max_size=60_000,
                                    prefix=f"{name}-")
        killed = set(rng.sample(names, 2)) if round_ else set()
        delays = {name: rng.uniform(0, duration) for name in sorted(killed)}
        start = time.monotonic()
        procs = {name: pack_popen([exe, "pack", "-q", "--append", "--chunk-size", "32KiB",
                                   str(tmp_path / name), str(ds)]) for name in names}
        for name in sorted(killed, key=delays.get):
            time.sleep(max(0.0, start + delays[name] - time.monotonic()))
            procs[name].send_signal(signal.SIGKILL)
        results = {name: finish(p)[::2] for name, p in procs.items()}  # (exit, stderr)
        if round_ == 0:
            duration = time.monotonic() - start
        newest = dataset_contents(stoker.Dataset(str(ds)))
        for name, (rc, err) in results.items():
            landed = [p for p in trees[name] if p in newest]
            if name in killed and rc in KILLED:
                assert len(landed) in (0, len(trees[name])), f"{name} is partly published"
                outcomes.append("published before the kill" if landed else "nothing published")
                continue
            assert rc == 0, f"{name}: exit {rc}: {err}"
            assert len(landed) == len(trees[name]), f"{name} exited 0 but lost files"
        # Earlier versions unchanged and verifying; each newer one verifies and adds one
        # writer's whole input.
        assert_intact(exe, ds, history)
        for v in versions_of(ds):
            if v not in history:
                history[v] = published_version(ds, v)
                r = run(exe, "verify", ds, "--version", v)
                assert r.returncode == 0, f"version {v}: {r.stdout}{r.stderr}"
        assert_each_version_adds_one_whole_writer(history, trees)
    print(f"a round takes {duration:.2f} s; killed writers: {outcomes}")  # with -s / -rP

    gc_removes_exactly_the_leftovers(exe, ds, history)


@pytest.mark.system
@needs_strace
def test_c_writers_killed_just_before_their_record_leave_only_garbage(tmp_path, stoker_exe):
    """Deterministic: 2 of 4 concurrent writers are SIGKILLed on entering link(2) of their version
    record (chunks synced, segment created, record written to its temporary name)."""
    exe = stoker_exe
    ds, base = base_dataset(exe, tmp_path)
    history = published(ds)
    trees, procs = {}, {}
    for w in range(4):
        name = f"w{w}"
        trees[name] = make_tree(tmp_path / name, seed=40 + w, classes=2, files_per_class=12,
                                min_size=2000, max_size=30_000, prefix=f"{name}-")
        argv = [exe, "pack", "-q", "--append", "--chunk-size", "32KiB", str(tmp_path / name),
                str(ds)]
        # link #1 is the version record (segments are written under random names, no link).
        if w in (1, 2):
            argv = under_strace(argv, syscall="link", action="KILL", when=1)
        procs[name] = pack_popen(argv)
    results = {name: finish(p)[::2] for name, p in procs.items()}  # (exit, stderr)
    for name in ("w1", "w2"):
        assert results[name][0] in KILLED, f"{name} was not killed: {results[name]}"
    for name in ("w0", "w3"):
        assert results[name][0] == 0, f"{name}: {results[name]}"

    assert_intact(exe, ds, history)
    history = published(ds)
    assert versions_of(ds) == [1, 2, 3]
    owners = assert_each_version_adds_one_whole_writer(history, trees)
    assert sorted(owners.values()) == ["w0", "w3"]  # the killed writers published nothing
    for name in ("w1", "w2"):
        assert not set(trees[name]) & set(history[3]), f"{name} is visible"
    leftovers = gc_removes_exactly_the_leftovers(exe, ds, history)
    # What each killed writer left: its chunks, its segment, its record's temporary file.
    assert len([p for p in leftovers if p.startswith("segments/")]) == 2, leftovers
    assert len([p for p in leftovers if p.startswith("versions/") and ".version.tmp-" in p]) == 2
    assert len([p for p in leftovers if p.startswith("chunks/")]) >= 2, leftovers


# --- (d) gc racing writers ----------------------------------------------------------------

@pytest.mark.slow
def test_d_gc_looping_beside_appending_writers(tmp_path, stoker_exe):
    """`stoker gc --grace 0s` runs back to back while rounds of 4 `pack --append` writers run.
    The writers' leases hold their files back from gc whatever the grace period, so each writer
    exits 0 with all its files published in a version that verifies, and every published
    version keeps verifying. (Before leases, writers failed or, worse, published versions whose
    chunks gc had removed.) --keep is large: the versions themselves are not what gc may remove
    here. The rounds stop at the first violation."""
    exe = stoker_exe
    ds, base = base_dataset(exe, tmp_path)
    rng = random.Random(4242)
    trees: dict[str, dict[str, bytes]] = {}
    history = published(ds)
    problems: list[str] = []
    for round_ in range(GC_LOOP_ROUNDS):
        stop = threading.Event()
        gc_runs: list[subprocess.CompletedProcess] = []

        def gc_loop():
            while not stop.is_set():
                gc_runs.append(run(exe, "gc", ds, "--keep", "100000", "--grace", "0s"))

        thread = threading.Thread(target=gc_loop)
        thread.start()
        procs = {}
        try:
            for w in range(4):
                name = f"r{round_}w{w}"
                # Small and larger inputs: some writers finish between two gc runs, some not.
                trees[name] = make_tree(tmp_path / name, seed=1000 * round_ + w, classes=1,
                                        files_per_class=rng.choice([2, 6, 20, 40]),
                                        min_size=100, max_size=20_000, prefix=f"{name}-")
                procs[name] = pack_popen([exe, "pack", "-q", "--append", "--chunk-size", "16KiB",
                                          str(tmp_path / name), str(ds)])
            results = {name: finish(p)[::2] for name, p in procs.items()}  # (exit, stderr)
        finally:
            stop.set()
            thread.join()
        for g in gc_runs:
            if g.returncode != 0:
                problems.append(f"round {round_}: gc exited {g.returncode}: {g.stderr.strip()}")
        try:
            newest = dataset_contents(stoker.Dataset(str(ds)))
        except OSError as e:  # stoker.CorruptionError included
            problems.append(f"round {round_}: the newest version does not read: {e}")
            newest = {}
        for name, (rc, err) in results.items():
            assert rc not in KILLED and rc >= 0, f"{name} crashed: exit {rc}: {err}"
            landed = {p for p in trees[name] if p in newest}
            if rc != 0:
                problems.append(f"round {round_}: {name} exit {rc}: {err.strip()}")
            elif len(landed) != len(trees[name]):
                problems.append(f"round {round_}: {name} exited 0, {len(landed)} of "
                                f"{len(trees[name])} files published")
        for v in versions_of(ds):
            r = run(exe, "verify", ds, "--version", v)
            if r.returncode != 0:
                problems.append(f"round {round_}: version {v} does not verify (exit "
                                f"{r.returncode}): {(r.stdout + r.stderr).strip()[-400:]}")
        if not problems:
            try:  # what was published before reads the same (and verified above); none partial
                for v, contents in history.items():
                    assert published_version(ds, v) == contents, f"version {v} changed"
                history.update({v: published_version(ds, v) for v in versions_of(ds)
                                if v not in history})
                assert_each_version_adds_one_whole_writer(history, trees)
            except (AssertionError, OSError) as e:
                problems.append(f"round {round_}: {e}")
        if problems:
            break
    expect(not problems, "\n".join(problems))


def used_by_records(ds: Path, versions: list[int]) -> set[str]:
    """The records and segments the versions' records name (readable when a segment is gone)."""
    out = set()
    for v in versions:
        out.add(f"versions/{record_name(v)}")
        out |= {f"segments/{line.split()[1]}.seg" for line in
                (ds / "versions" / record_name(v)).read_text().splitlines()
                if line.startswith("segment ")}
    return out


def version_verifies(exe: str, ds: Path, v: int, contents: dict[str, bytes]) -> str | None:
    """None if version v verifies and reads back `contents`, else what is wrong."""
    r = run(exe, "verify", ds, "--version", v)
    if r.returncode != 0:
        return f"version {v}: verify exit {r.returncode}: {(r.stdout + r.stderr).strip()[-600:]}"
    if dataset_contents(stoker.Dataset(str(ds), version=v)) != contents:
        return f"version {v} reads back other files"
    return None


@pytest.mark.system
@needs_strace
def test_d_gc_that_began_before_a_publish_keeps_what_it_publishes(tmp_path, stoker_exe):
    """Deterministic: gc --grace 0s is stopped after it has read the versions (on its second
    listing of versions/, before it lists segments/ and chunks/); a writer appends version 2
    and exits 0; then gc goes on."""
    exe = stoker_exe
    ds, base = base_dataset(exe, tmp_path)
    before = published(ds)
    more = make_tree(tmp_path / "more", seed=50, classes=2, files_per_class=8, prefix="more-")
    gc = Stopped([exe, "gc", str(ds), "--keep", "100", "--grace", "0s", "--json"],
                 tmp_path / "strace.log", syscall="openat", when=2, path=ds / "versions")
    try:
        line = gc.wait()
        assert f'openat(AT_FDCWD, "{ds}/versions", ' in line, line
        ok(exe, "pack", "-q", "--append", "--chunk-size", "16KiB", tmp_path / "more", ds)
        assert versions_of(ds) == [1, 2]
    finally:
        rc, out, err = gc.resume()
    assert rc == 0, err
    assert_intact(exe, ds, before)
    removed = set(json.loads(out)["files_removed"])
    problem = version_verifies(exe, ds, 2, {**base, **more})
    expect(problem is None and not removed & used_by_records(ds, [2]),
           f"gc removed {sorted(removed)} while version 2 was published: {problem}")


@pytest.mark.system
@needs_strace
def test_d_writer_held_up_before_publishing_keeps_its_files_through_gc(tmp_path, stoker_exe):
    """Deterministic: the writer is stopped after its check that its chunks still exist, on
    the stat of versions/ that precedes its record; gc --grace 0s runs and holds the writer's
    files back for its lease; the writer goes on and publishes a version that verifies.
    (Before leases, gc removed the chunks and the writer published a version naming them.)"""
    exe = stoker_exe
    ds, base = base_dataset(exe, tmp_path)
    before = published(ds)
    late = make_tree(tmp_path / "late", seed=60, classes=2, files_per_class=8, prefix="late-")
    writer = Stopped([exe, "pack", "-q", "--append", "--chunk-size", "16KiB",
                      str(tmp_path / "late"), str(ds)], tmp_path / "strace.log",
                     syscall="newfstatat", when=3, path=ds / "versions")
    try:
        line = writer.wait()
        # 1st, 2nd: listings of versions/ (at the start, at publishing); 3rd: creating the dir
        assert f'newfstatat(AT_FDCWD, "{ds}/versions", ' in line, line
        gc = json.loads(ok(exe, "gc", ds, "--keep", "100", "--grace", "0s", "--json").stdout)
    finally:
        rc, _, err = writer.resume()
    assert gc["writers_active"] == 1 and gc["files_held_for_writers"] > 0, gc
    assert not any(p.startswith(("chunks/", "segments/")) for p in gc["files_removed"]), gc
    assert rc == 0, err
    assert_intact(exe, ds, before)
    assert versions_of(ds) == [1, 2]
    assert version_verifies(exe, ds, 2, {**base, **late}) is None


# --- (e) two commits of one job at once -------------------------------------------------------

COMMIT_LOST = re.compile(r"^stoker commit: .*(already in the dataset \(version 2\)|holds no parts "
                         r"of job 'j'|part \d+ of 3 of job 'j' is missing|parts/j/part-)", re.S)


def test_e_two_commits_at_once_publish_once(tmp_path, stoker_exe):
    exe = stoker_exe
    rng = random.Random(77)
    parts = [make_tree(tmp_path / f"p{k}", seed=70 + k, classes=3, files_per_class=10,
                       prefix=f"p{k}-") for k in range(3)]
    union = {p: b for t in parts for p, b in t.items()}
    make_tree(tmp_path / "base", seed=1, classes=2, files_per_class=6)
    base = None
    for trial in range(4):
        ds = tmp_path / f"ds{trial}"
        ok(exe, "pack", "-q", "--chunk-size", "16KiB", tmp_path / "base", ds)
        base = base or published(ds)[1]
        before = published(ds)
        for k in range(3):
            ok(exe, "pack", "-q", "--chunk-size", "16KiB", tmp_path / f"p{k}", ds,
               "--part", f"{k}/3", "--job", "j")
        first = pack_popen([exe, "commit", str(ds), "--job", "j", "--json"])
        time.sleep(rng.uniform(0, 0.02))  # seeded offsets: different interleavings
        second = pack_popen([exe, "commit", str(ds), "--job", "j", "--json"])
        results = [finish(p) for p in (first, second)]
        codes = sorted(rc for rc, _, _ in results)
        assert codes[0] == 0 and codes[1] > 0, f"trial {trial}: exits {codes}: {results}"
        winner = next(out for rc, out, _ in results if rc == 0)
        loser = next(err for rc, _, err in results if rc != 0)
        summary = json.loads(winner)
        assert summary["version"] == 2 and summary["files_added"] == len(union), summary
        assert COMMIT_LOST.search(loser), f"trial {trial}: unclear message: {loser}"
        # Exactly one version more, each file once; nothing of the loser left.
        assert versions_of(ds) == [1, 2]
        v2 = stoker.Dataset(str(ds), version=2)
        paths = [v2.stat(i)["path"] for i in range(v2.num_files)]
        assert len(paths) == len(set(paths)) == len(base) + len(union)
        assert_intact(exe, ds, {**before, 2: {**base, **union}})
        assert on_disk(ds) == used_by(ds, [1, 2])
        assert not list((ds / "parts" / "j").iterdir())


# --- (f) a corrupted version record -----------------------------------------------------------

def flip(path: Path, offset: int) -> bytes:
    data = path.read_bytes()
    damaged = bytearray(data)
    damaged[offset] ^= 0x04
    path.write_bytes(bytes(damaged))
    return data


def test_f_a_corrupt_version_record_is_named_and_the_others_stay_readable(tmp_path, stoker_exe):
    exe = stoker_exe
    ds, base = base_dataset(exe, tmp_path)
    for k in range(2):
        make_tree(tmp_path / f"a{k}", seed=80 + k, classes=2, files_per_class=6, prefix=f"a{k}-")
        ok(exe, "pack", "-q", "--append", "--chunk-size", "16KiB", tmp_path / f"a{k}", ds)
    history = published(ds)
    assert sorted(history) == [1, 2, 3]
    record = ds / "versions" / record_name(2)
    shown = f"versions/{record_name(2)}"
    text = record.read_text()
    # A byte in the header, a count, a segment line and the checksum line itself.
    offsets = [3, text.index("\nfiles ") + 7, text.index("\nsegment ") + 12,
               text.index("record-crc32c ") + 15]
    rng = random.Random(5)
    offsets += rng.sample(range(len(text)), 2)
    for offset in offsets:
        files_before = {p: (ds / p).read_bytes() for p in on_disk(ds)}
        original = flip(record, offset)
        where = f"byte {offset}"
        r = run(exe, "verify", ds, "--version", 2)
        assert r.returncode == 3, f"{where}: verify exit {r.returncode}"
        assert shown in r.stdout + r.stderr and "CORRUPT" in r.stdout, f"{where}: {r.stdout}"
        for command in ("info", "ls"):
            r = run(exe, command, ds, "--version", 2)
            assert r.returncode == 3 and shown in r.stderr and "Corruption" in r.stderr, \
                f"{where}: {command}: exit {r.returncode}: {r.stderr}"
        with pytest.raises(stoker.CorruptionError, match=re.escape(shown)):
            stoker.Dataset(str(ds), version=2)
        # The listing names the damage rather than crashing.
        r = run(exe, "versions", ds)
        assert r.returncode == 3 and shown in r.stderr and "Corruption" in r.stderr, \
            f"{where}: versions: exit {r.returncode}: {r.stderr}"
        # gc refuses to decide anything on a damaged record, and removes nothing.
        r = run(exe, "gc", ds, "--keep", "1", "--grace", "0s")
        assert r.returncode > 0 and shown in r.stderr, f"{where}: gc: {r.returncode} {r.stderr}"
        # The other versions open and verify, with the same bytes.
        assert_intact(exe, ds, {1: history[1], 3: history[3]})
        record.write_bytes(original)
        assert {p: (ds / p).read_bytes() for p in on_disk(ds)} == files_before, where
    assert_intact(exe, ds, history)

    # An append on top of a damaged older record extends the intact newest version.
    flip(record, offsets[1])
    added = make_tree(tmp_path / "a2", seed=82, classes=2, files_per_class=6, prefix="a2-")
    ok(exe, "pack", "-q", "--append", "--chunk-size", "16KiB", tmp_path / "a2", ds)
    history[4] = published_version(ds, 4)
    assert history[4] == {**history[3], **added}
    assert_intact(exe, ds, {v: history[v] for v in (1, 3, 4)})

    # An append on top of a damaged newest record fails, naming it, and publishes nothing: it
    # must not publish a version 5 from version 3 that would hide version 4's files.
    newest = ds / "versions" / record_name(4)
    flip(newest, newest.read_text().index("\nfiles ") + 7)
    files_before = on_disk(ds)
    make_tree(tmp_path / "a3", seed=83, classes=2, files_per_class=6, prefix="a3-")
    r = run(exe, "pack", "-q", "--append", "--chunk-size", "16KiB", tmp_path / "a3", ds)
    assert r.returncode > 0, r
    assert f"versions/{record_name(4)}" in r.stderr and "Corruption" in r.stderr, r.stderr
    assert versions_of(ds) == [1, 2, 3, 4] and on_disk(ds) == files_before
    r = run(exe, "verify", ds)
    assert r.returncode == 3 and f"versions/{record_name(4)}" in r.stdout, r.stdout
    assert_intact(exe, ds, {v: history[v] for v in (1, 3)})


def published_version(ds: Path, v: int) -> dict[str, bytes]:
    return dataset_contents(stoker.Dataset(str(ds), version=v))


def test_f_verify_of_a_corrupt_record_reports_the_version_asked_for(tmp_path, stoker_exe):
    exe = stoker_exe
    ds, base = base_dataset(exe, tmp_path)
    make_tree(tmp_path / "a", seed=90, classes=2, files_per_class=4, prefix="a-")
    ok(exe, "pack", "-q", "--append", tmp_path / "a", ds)
    flip(ds / "versions" / record_name(1), 20)
    r = run(exe, "verify", ds, "--version", 1, "--json")
    assert r.returncode == 3
    report = json.loads(r.stdout)
    assert report["ok"] is False and any(record_name(1) in p for p in report["problems"])
    human = run(exe, "verify", ds, "--version", 1)
    assert human.returncode == 3 and record_name(1) in human.stdout, human.stdout
    expect(report["version"] == 1 and f"{ds}: version 1," in human.stdout,
           f"--json version {report['version']}; {human.stdout.strip()}")


# --- (g) concurrent appends to one s3:// dataset --------------------------------------------

@pytest.mark.s3
@pytest.mark.slow
@s3_skip
def test_g_concurrent_appends_to_s3_all_land(s3_server, s3, bucket, tmp_path, stoker_exe,
                                             monkeypatch):
    """4 `pack --append` at once to one s3:// dataset (the exclusive create is a PUT with
    If-None-Match: *): all exit 0, each writer's files land whole in a version of its own."""
    exe = stoker_exe
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(s3_server["env"])
    uri = f"s3://{bucket}/ds"
    base = make_tree(tmp_path / "base", seed=3, classes=2, files_per_class=5)
    ok(exe, "pack", "-q", tmp_path / "base", uri, env=env)
    trees = {f"w{w}": make_tree(tmp_path / f"w{w}", seed=30 + w, classes=2, files_per_class=8,
                                prefix=f"w{w}-") for w in range(4)}
    procs = {name: pack_popen([exe, "pack", "--json", "--append", str(tmp_path / name), uri],
                              env=env) for name in trees}
    results = {name: finish(p) for name, p in procs.items()}
    for name, (rc, out, err) in results.items():
        assert rc == 0, f"{name}: exit {rc}: {err}"
        assert json.loads(out)["files_added"] == len(trees[name])
    assert sorted(json.loads(out)["version"] for _, out, _ in results.values()) == [2, 3, 4, 5]
    listed = json.loads(ok(exe, "versions", uri, "--json", env=env).stdout)
    assert [v["version"] for v in listed] == [1, 2, 3, 4, 5]
    assert "checked: OK" in ok(exe, "verify", uri, env=env).stdout

    # Every version, byte for byte: on a copy boto3 downloads (reading 200 files one GET each
    # through the gateway would take most of a minute), and a few files through s3:// itself.
    local = tmp_path / "copy"
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="ds/"):
        for o in page.get("Contents", []):
            dest = local / o["Key"][len("ds/"):]
            dest.parent.mkdir(parents=True, exist_ok=True)
            s3.download_file(bucket, o["Key"], str(dest))
    history = published(local)
    assert sorted(history) == [1, 2, 3, 4, 5] and history[1] == base
    owners = assert_each_version_adds_one_whole_writer(history, trees)
    assert sorted(owners.values()) == sorted(trees)  # each writer in a version of its own
    assert history[5] == {**base, **{p: b for t in trees.values() for p, b in t.items()}}
    assert_intact(exe, local, history)
    for k in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(k)
    for k, v in s3_server["env"].items():
        monkeypatch.setenv(k, v)  # for stoker.Dataset in this process
    for v, name in owners.items():
        ds = stoker.Dataset(uri, version=v)
        path = sorted(trees[name])[-1]
        assert ds.num_files == len(history[v]) and ds.read(ds.find(path)) == trees[name][path]
