#!/usr/bin/env python3
"""torchvision ImageFolder + DataLoader over `stoker mount` (issue #6), against the unpacked tree.

    sudo python3 bench/run_mount.py [--loaders bytes,pil] [--workers 2] [--reps 1]
                                    [--rate 1gbit] [--delay-ms 1] [--cases local-tree,...]

One epoch = torchvision.datasets.ImageFolder(ROOT, loader=L) walked by a DataLoader
(shuffle=True, batch_size 64, --workers worker processes, fork). Two loaders:
  bytes  L = open(path, "rb").read()  (measures the file system: no decode)
  pil    torchvision's default loader (PIL open + convert("RGB")), transform
         Resize(64) + CenterCrop(64) + ToTensor
The timed epoch includes building the ImageFolder (directory scan) and the DataLoader.
Each rep: drop the page cache ("cold" epoch), then a second epoch without dropping ("warm").

Cases (all on the same 5,000-JPEG ImageNet-like subset from bench/run_decode.py):
  local-tree    the unpacked JPEG tree on the local disk
  local-mount   `stoker mount DATASET.stoker MNT` of the packed dataset on the local disk
  remote-mount  netns testbed: `stoker serve` in namespace `storage`, links shaped with tbf to
                --rate, the node reaches it through the delay relay (--delay-ms each way);
                `stoker mount stoker://relay/train MNT` in namespace `node`
  remote-mount-node  the same testbed and mount, with a one-node job cache in front of it: in
                `node`, `stoker node --job mnt --store stoker://relay/train --listen NODE:7171
                --memory-limit 1G` (docs/cache.md) and the mount run with STOKER_NODE=its
                socket, so the mount gets whole chunks through the daemon's shared memory
                instead of one remote read per file. Each rep starts a fresh daemon (empty
                cache) and a fresh mount, drops the page cache, runs the cold epoch, then the
                warm one, and stops both; the daemon's store fills / trainer gets are recorded.
  remote-sshfs  the same testbed, the unpacked tree over sshfs (SFTP, a FUSE client: this
                machine's kernel has no NFS client) from an sshd in `storage`, through a
                relay adding the same delay; sshfs tuned for an immutable tree (aes128-gcm,
                max_conns=4, kernel_cache, hour-long entry/attr/dir caching, read-only),
                mounted afresh for each rep.
                `bash bench/setup_peers.sh sshfs` installs sshfs and openssh-server.
  remote-http   the same testbed and relay, the unpacked tree served by
                `python3 -m http.server --protocol HTTP/1.1` (threaded) in `storage`; ImageFolder
                indexes the local copy of the tree (the listing is free, not fetched) and the
                loader GETs each file over one persistent HTTP connection per worker (a
                custom per-file reader, as with object stores). It has no client cache, so its
                "warm" epoch fetches again (only the server's page cache is warm).

Caveat: the VM's host caches the virtual disk, so "cold" local reads after drop_caches are still
fast (GB/s, see /work/shared/TESTBED.md); cold here means "not in this kernel's page cache".

Internal: `run_mount.py inner ...` runs the epochs of one case (in the torchvision venv) and
prints one JSON line; the driver starts it, in the node namespace for the remote cases.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("STOKER_BENCH_CACHE", "/var/tmp/stoker-bench"))
SUBSET = "imagenet-20000-c100-s1-first25c"


# --------------------------------------------------------------------------------------------
# inner: runs in the torchvision venv
# --------------------------------------------------------------------------------------------

_HTTP = {"base": None, "root": None, "conn": None, "pid": None}


def _http_get(path: str) -> bytes:
    import http.client
    import urllib.parse
    if _HTTP["pid"] != os.getpid() or _HTTP["conn"] is None:
        u = urllib.parse.urlsplit(_HTTP["base"])
        _HTTP["conn"] = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
        _HTTP["pid"] = os.getpid()
    rel = os.path.relpath(path, _HTTP["root"])
    url = "/" + urllib.parse.quote(rel)
    for attempt in range(3):
        try:
            c = _HTTP["conn"]
            c.request("GET", url)
            r = c.getresponse()
            data = r.read()
            if r.status != 200:
                raise OSError(f"GET {url}: {r.status}")
            return data
        except (ConnectionError, OSError, http.client.HTTPException):
            if attempt == 2:
                raise
            _HTTP["conn"] = None
            _HTTP["pid"] = None
            u = urllib.parse.urlsplit(_HTTP["base"])
            _HTTP["conn"] = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
            _HTTP["pid"] = os.getpid()
    raise AssertionError


def load_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def load_http_bytes(path: str) -> bytes:
    return _http_get(path)


def load_http_pil(path: str):
    import io
    from PIL import Image
    return Image.open(io.BytesIO(_http_get(path))).convert("RGB")


def collate_bytes(batch):
    return [b for b, _ in batch], [y for _, y in batch]


def _epoch(root: str, loader_kind: str, workers: int, seed: int, http: bool) -> dict:
    import torch
    from torch.utils.data import DataLoader
    from torchvision import datasets, transforms
    t0 = time.perf_counter()
    if loader_kind == "bytes":
        loader = load_http_bytes if http else load_bytes
        ds = datasets.ImageFolder(root, loader=loader)
        collate = collate_bytes
    else:
        tf = transforms.Compose([transforms.Resize(64), transforms.CenterCrop(64),
                                 transforms.ToTensor()])
        if http:
            ds = datasets.ImageFolder(root, loader=load_http_pil, transform=tf)
        else:
            ds = datasets.ImageFolder(root, transform=tf)
        collate = None
    t_index = time.perf_counter() - t0
    g = torch.Generator()
    g.manual_seed(seed)
    dl = DataLoader(ds, batch_size=64, shuffle=True, num_workers=workers, generator=g,
                    collate_fn=collate, multiprocessing_context="fork" if workers else None,
                    persistent_workers=False)
    n = nbytes = 0
    for x, y in dl:
        n += len(y)
        if loader_kind == "bytes":
            nbytes += sum(len(b) for b in x)
    seconds = time.perf_counter() - t0
    return {"samples": n, "bytes": nbytes, "seconds": seconds, "index_seconds": t_index,
            "samples_per_s": n / seconds}


def _drop_caches() -> None:
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def _start_mount(stoker: str, src: str, env: dict | None = None):
    return _start_fuse(lambda mnt: [stoker, "mount", src, mnt], env)


def _start_sshfs(spec: str):
    """spec = "USER@HOST:PATH PORT KEY": sshfs in the foreground, read-only, tuned for an
    immutable tree: AES-GCM, 4 connections, the kernel's page cache kept across opens, names,
    attributes and directories cached for an hour (as `stoker mount` does for a year)."""
    remote, port, key = spec.split()
    opts = (f"ro,IdentityFile={key},StrictHostKeyChecking=no,UserKnownHostsFile=/dev/null,"
            "Ciphers=aes128-gcm@openssh.com,max_conns=4,kernel_cache,entry_timeout=3600,"
            "attr_timeout=3600,dcache_timeout=3600")
    return _start_fuse(lambda mnt: ["sshfs", "-f", remote, mnt, "-p", port, "-o", opts])


def _start_fuse(argv_for, env: dict | None = None):
    """Starts a foreground FUSE client (argv_for(mountpoint)); returns (proc, mountpoint) once
    the mount is there."""
    mnt = tempfile.mkdtemp(prefix="stoker-bench-mnt-")
    t = time.perf_counter()
    argv = argv_for(mnt)
    mount = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True)
    while True:
        if any(line.split()[1] == mnt for line in open("/proc/self/mounts")):
            return mount, mnt
        if mount.poll() is not None:
            sys.exit(f"{argv[0]} exited {mount.returncode}: {mount.stderr.read()}")
        if time.perf_counter() - t > 60:
            sys.exit(f"{argv[0]}: not mounted after 60 s")
        time.sleep(0.01)


def _stop_mount(mount, mnt) -> None:
    if mount is not None:
        mount.terminate()
        try:
            mount.wait(timeout=30)
        except subprocess.TimeoutExpired:
            mount.kill()
            subprocess.run(["fusermount3", "-u", "-z", mnt], check=False)
    if mnt:
        try:
            os.rmdir(mnt)
        except OSError:
            pass


def _start_sshd(host, port: int):
    """An sshd of its own on host (a testbed namespace), key login only, SFTP in-process.
    Returns (proc, dir with the client key `client`)."""
    d = Path(tempfile.mkdtemp(prefix="stoker-bench-sshd-"))
    for name in ("host", "client"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / name)],
                       check=True)
    (d / "authorized_keys").write_text((d / "client.pub").read_text())
    (d / "sshd_config").write_text(
        f"Port {port}\nListenAddress {host.ip}\nHostKey {d}/host\n"
        f"AuthorizedKeysFile {d}/authorized_keys\nPermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
        f"StrictModes no\nPidFile {d}/sshd.pid\nSubsystem sftp internal-sftp\n")
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation directory
    proc = host.popen(["/usr/sbin/sshd", "-D", "-e", "-f", str(d / "sshd_config")],
                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, d


def _start_node(a):
    """A fresh `stoker node` daemon (empty cache) for a one-node job; returns (proc, log path)."""
    if os.path.exists(a.node_socket):
        os.unlink(a.node_socket)
    logf = tempfile.NamedTemporaryFile(prefix="stoker-bench-node-", suffix=".log", delete=False)
    argv = [a.stoker, "node", "--job", "mnt", "--store", a.node_store, "--listen", a.node_listen,
            "--socket", a.node_socket, "--memory-limit", a.node_memory,
            "--secret-file", a.node_secret, "--metrics-port", str(a.node_metrics_port)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=logf)
    logf.close()
    t = time.perf_counter()
    while True:  # ready once it logs the line naming its trainer socket
        text = Path(logf.name).read_text(errors="replace")
        if "trainers on" in text and os.path.exists(a.node_socket):
            return proc, logf.name
        if proc.poll() is not None:
            sys.exit(f"stoker node exited {proc.returncode}: {text}")
        if time.perf_counter() - t > 60:
            proc.kill()
            sys.exit(f"stoker node: not ready after 60 s: {text}")
        time.sleep(0.02)


def _stop_node(proc, log) -> None:
    if proc is not None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if log:
        try:
            os.unlink(log)
        except OSError:
            pass


_NODE_METRICS = ("stoker_node_trainer_gets_total", "stoker_node_store_fills_total",
                 "stoker_node_store_bytes_total", "stoker_node_cache_hits_total",
                 "stoker_node_cache_evictions_total", "stoker_node_cache_bytes")


def _node_metrics(a) -> dict:
    import urllib.request
    host = a.node_listen.rsplit(":", 1)[0]
    url = f"http://{host}:{a.node_metrics_port}/metrics"
    out = {}
    with urllib.request.urlopen(url, timeout=10) as r:
        for line in r.read().decode().splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] in _NODE_METRICS:
                out[parts[0]] = float(parts[1])
    return out


def inner(a) -> int:
    if a.http:
        _HTTP["base"], _HTTP["root"] = a.http, a.root
    runs = []
    if a.node_store:
        # remote-mount-node: per rep a freshly started daemon (empty cache) and a fresh mount
        # that reads chunks through it (STOKER_NODE); a mount kept across a daemon restart
        # would read the store directly until it retried the daemon (1 s later).
        env = dict(os.environ, STOKER_NODE=a.node_socket)
        for rep in range(a.reps):
            node = log = mount = mnt = None
            try:
                node, log = _start_node(a)
                mount, mnt = _start_mount(a.stoker, a.mount_src, env)
                _drop_caches()
                cold = _epoch(mnt, a.loader, a.workers, rep, False)
                cold["node_metrics"] = _node_metrics(a)
                warm = _epoch(mnt, a.loader, a.workers, 1000 + rep, False)
                warm["node_metrics"] = _node_metrics(a)  # cumulative since the daemon started
            finally:
                _stop_mount(mount, mnt)
                _stop_node(node, log)
            runs.append({"cold": cold, "warm": warm})
            m0, m1 = cold["node_metrics"], warm["node_metrics"]
            print(f"  rep {rep}: cold {cold['samples_per_s']:.0f} samples/s, "
                  f"warm {warm['samples_per_s']:.0f} samples/s; daemon store fills "
                  f"{m0.get('stoker_node_store_fills_total', 0):.0f} "
                  f"({m0.get('stoker_node_store_bytes_total', 0) / 1e6:.0f} MB) cold, "
                  f"+{m1.get('stoker_node_store_fills_total', 0) - m0.get('stoker_node_store_fills_total', 0):.0f} warm; "
                  f"trainer gets {m0.get('stoker_node_trainer_gets_total', 0):.0f} cold, "
                  f"+{m1.get('stoker_node_trainer_gets_total', 0) - m0.get('stoker_node_trainer_gets_total', 0):.0f} warm",
                  file=sys.stderr, flush=True)
        print(json.dumps({"runs": runs}))
        return 0

    if a.sshfs:
        # remote-sshfs: a fresh sshfs mount per rep (no client state carried over).
        for rep in range(a.reps):
            mount = mnt = None
            try:
                mount, mnt = _start_sshfs(a.sshfs)
                _drop_caches()
                cold = _epoch(mnt, a.loader, a.workers, rep, False)
                warm = _epoch(mnt, a.loader, a.workers, 1000 + rep, False)
            finally:
                _stop_mount(mount, mnt)
            runs.append({"cold": cold, "warm": warm})
            print(f"  rep {rep}: cold {cold['samples_per_s']:.0f} samples/s, "
                  f"warm {warm['samples_per_s']:.0f} samples/s", file=sys.stderr, flush=True)
        print(json.dumps({"runs": runs}))
        return 0

    mount = mnt = None
    root = a.root
    try:
        if a.mount_src:
            mount, mnt = _start_mount(a.stoker, a.mount_src)
            root = mnt
        for rep in range(a.reps):
            _drop_caches()
            cold = _epoch(root, a.loader, a.workers, rep, bool(a.http))
            warm = _epoch(root, a.loader, a.workers, 1000 + rep, bool(a.http))
            runs.append({"cold": cold, "warm": warm})
            print(f"  rep {rep}: cold {cold['samples_per_s']:.0f} samples/s, "
                  f"warm {warm['samples_per_s']:.0f} samples/s", file=sys.stderr, flush=True)
        print(json.dumps({"runs": runs}))
    finally:
        _stop_mount(mount, mnt)
    return 0


# --------------------------------------------------------------------------------------------
# driver
# --------------------------------------------------------------------------------------------

def _median(xs):
    import statistics
    return statistics.median(xs) if xs else float("nan")


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "inner":
        p = argparse.ArgumentParser()
        p.add_argument("inner")
        p.add_argument("--root", required=True)
        p.add_argument("--mount-src")
        p.add_argument("--http")
        p.add_argument("--sshfs")
        p.add_argument("--stoker")
        p.add_argument("--loader", choices=["bytes", "pil"], required=True)
        p.add_argument("--workers", type=int, default=2)
        p.add_argument("--reps", type=int, default=1)
        p.add_argument("--node-store")
        p.add_argument("--node-listen")
        p.add_argument("--node-socket", default="/tmp/stk-mount-node.sock")
        p.add_argument("--node-memory", default="1G")
        p.add_argument("--node-secret")
        p.add_argument("--node-metrics-port", type=int, default=9171)
        return inner(p.parse_args())

    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", type=Path, default=CACHE / "decode" / SUBSET)
    ap.add_argument("--dataset", type=Path, default=CACHE / "decode" / f"{SUBSET}.stoker")
    ap.add_argument("--python", type=Path, default=CACHE / "venv-tv" / "bin" / "python")
    ap.add_argument("--stoker", type=Path, default=HERE.parent / ".venv" / "bin" / "stoker")
    ap.add_argument("--loaders", default="bytes,pil")
    ap.add_argument("--cases",
                    default="local-tree,local-mount,remote-mount,remote-mount-node,remote-sshfs,"
                    "remote-http")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--delay-ms", type=float, default=1.0)
    a = ap.parse_args()
    for need in (a.tree, a.dataset / "versions", a.python, a.stoker):
        if not need.exists():
            sys.exit(f"{need}: missing (run bench/run_decode.py and bench/setup_peers.sh first)")
    if "remote-sshfs" in a.cases and not (shutil.which("sshfs") and Path("/usr/sbin/sshd").exists()):
        sys.exit("remote-sshfs needs sshfs and sshd: bash bench/setup_peers.sh sshfs")
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(HERE.parent / "tests" / "netns"))
    import benchlib
    from benchlib import log

    loaders = a.loaders.split(",")
    cases = a.cases.split(",")
    me = str(Path(__file__).resolve())
    results = {"machine": benchlib.machine(), "workers": a.workers, "reps": a.reps,
               "rate": a.rate, "delay_ms": a.delay_ms, "tree": str(a.tree),
               "dataset": str(a.dataset), "batch_size": 64, "results": []}

    def inner_argv(loader, root, **kw):
        argv = [str(a.python), me, "inner", "--root", str(root), "--loader", loader,
                "--workers", str(a.workers), "--reps", str(a.reps), "--stoker", str(a.stoker)]
        for k, v in kw.items():
            argv += [f"--{k.replace('_', '-')}", str(v)]
        return argv

    def record(case, loader, proc_stdout):
        out = json.loads(proc_stdout.strip().splitlines()[-1])
        row = {"case": case, "loader": loader, "runs": out["runs"],
               "cold_samples_per_s": _median([r["cold"]["samples_per_s"] for r in out["runs"]]),
               "warm_samples_per_s": _median([r["warm"]["samples_per_s"] for r in out["runs"]])}
        results["results"].append(row)
        log(f"{case} {loader}: cold {row['cold_samples_per_s']:.0f}, "
            f"warm {row['warm_samples_per_s']:.0f} samples/s")

    for loader in loaders:
        for case in [c for c in cases if c.startswith("local")]:
            log(f"== {case} {loader}")
            kw = {"mount_src": a.dataset} if case == "local-mount" else {}
            proc = subprocess.run(inner_argv(loader, a.tree, **kw), stdout=subprocess.PIPE,
                                  text=True, timeout=1800)
            if proc.returncode != 0:
                sys.exit(f"{case} {loader} failed ({proc.returncode})")
            record(case, loader, proc.stdout)

    remote = [c for c in cases if c.startswith("remote")]
    if remote:
        from testbed import Testbed, wait_for_port
        secret = CACHE / "serve-secret"
        secret.write_text("benchmark-secret-0123456789abcdef\n")
        secret.chmod(0o600)
        env = dict(os.environ, STOKER_SECRET_FILE=str(secret))
        with Testbed("stk-bench-mount", ["storage", "node"], rate=a.rate) as tb:
            storage, node = tb["storage"], tb["node"]
            server = storage.popen([str(a.stoker), "serve", "--listen", f"{storage.ip}:7070",
                                    "--dataset", f"train={a.dataset}", "--secret-file",
                                    str(secret)], stderr=subprocess.DEVNULL)
            httpd = storage.popen([sys.executable, "-m", "http.server", "--protocol", "HTTP/1.1",
                                   "--bind", storage.ip, "--directory", str(a.tree), "8000"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wait_for_port(node, storage.ip, 7070)
            wait_for_port(node, storage.ip, 8000)
            relay = tb.relay(storage, 7070, delay_ms=a.delay_ms)
            relay_http = tb.relay(storage, 8000, delay_ms=a.delay_ms)
            sshd = sshd_dir = relay_ssh = None
            if "remote-sshfs" in remote:
                sshd, sshd_dir = _start_sshd(storage, 2222)
                wait_for_port(node, storage.ip, 2222)
                relay_ssh = tb.relay(storage, 2222, delay_ms=a.delay_ms)
            for loader in loaders:
                for case in remote:
                    log(f"== {case} {loader}")
                    uri = f"stoker://{relay.address}/train"
                    if case == "remote-mount":
                        argv = inner_argv(loader, a.tree, mount_src=uri)
                    elif case == "remote-mount-node":
                        argv = inner_argv(loader, a.tree, mount_src=uri, node_store=uri,
                                          node_listen=f"{node.ip}:7171", node_secret=secret,
                                          node_socket="/tmp/stk-mount-node.sock",
                                          node_memory="1G", node_metrics_port=9171)
                    elif case == "remote-sshfs":
                        ip, port = relay_ssh.address.rsplit(":", 1)
                        argv = inner_argv(loader, a.tree,
                                          sshfs=f"root@{ip}:{a.tree} {port} {sshd_dir}/client")
                    elif case == "remote-http":
                        argv = inner_argv(loader, a.tree, http=f"http://{relay_http.address}")
                    else:
                        sys.exit(f"unknown case {case}")
                    proc = node.run(argv, env=env, timeout=1800, capture=True, check=False)
                    sys.stderr.write(proc.stderr)
                    if proc.returncode != 0:
                        sys.exit(f"{case} {loader} failed ({proc.returncode})")
                    record(case, loader, proc.stdout)
            storage.kill(httpd)
            storage.kill(server)
            if sshd is not None:
                storage.kill(sshd)

    path = benchlib.save("mount", results)
    rows = {(r["case"], r["loader"]): r for r in results["results"]}
    print(f"\nImageFolder + DataLoader epoch, {a.workers} workers, batch 64, median of {a.reps} "
          f"rep(s); remote = {a.rate} tbf + relay {a.delay_ms} ms each way ({path})")
    print("| loader | case | cold samples/s | warm samples/s | cold vs local-tree | "
          "warm vs local-tree | vs remote-sshfs (cold / warm) | vs remote-http (cold / warm) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")

    def versus(r, base_case, loader):
        base = rows.get((base_case, loader))
        if not base or not r["case"].startswith("remote-mount"):
            return "-"
        return (f"{r['cold_samples_per_s'] / base['cold_samples_per_s']:.2f} / "
                f"{r['warm_samples_per_s'] / base['warm_samples_per_s']:.2f}")

    for (case, loader), r in rows.items():
        base = rows.get(("local-tree", loader))
        c, w = r["cold_samples_per_s"], r["warm_samples_per_s"]
        rc = f"{c / base['cold_samples_per_s']:.2f}" if base else "-"
        rw = f"{w / base['warm_samples_per_s']:.2f}" if base else "-"
        print(f"| {loader} | {case} | {c:.0f} | {w:.0f} | {rc} | {rw} | "
              f"{versus(r, 'remote-sshfs', loader)} | {versus(r, 'remote-http', loader)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
