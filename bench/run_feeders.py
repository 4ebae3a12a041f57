#!/usr/bin/env python3
"""Feeders (issue 39, decision 0013): other machines' CPUs making a trainer's batches.

    sudo .venv/bin/python bench/run_feeders.py [--feeders 0,1,2,3,4,5,6] [--cpu 0.25]
        [--images 3000] [--link 200mbit] [--link-feeders 2] [--ray 0,2,6] [--skip-link]
        [--repeat 3] [--busy 6]

CPU quotas (cgroup v1 `cpu`, ../shared/TESTBED.md) stand in for machines' core counts. Hosts on
the network-namespace testbed (tests/netns/testbed.py): `trainer` and f1..fN, each process in
its own cgroup of --cpu CPU (0.25: a quarter of a core).

  scaling  for N in --feeders: the trainer (stoker.ImageLoader, threads=1) plus N `stoker feed
           --threads 1` hosts; images/s over one pass of --images ImageNet-like JPEGs
           (RandomResizedCrop 224 + flip, uint8 NHWC: what a GPU normalizes; batch 256). Target:
           images/s(N) >= 0.9 x (N + 1) x images/s(0). --repeat rounds over every N; each
           N's median run is its result.
  busy     the trainer alone again, beside N (--busy) hosts each running a loader of its own
           in --cpu: the 0.25-CPU loader's rate on a machine as loaded as with N feeders.
  link     the trainer's link shaped to --link (tbf), --link-feeders feeders without a CPU
           quota (the trainer keeps --cpu): the image bytes received from the feeders per second
           of the pass vs the link's rate. Target: >= 90 %.
  ray      Ray Data (bench/feeders_peers/ray_data_pass.py in $STOKER_BENCH_CACHE/venv-ray,
           bench/setup_peers.sh ray): the same JPEGs and transform in map_batches (PIL),
           iter_torch_batches(256), the whole Ray run in one cgroup of (N + 1) x --cpu CPU: the
           CPU the stoker row with N feeders uses in all. Target: stoker >= 2x.

Every row checks what it measured: the stoker rows' batches are counted and the feeders' share
reported (samples made by feeders / all). Results JSON in $STOKER_BENCH_CACHE/results/
feeders-*.json and a table on stdout.
"""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "netns"))
import benchlib  # noqa: E402
from testbed import Testbed, wait_for_port  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
PYTHON = REPO / ".venv" / "bin" / "python"
STOKER = REPO / ".venv" / "bin" / "stoker"
CGROUPS = Path("/sys/fs/cgroup/cpu")
CPUACCT = Path("/sys/fs/cgroup/cpuacct")  # mounted apart from cpu here: CPU time used
PORT = 7300

# The trainer: one pass, timed from the end of the warm-up batches to the last batch.
TRAINER = r"""
import json, sys, time
import stoker
ds, feeders, warmup = sys.argv[1], [f for f in sys.argv[2].split(",") if f], int(sys.argv[3])
loader = stoker.ImageLoader(ds, 256, size=224, dtype="uint8", layout="NHWC", threads=1,
                            pin_memory=False, seed=0, feeders=feeders)
images = batches = 0
start = time.monotonic()
for i, (x, y) in enumerate(loader):
    if i == warmup - 1:
        start, images = time.monotonic(), 0
    else:
        images += len(y)
    batches += 1
seconds = time.monotonic() - start
s = loader.stats()
print(json.dumps({"images": images, "seconds": seconds, "images_per_second": images / seconds,
                  "batches": batches, "pass_seconds": s["seconds"], "samples": s["samples"],
                  "feeders": s.get("feeders", []), "local_slices": s.get("local_slices", 0),
                  "redone_slices": s.get("redone_slices", 0),
                  "stall_seconds": s["stall_seconds"], "starved": s["starved_fraction"]}))
"""


# A machine's worth of load beside a baseline run: one loader's passes, over and over, in its own
# namespace and quota (what a feeder's decoding costs the machine, without the feeding).
BUSY = r"""
import sys
import stoker
while True:
    for _ in stoker.ImageLoader(sys.argv[1], 256, size=224, dtype="uint8", layout="NHWC",
                                threads=1, pin_memory=False, seed=1):
        pass
"""


class Group:
    """A process group's cgroups: cpu (the quota) and cpuacct (the CPU time it used)."""

    def __init__(self, name: str, cpu: float | None):
        self.cpu = CGROUPS / f"stoker-bench-{name}"
        self.acct = CPUACCT / f"stoker-bench-{name}"
        for path in (self.cpu, self.acct):
            path.mkdir(exist_ok=True)
        (self.cpu / "cpu.cfs_period_us").write_text("100000")
        (self.cpu / "cpu.cfs_quota_us").write_text(str(int(cpu * 100000)) if cpu else "-1")

    def add(self, pid: int) -> None:
        for path in (self.cpu, self.acct):
            (path / "cgroup.procs").write_text(str(pid))

    def cpu_seconds(self) -> float:
        return int((self.acct / "cpuacct.usage").read_text()) / 1e9


