"""A private one-host Slurm cluster for tests: Debian's slurmctld and slurmd, started from
scratch in a directory of their own, with no system-wide state.

    import cluster
    reason = cluster.available()        # None, or why it cannot run here (packages missing, ...)
    with cluster.SlurmCluster(tmp_dir, nodes=4) as c:
        job = c.sbatch("--array=0-3", "-o", f"{tmp_dir}/out-%a.txt", script)
        tasks = c.wait(job)             # [{"task": 0, "state": "COMPLETED", "exit": 0, ...}, ...]
        c.run("scontrol", "show", "job", str(job))   # any client command, at this cluster

What it starts, all as root, all in the foreground of child processes of this one (so they are
stopped by PID):

- munged with its own random key, socket, PID and seed files (Debian's Slurm 22.05 signs its
  messages and job credentials with MUNGE; AuthInfo=socket=... points Slurm at this munged, not
  at the system's /run/munge);
- slurmctld on a free loopback port, its state, logs and PID file in the directory;
- one slurmd per node (`slurmd -N n<k>`, Debian builds Slurm with multiple-slurmd support), each
  on its own port, `CPUs=cpus_per_node`, its spool directory in the directory.

The backfill scheduler (a pass every second), which heterogeneous jobs need. No accounting
(sacct is unavailable; `scontrol show job` reports states and exit codes while the jobs are
younger than MinJobAge, 300 s), ProctrackType=proctrack/linuxproc and TaskPlugin=task/none (no
cgroups). Client commands find the cluster through SLURM_CONF: `env`
is this process's environment with every other SLURM_* variable removed (a test run inside a
Slurm job must not submit to that job's cluster) and SLURM_CONF set.

stop() cancels every job, stops the daemons (SIGTERM, then SIGKILL), kills any job process
left behind (found by SLURM_CONF=<this cluster's slurm.conf> in its environment) and, if the
cluster made its directory, removes it. It also runs at interpreter exit.

Run by hand: `python3 tests/slurm/cluster.py [DIR]` starts a cluster, prints the SLURM_CONF to
export, and stops it on Ctrl-C.
"""
from __future__ import annotations

import atexit
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REQUIRED_EXES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scontrol",
                 "scancel")
INSTALL_HINT = "apt-get install --no-install-recommends slurmctld slurmd slurm-client munge"

_live: list["SlurmCluster"] = []


class SlurmError(RuntimeError):
    pass


def available() -> str | None:
    """None if a private cluster can be started here, else the reason it cannot."""
    if not sys.platform.startswith("linux"):
        return "the Slurm test cluster needs Linux"
    missing = [exe for exe in REQUIRED_EXES if shutil.which(exe) is None]
    if missing:
        return f"Slurm not installed (no {', '.join(missing)}; {INSTALL_HINT})"
    if os.geteuid() != 0:
        return "the Slurm test cluster runs its daemons as root (SlurmUser=root)"
    return None


