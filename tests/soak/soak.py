"""The soak test behind scripts/soak: hours of mixed traffic on one dataset, compressed into a
seeded, reproducible sequence of operations, each checked to the byte and to the exit code.

Operations (drawn with fixed weights from a seeded generator, so a seed names one sequence;
the instants at which processes are killed vary from run to run, and every outcome a kill may
have is checked):

  append           stoker pack --append of new files (local)            exit 0, a new version
  append_remote    the same through `stoker serve --writable`            exit 0, a new version
  appends_at_once  three appends side by side                           all exit 0, all land
  append_killed    an append killed with SIGKILL at a random instant     the newest version is
                                                                         the old one or holds
                                                                         every new file
  read             files of the newest and of an older version, by the Python API
  read_remote      files over stoker://
  epoch            a full stoker.Loader epoch (chunk shuffle)           every sample once
  node_epoch       an epoch through a `stoker node` daemon, which is killed (SIGKILL) mid-way
                   in half of the runs                                  exit 0, every sample once
  serve_killed     the server killed with SIGKILL and restarted
  verify, compact, gc                                                   exit 0, contents kept

What a version holds is tracked as {path: SHA-256}; versions never change, so any listed
version is checked against what it held when published.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import stoker

WEIGHTS = {"append": 4, "append_remote": 1, "appends_at_once": 1, "append_killed": 2,
           "read": 4, "read_remote": 2, "epoch": 1, "node_epoch": 1, "serve_killed": 1,
           "verify": 1, "compact": 1, "gc": 1}
SECRET = "soak-secret-0123456789abcdef"


class SoakFailure(Exception):
    pass


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Soak:
    def __init__(self, root: Path, seed: int, exe: str):
        self.root, self.exe = root, exe
        self.rng = random.Random(seed)
        self.ds = root / "ds"
        self.secret = root / "secret"
        self.secret.write_text(SECRET + "\n")
        self.secret.chmod(0o600)
        self.env = dict(os.environ, STOKER_SECRET_FILE=str(self.secret))
        self.held: dict[int, dict[str, str]] = {}  # version -> {path: sha256}
        self.batches = 0
        self.server: subprocess.Popen | None = None
        self.server_uri = ""
        self.counts: dict[str, int] = {}
        self.bytes_checked = 0

    # ---- helpers ----
    def run(self, *args, expect: int = 0, timeout: float = 600) -> subprocess.CompletedProcess:
        proc = subprocess.run([self.exe, *map(str, args)], capture_output=True, text=True,
                              timeout=timeout, env=self.env)
        if proc.returncode != expect:
            raise SoakFailure(f"stoker {' '.join(map(str, args))}: exit {proc.returncode} "
                              f"(expected {expect}): {proc.stderr.strip()[-2000:]}")
        return proc

    def new_files(self, count: int) -> tuple[Path, dict[str, bytes]]:
        """A tree of `count` new files under class directories c0..c9, unique paths."""
        self.batches += 1
        src = self.root / f"in-{self.batches:06d}"
        files = {}
        for i in range(count):
            size = self.rng.choice([0, self.rng.randint(1, 300), self.rng.randint(300, 40_000)])
            rel = f"c{self.rng.randrange(10)}/b{self.batches:06d}-{i:04d}.bin"
            files[rel] = self.rng.randbytes(size)
        for rel, data in files.items():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            (src / rel).write_bytes(data)
        return src, files

    def versions(self) -> list[int]:
        out = json.loads(self.run("versions", "--json", self.ds).stdout)
        return sorted(v["version"] for v in out)

    def newest(self) -> int:
        return max(self.held)

    def published(self, version: int, added: dict[str, bytes], base: int) -> None:
        if version in self.held:
            raise SoakFailure(f"version {version} published twice")
        self.held[version] = {**self.held[base], **{p: digest(d) for p, d in added.items()}}

    def check(self, ds: stoker.Dataset, version: int, paths: list[str]) -> None:
        want = self.held[version]
        if ds.num_files != len(want):
            raise SoakFailure(f"version {version}: {ds.num_files} files, expected {len(want)}")
        for path in paths:
            data = ds.read(path)
            self.bytes_checked += len(data)
            if digest(data) != want[path]:
                raise SoakFailure(f"version {version}: {path}: bytes differ")

    def check_whole(self, uri: str, version: int) -> None:
        self.check(stoker.Dataset(uri, version=version), version, sorted(self.held[version]))

    def forget_collected(self) -> None:
        listed = set(self.versions())
        for v in [v for v in self.held if v not in listed]:
            del self.held[v]

    def ensure_server(self) -> str:
        if self.server is None or self.server.poll() is not None:
            self.server = subprocess.Popen(
                [self.exe, "serve", "--listen", "127.0.0.1:0", "--dataset", f"soak={self.ds}",
                 "--secret-file", str(self.secret), "--writable"],
                stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=self.env)
            line = self.server.stderr.readline()
            m = re.match(r"serving 1 dataset\(s\) on 127\.0\.0\.1:(\d+)", line)
            if not m:
                raise SoakFailure(f"stoker serve did not start: {line!r}")
            self.server_uri = f"stoker://127.0.0.1:{m.group(1)}/soak"
        return self.server_uri

    def append_via(self, target: str, count: int) -> None:
        base = self.newest()
        src, files = self.new_files(count)
        out = json.loads(self.run("pack", "--append", "--json", "--chunk-size", "64KiB", src,
                                  target).stdout)
        self.published(out["version"], files, base)

    # ---- operations ----
    def op_append(self) -> None:
        self.append_via(str(self.ds), self.rng.randint(1, 120))

    def op_append_remote(self) -> None:
        self.append_via(self.ensure_server(), self.rng.randint(1, 60))

    def op_appends_at_once(self) -> None:
        inputs = [self.new_files(self.rng.randint(5, 80)) for _ in range(3)]
        procs = [subprocess.Popen([self.exe, "pack", "--append", "--json", "--chunk-size",
                                   "64KiB", str(src), str(self.ds)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=self.env)
                 for src, _ in inputs]
        versions = []
        for proc, (src, files) in zip(procs, inputs):
            out, err = proc.communicate(timeout=600)
            if proc.returncode != 0:
                raise SoakFailure(f"concurrent append of {src}: exit {proc.returncode}: {err}")
            versions.append((json.loads(out)["version"], files))
        for version, files in sorted(versions, key=lambda v: v[0]):  # each on the one before
            self.published(version, files, self.newest())

    def op_append_killed(self) -> None:
        base = self.newest()
        src, files = self.new_files(self.rng.randint(200, 600))
        proc = subprocess.Popen([self.exe, "pack", "--append", "--chunk-size", "16KiB", str(src),
                                 str(self.ds)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env=self.env)
        time.sleep(self.rng.uniform(0, 0.4))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        newest = self.versions()[-1]
        if newest == base:
            self.counts["append_killed_before_publish"] = (
                self.counts.get("append_killed_before_publish", 0) + 1)
        else:  # it published before the kill: all of it
            self.published(newest, files, base)
        self.check_whole(str(self.ds), newest)

    def op_read(self) -> None:
        newest = self.newest()
        paths = sorted(self.held[newest])
        self.check(stoker.Dataset(self.ds), newest, self.rng.sample(paths, min(300, len(paths))))
        older = self.rng.choice(sorted(self.held))
        paths = sorted(self.held[older])
        self.check(stoker.Dataset(self.ds, version=older), older,
                   self.rng.sample(paths, min(100, len(paths))))

    def op_read_remote(self) -> None:
        uri = self.ensure_server()
        newest = self.newest()
        paths = sorted(self.held[newest])
        os.environ["STOKER_SECRET_FILE"] = str(self.secret)
        self.check(stoker.Dataset(uri), newest, self.rng.sample(paths, min(200, len(paths))))

    def epoch_script(self) -> str:
        # The result goes to a file, not stdout: CPython 3.11's print() of a large string to a
        # pipe was seen to lose data when the write was interrupted (a partial write).
        return ("import hashlib, json, stoker\n"
                f"seen = {{}}\n"
                f"for data, label, path in stoker.Loader({str(self.ds)!r}, shuffle='chunk', "
                f"seed={self.rng.randrange(1 << 30)}, window=4):\n"
                "    assert path not in seen, path\n"
                "    seen[path] = hashlib.sha256(data).hexdigest()\n"
                f"open({str(self.root / 'epoch.json')!r}, 'w').write(json.dumps(seen))\n")

    def check_epoch(self) -> None:
        seen = json.loads((self.root / "epoch.json").read_text())
        newest = self.newest()
        if seen != self.held[newest]:
            raise SoakFailure(f"an epoch of version {newest} differs from what it holds")

    def op_epoch(self) -> None:
        proc = subprocess.run([sys.executable, "-c", self.epoch_script()],
                              capture_output=True, text=True, timeout=600, env=self.env)
        if proc.returncode != 0:
            raise SoakFailure(f"epoch: exit {proc.returncode}: {proc.stderr[-2000:]}")
        self.check_epoch()

    def op_node_epoch(self) -> None:
        port = free_port()
        sock = self.root / "node.sock"
        log = open(self.root / "node.log", "ab")
        node = subprocess.Popen(
            [self.exe, "node", "--job", "soak", "--store", str(self.ds), "--listen",
             f"127.0.0.1:{port}", "--peers", f"127.0.0.1:{port}", "--socket", str(sock),
             "--memory-limit", "256MiB", "--secret-file", str(self.secret)],
            stdout=subprocess.DEVNULL, stderr=log, env=self.env)
        try:
            deadline = time.monotonic() + 30
            while not sock.exists():
                if node.poll() is not None or time.monotonic() > deadline:
                    raise SoakFailure(f"stoker node did not start (exit {node.poll()})")
                time.sleep(0.05)
            trainer = subprocess.Popen([sys.executable, "-c", self.epoch_script()],
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                       env=dict(self.env, STOKER_NODE=str(sock)))
            kill = self.rng.random() < 0.5
            if kill:  # the daemon dies mid-epoch: the trainer reads from storage instead
                time.sleep(self.rng.uniform(0, 0.5))
                node.send_signal(signal.SIGKILL)
            out, err = trainer.communicate(timeout=600)
            if trainer.returncode != 0:
                raise SoakFailure(f"epoch through a node (killed: {kill}): exit "
                                  f"{trainer.returncode}: {err[-2000:]}")
            self.check_epoch()
        finally:
            if node.poll() is None:
                node.send_signal(signal.SIGTERM)
                node.wait(timeout=60)
            log.close()
            sock.unlink(missing_ok=True)

    def op_serve_killed(self) -> None:
        self.ensure_server()
        self.server.send_signal(signal.SIGKILL)
        self.server.wait()
        self.op_read_remote()  # a new server, on another port

    def op_verify(self) -> None:
        out = json.loads(self.run("verify", "--json", self.ds).stdout)
        if not out["ok"] or out["files_checked"] != len(self.held[self.newest()]):
            raise SoakFailure(f"verify: {out}")

    def op_compact(self) -> None:
        base = self.newest()
        out = json.loads(self.run("compact", "--json", self.ds).stdout)
        if out["version"] != 0:  # 0: nothing was worth merging, no version published
            self.published(out["version"], {}, base)  # the same files in fewer segments
        self.check_whole(str(self.ds), self.newest())

    def op_gc(self) -> None:
        # Killed appends leave chunks no version lists; with no writer at work, gc may take
        # them at once. Older versions beyond the newest 5 go too.
        self.run("gc", self.ds, "--keep", "5", "--grace", "0s", "--writer-timeout", "0s")
        self.forget_collected()
        self.check_whole(str(self.ds), self.newest())

    # ---- the run ----
    def start(self) -> None:
        src, files = self.new_files(300)
        out = json.loads(self.run("pack", "--json", "--chunk-size", "64KiB", src, self.ds).stdout)
        self.held[out["version"]] = {p: digest(d) for p, d in files.items()}

    def finish(self) -> None:
        self.op_verify()
        for version in sorted(self.held):  # every version still listed, every byte
            self.check_whole(str(self.ds), version)
        if self.server is not None and self.server.poll() is None:
            self.server.send_signal(signal.SIGTERM)
            if self.server.wait(timeout=60) != 0:
                raise SoakFailure(f"stoker serve exited {self.server.returncode} on SIGTERM")

    def step(self) -> str:
        name = self.rng.choices(list(WEIGHTS), weights=list(WEIGHTS.values()))[0]
        try:
            getattr(self, "op_" + name)()
        except Exception as e:
            raise SoakFailure(f"{name}: {type(e).__name__}: {e}") from e
        self.counts[name] = self.counts.get(name, 0) + 1
        return name


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=180, help="how long to run")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dir", required=True, help="an empty working directory")
    parser.add_argument("--stoker", required=True, help="the stoker CLI")
    args = parser.parse_args()
    root = Path(args.dir)
    root.mkdir(parents=True, exist_ok=True)
    soak = Soak(root, args.seed, args.stoker)
    start = time.monotonic()
    done: list[str] = []
    try:
        soak.start()
        last_report = start
        while time.monotonic() - start < args.seconds:
            done.append(soak.step())
            if time.monotonic() - last_report > 30:
                last_report = time.monotonic()
                print(f"soak: {len(done)} operations, version {soak.newest()}, "
                      f"{len(soak.held[soak.newest()])} files, "
                      f"{soak.bytes_checked / 1e6:.0f} MB checked", flush=True)
        soak.finish()
    except Exception as e:  # noqa: BLE001 — every failure ends the soak with its story
        if soak.server is not None and soak.server.poll() is None:
            soak.server.kill()
        print(f"soak: FAILED after {len(done)} operations (seed {args.seed}; last: "
              f"{done[-5:]}): {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    summary = {"seed": args.seed, "seconds": round(time.monotonic() - start),
               "operations": len(done), "by_kind": soak.counts, "versions": soak.newest(),
               "files": len(soak.held[soak.newest()]), "bytes_checked": soak.bytes_checked}
    print("soak: OK " + json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