@contextlib.contextmanager
def cpu_cgroups(names: list[str], cpu: float | None):
    """A Group per name with a quota of `cpu` CPUs (None: no quota); removed at the end (their
    processes must be gone)."""
    made = []
    try:
        for name in names:
            made.append(Group(name, cpu))
        yield {name: group for name, group in zip(names, made, strict=True)}
    finally:
        for group in made:
            for path in (group.cpu, group.acct):
                for _ in range(50):
                    try:
                        path.rmdir()
                        break
                    except OSError:
                        time.sleep(0.1)


def in_group(group: Group, argv: list[str]) -> list[str]:
    """argv, run inside `group` (the shell joins it, then execs: children inherit it)."""
    join = f"echo $$ > {group.cpu}/cgroup.procs && echo $$ > {group.acct}/cgroup.procs"
    return ["sh", "-c", f'{join} && exec "$@"', "sh", *map(str, argv)]


def join(group: Group, proc: subprocess.Popen) -> None:
    """Moves a process started in a namespace into `group`, from outside: `ip netns exec`
    mounts its own /sys, without the cgroup file systems. The process has not forked yet (the
    trainer and `stoker feed` never do), and its threads made later are in the group."""
    group.add(proc.pid)


def run_stoker(ds: Path, secret: Path, n: int, cpu: float, *, link: str | None = None,
               feeder_cpu: float | None = 0.0, warmup: int = 2, busy: bool = False) -> dict:
    """One pass of the trainer with n feeders on the testbed; feeder_cpu 0.0: --cpu each.
    busy: the trainer alone, and n hosts each running BUSY (a loader, not a feeder) in --cpu,
    so the machine is as loaded as with n feeders while the trainer makes everything itself."""
    hosts = ["trainer"] + [f"f{i}" for i in range(1, n + 1)]
    feeder_quota = cpu if feeder_cpu == 0.0 else feeder_cpu
    with Testbed("stkb-feed", hosts) as tb, \
            cpu_cgroups(["trainer"], cpu) as trainer_groups, \
            cpu_cgroups(hosts[1:], feeder_quota) as feeder_groups:
        if link:
            tb.shape(tb["trainer"], link)
        procs = []
        for name in hosts[1:]:
            host = tb[name]
            if busy:
                proc = host.popen([str(PYTHON), "-c", BUSY, str(ds)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                join(feeder_groups[name], proc)
            else:
                proc = host.popen([STOKER, "feed", "--job", "bench", "--listen",
                                   f"{host.ip}:{PORT}", "--secret-file", str(secret),
                                   "--threads", "1"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                join(feeder_groups[name], proc)
                wait_for_port(tb["trainer"], host.ip, PORT)
            procs.append((host, proc))
        if busy:
            time.sleep(3)  # the loaders past their start-up: decoding
        addresses = "" if busy else ",".join(f"{tb[name].ip}:{PORT}" for name in hosts[1:])
        env = dict(os.environ, STOKER_SECRET_FILE=str(secret))
        env.pop("STOKER_FEEDERS", None)
        trainer = tb["trainer"].popen([str(PYTHON), "-c", TRAINER, str(ds), addresses,
                                       str(warmup)], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True)
        join(trainer_groups["trainer"], trainer)
        stdout, stderr = trainer.communicate(timeout=1800)
        for host, proc in procs:
            host.kill(proc)
        cpu_used = {"trainer": trainer_groups["trainer"].cpu_seconds(),
                    "feeders": sum(g.cpu_seconds() for g in feeder_groups.values())}
        if trainer.returncode != 0:
            raise RuntimeError(f"trainer with {n} feeders failed: {stderr[-3000:]}")
        out = json.loads(stdout.strip().splitlines()[-1])
    out["cpu_seconds"] = cpu_used  # the whole pass's, start-up included
    made = sum(f["samples"] for f in out["feeders"])
    out["feeder_share"] = made / out["samples"] if out["samples"] else 0.0
    out["feeder_pixel_bytes"] = sum(f["pixel_bytes"] for f in out["feeders"])
    return out


def run_ray(tree: Path, n: int, cpu: float, images: int) -> dict:
    venv = benchlib.CACHE / "venv-ray" / "bin" / "python"
    if not venv.is_file():
        return {"error": f"{venv} missing: bash bench/setup_peers.sh ray"}
    with cpu_cgroups(["ray"], (n + 1) * cpu) as groups:
        argv = in_group(groups["ray"], [venv, REPO / "bench" / "feeders_peers" /
                                         "ray_data_pass.py", tree, "--cpus", str((n + 1) * cpu),
                                         "--batch", "256", "--size", "224", "--images",
                                         str(images)])
        r = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
        used = groups["ray"].cpu_seconds()
    if r.returncode != 0:
        return {"error": r.stderr[-3000:]}
    out = json.loads(r.stdout.strip().splitlines()[-1])
    out["cpu_seconds"] = used
    return out


def rate_bytes(rate: str) -> float:
    units = {"kbit": 1e3 / 8, "mbit": 1e6 / 8, "gbit": 1e9 / 8}
    for unit, factor in units.items():
        if rate.endswith(unit):
            return float(rate[: -len(unit)]) * factor
    raise ValueError(f"a rate like 200mbit, not {rate!r}")


def main() -> None:
    p = benchlib.argument_parser(__doc__)
    p.set_defaults(images=3000, classes=30)
    p.add_argument("--feeders", default="0,1,2,3,4,5,6")
    p.add_argument("--cpu", type=float, default=0.25)
    p.add_argument("--link", default="200mbit")
    p.add_argument("--link-feeders", type=int, default=2)
    p.add_argument("--ray", default="0,2,6", help="feeder counts whose CPU Ray Data gets")
    p.add_argument("--skip-link", action="store_true")
    p.add_argument("--repeat", type=int, default=3, help="rounds over every feeder count")
    p.add_argument("--busy", default="6",
                   help="feeder counts whose load the 0.25-CPU loader is also measured beside")
    a = p.parse_args()
    tree, summary = benchlib.sample_data(a.images, a.classes, a.seed)
    benchlib.log(benchlib.data_line(summary))
    ds = benchlib.CACHE / f"feeders-{tree.name}.stoker"
    if not ds.exists():
        subprocess.run([STOKER, "pack", "-q", tree, ds], check=True)
    secret = benchlib.CACHE / "feeders.secret"
    secret.write_bytes(os.urandom(24).hex().encode())
    secret.chmod(0o600)
    benchlib.warm_tree(tree)
    benchlib.warm_tree(ds)
    result = {"machine": benchlib.machine(), "data": summary, "cpu": a.cpu, "scaling": {},
              "busy": {}, "ray": {}, "link": None}
    # Rounds over every N, so that a slow spell of the shared machine lands on all of them; each
    # N's median run stands for it, and every run's images/s is kept.
    counts = [int(x) for x in a.feeders.split(",") if x]
    runs: dict[int, list[dict]] = {n: [] for n in counts}
    for round_ in range(a.repeat):
        for n in counts:
            out = run_stoker(ds, secret, n, a.cpu)
            runs[n].append(out)
            used = out["cpu_seconds"]
            benchlib.log(f"round {round_ + 1}, stoker, {n} feeder(s): "
                         f"{out['images_per_second']:.0f} images/s; feeders made "
                         f"{out['feeder_share']:.0%}; CPU used {used['trainer']:.1f} s trainer, "
                         f"{used['feeders']:.1f} s feeders")
    for n in counts:
        ordered = sorted(runs[n], key=lambda r: r["images_per_second"])
        result["scaling"][n] = dict(ordered[len(ordered) // 2],
                                    runs=[r["images_per_second"] for r in runs[n]])
    for n in counts:
        out = result["scaling"][n]
        base = result["scaling"].get(0, out)["images_per_second"]
        rate = out["images_per_second"]
        benchlib.log(f"stoker, {n} feeder(s), median of {a.repeat}: {rate:.0f} images/s "
                     f"({rate / base:.2f}x one {a.cpu}-CPU loader, target {0.9 * (n + 1):.2f}x)")
    # The same loader alone, on a machine as loaded as with n feeders (n loaders beside it): on
    # two vCPUs, seven busy processes slow each other, which the idle-machine baseline hides.
    for n in [int(x) for x in a.busy.split(",") if x]:
        out = run_stoker(ds, secret, n, a.cpu, busy=True)
        result["busy"][n] = out
        fed = result["scaling"].get(n, {}).get("images_per_second")
        ratio = f"; with {n} feeders {fed / out['images_per_second']:.2f}x it" if fed else ""
        benchlib.log(f"stoker alone beside {n} busy loader(s): {out['images_per_second']:.0f} "
                     f"images/s{ratio}; CPU used {out['cpu_seconds']['trainer']:.1f} s")
    for n in [int(x) for x in a.ray.split(",") if x]:
        out = run_ray(tree, n, a.cpu, a.images)
        result["ray"][n] = out
        mine = result["scaling"].get(n, {}).get("images_per_second")
        if "error" in out:
            benchlib.log(f"ray, {(n + 1) * a.cpu} CPU: failed: {out['error'][-500:]}")
        else:
            ratio = f"; stoker {mine / out['images_per_second']:.2f}x" if mine else ""
            benchlib.log(f"ray, {(n + 1) * a.cpu} CPU: {out['images_per_second']:.0f} "
                         f"images/s{ratio}; CPU used {out['cpu_seconds']:.1f} s")
    if not a.skip_link:
        out = run_stoker(ds, secret, a.link_feeders, a.cpu, link=a.link, feeder_cpu=None)
        carried = out["feeder_pixel_bytes"] / out["pass_seconds"]
        out["link_rate"] = a.link
        out["link_share"] = carried / rate_bytes(a.link)
        result["link"] = out
        benchlib.log(f"link {a.link}: feeders' image bytes {carried / 1e6:.1f} MB/s = "
                     f"{out['link_share']:.0%} of the link")
    benchlib.save("feeders", result)


if __name__ == "__main__":
    main()