def _free_ports(count: int) -> list[int]:
    """Ports the kernel hands out now on 127.0.0.1 (held together, so they are distinct)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class SlurmCluster:
    def __init__(self, root: str | os.PathLike | None = None, *, nodes: int = 4,
                 cpus_per_node: int = 1, name: str = "stokertest"):
        self._made_root = root is None
        self.root = Path(root if root is not None else tempfile.mkdtemp(prefix="stoker-slurm-"))
        self.nodes = [f"n{k}" for k in range(nodes)]
        self.cpus_per_node = cpus_per_node
        self.name = name
        self.conf = self.root / "slurm.conf"
        self.munge_socket = self.root / "munge" / "munge.sock"
        self._procs: dict[str, subprocess.Popen] = {}
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        self.env["SLURM_CONF"] = str(self.conf)

    # --- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> "SlurmCluster":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self, timeout: float = 60) -> None:
        reason = available()
        if reason:
            raise SlurmError(reason)
        if len(str(self.root)) > 60:
            # munged's socket and slurmd's step sockets live in it: sun_path holds 107 bytes.
            raise SlurmError(f"{self.root}: too long a path for the cluster's Unix sockets; "
                             "give a shorter directory (or none: a new one under $TMPDIR)")
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        _live.append(self)
        try:
            self._start_munged()
            self._write_conf()
            self._spawn("slurmctld", ["slurmctld", "-D", "-f", str(self.conf)])
            for node in self.nodes:
                self._spawn(f"slurmd-{node}", ["slurmd", "-D", "-N", node, "-f", str(self.conf)])
            self._wait_idle(timeout)
        except BaseException:
            self.stop()
            raise

    def _spawn(self, name: str, argv: list[str]) -> None:
        out = open(self.root / f"{name}.out", "wb")
        self._procs[name] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                             stderr=subprocess.STDOUT, env=self.env,
                                             cwd=self.root, start_new_session=True)
        out.close()

    def _start_munged(self) -> None:
        d = self.munge_socket.parent
        d.mkdir(mode=0o700, exist_ok=True)
        key = d / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        # --force: munged refuses root and a socket under world-writable /tmp without it.
        self._spawn("munged", ["munged", "--foreground", "--force",
                               f"--socket={self.munge_socket}", f"--key-file={key}",
                               f"--pid-file={d / 'munged.pid'}", f"--seed-file={d / 'munged.seed'}",
                               f"--log-file={d / 'munged.log'}"])
        deadline = time.monotonic() + 20
        while not self.munge_socket.exists():
            self._check_alive()
            if time.monotonic() > deadline:
                raise SlurmError(f"munged made no socket in 20 s\n{self.logs()}")
            time.sleep(0.05)

    def _write_conf(self) -> None:
        r = self.root
        ctld_port, *node_ports = _free_ports(1 + len(self.nodes))
        for node in self.nodes:
            (r / "spool" / node).mkdir(parents=True, exist_ok=True)
        (r / "state").mkdir(exist_ok=True)
        lines = [
            f"ClusterName={self.name}",
            "SlurmctldHost=localhost",
            f"SlurmctldPort={ctld_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            f"StateSaveLocation={r / 'state'}",
            f"SlurmdSpoolDir={r / 'spool'}/%n",
            f"SlurmctldPidFile={r / 'slurmctld.pid'}",
            f"SlurmdPidFile={r / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={r / 'slurmctld.log'}",
            f"SlurmdLogFile={r / 'slurmd-%n.log'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            # backfill, not builtin: slurmctld refuses heterogeneous jobs (`#SBATCH hetjob`,
            # deploy/slurm/train-feeders.sbatch) without it ("rejected as sched/backfill is not
            # configured"); a backfill pass every second starts them promptly.
            "SchedulerType=sched/backfill",
            "SchedulerParameters=bf_interval=1",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "MpiDefault=none",
            "MailProg=/bin/true",
            "ReturnToService=2",
            "KillWait=2",
        ]
        for node, port in zip(self.nodes, node_ports):
            lines.append(f"NodeName={node} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port} "
                         f"CPUs={self.cpus_per_node} State=UNKNOWN")
        lines.append("PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
        self.conf.write_text("\n".join(lines) + "\n")

    def _check_alive(self) -> None:
        for name, p in self._procs.items():
            if p.poll() is not None:
                raise SlurmError(f"{name} exited with {p.returncode}\n{self.logs()}")

    def _wait_idle(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        states: dict[str, str] = {}
        while True:
            self._check_alive()
            r = self.run("sinfo", "-h", "-N", "-o", "%N %t", check=False)
            if r.returncode == 0:
                states = dict(line.split() for line in r.stdout.splitlines() if line.strip())
                if sorted(states) == sorted(self.nodes) and all(s == "idle" for s in states.values()):
                    return
            if time.monotonic() > deadline:
                raise SlurmError(f"nodes not idle after {timeout} s: {states or r.stderr}\n"
                                 f"{self.logs()}")
            time.sleep(0.2)

    def stop(self) -> None:
        if self not in _live:
            return
        _live.remove(self)
        if "slurmctld" in self._procs and self._procs["slurmctld"].poll() is None:
            self.run("scancel", "--user=root", check=False, timeout=10)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                r = self.run("squeue", "-h", "-o", "%i", check=False, timeout=10)
                if r.returncode != 0 or not r.stdout.strip():
                    break
                time.sleep(0.2)
        # slurmd before slurmctld, munged last: each still has what it needs while it stops.
        for name in sorted(self._procs, key=lambda n: (n == "munged", n == "slurmctld")):
            p = self._procs[name]
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        self._kill_leftover_job_processes()
        self._procs.clear()
        if self._made_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def _kill_leftover_job_processes(self) -> None:
        """slurmstepd and job processes are not our children; they carry our SLURM_CONF."""
        marker = f"SLURM_CONF={self.conf}".encode()
        for pid_dir in Path("/proc").iterdir():
            if not pid_dir.name.isdigit() or int(pid_dir.name) == os.getpid():
                continue
            try:
                environ = (pid_dir / "environ").read_bytes()
            except OSError:
                continue
            if marker in environ.split(b"\0"):
                try:
                    os.kill(int(pid_dir.name), signal.SIGKILL)
                except OSError:
                    pass

    # --- clients -----------------------------------------------------------------------------

    def run(self, *argv: str, check: bool = True, timeout: float = 30,
            **kwargs) -> subprocess.CompletedProcess:
        r = subprocess.run([str(a) for a in argv], capture_output=True, text=True,
                           env=kwargs.pop("env", self.env), timeout=timeout,
                           stdin=subprocess.DEVNULL, **kwargs)
        if check and r.returncode != 0:
            raise SlurmError(f"{' '.join(map(str, argv))} exited {r.returncode}: {r.stderr}")
        return r

    def sbatch(self, *args: str, env: dict[str, str] | None = None) -> int:
        """Submits a batch job (`sbatch --parsable ARGS`); returns its job id."""
        r = self.run("sbatch", "--parsable", *args, env=env or self.env)
        return int(r.stdout.strip().split(";")[0])

    def jobs(self, job_id: int) -> list[dict]:
        """Every record of job `job_id` (one per array task once they ran): {"id", "task",
        "state", "exit", "signal", "reason", "node"}; "task" is None for a plain job."""
        r = self.run("scontrol", "-o", "show", "job", str(job_id))
        out = []
        for line in r.stdout.splitlines():
            f = dict(m.groups() for m in re.finditer(r"(\w+)=(\S*)", line))
            if "JobId" not in f:
                continue
            code, sig = f.get("ExitCode", "0:0").split(":")
            task = f.get("ArrayTaskId")
            out.append({"id": int(f["JobId"]),
                        "task": int(task) if task and task.isdigit() else task,
                        "state": f.get("JobState"), "exit": int(code), "signal": int(sig),
                        "reason": f.get("Reason"), "node": f.get("NodeList")})
        return out

    def wait(self, job_id: int, timeout: float = 60) -> list[dict]:
        """Waits until no part of job `job_id` is pending or running; returns jobs(job_id)
        sorted by array task."""
        deadline = time.monotonic() + timeout
        while True:
            r = self.run("squeue", "-h", "-j", str(job_id), "-o", "%i %T", check=False)
            if r.returncode == 0 and not r.stdout.strip():
                return sorted(self.jobs(job_id), key=lambda j: str(j["task"]).zfill(10))
            if time.monotonic() > deadline:
                raise SlurmError(f"job {job_id} still queued after {timeout} s:\n{r.stdout}"
                                 f"{r.stderr}\n{self.logs()}")
            time.sleep(0.2)

    def logs(self, lines: int = 15) -> str:
        """The last lines of every daemon's log, for failure messages."""
        parts = []
        for p in sorted(self.root.glob("*.out")) + sorted(self.root.glob("*.log")):
            text = p.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {p.name}\n" + "\n".join(text))
        return "\n".join(parts)


@atexit.register
def _stop_all() -> None:
    for c in list(_live):
        c.stop()


if __name__ == "__main__":
    c = SlurmCluster(sys.argv[1] if len(sys.argv) > 1 else None)
    c.start()
    print(f"export SLURM_CONF={c.conf}   # {len(c.nodes)} nodes idle; Ctrl-C stops the cluster",
          flush=True)
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        c.stop()
