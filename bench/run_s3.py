#!/usr/bin/env python3
"""One epoch from S3 (a real Ceph RADOS Gateway): stoker vs per-file GETs, WebDataset tar
shards and MosaicML Streaming, in the same run (issue #6).

    python3 bench/run_s3.py [--mode local|netns] [--reps 3] [--readers stoker,files,wds,mds]
        [--chunk-size 16MiB] [--rate 1gbit] [--delay-ms 1]

Data: the ImageNet-like subset of bench/run_decode.py (5,000 JPEGs in 25 class dirs, 518 MB,
4.54 bits/pixel; --tree), laid out in bucket `bench` as
  stoker/   `stoker pack TREE s3://bench/stoker --chunk-size C` (chunk-shuffled at read time)
  files/    one object per image, <class>/<file>.JPEG
  wds/      64 tar shards (~8 MB) of the files in a shuffled order (.jpg + .cls members)
  mds/      MDS shards (~8 MB, no compression) written with streaming.MDSWriter
(bench/s3_peers/prepare.py). Readers, each a fresh process reading every byte of every sample
and checking each sample's length and CRC32C against the tree (bench/s3_peers/*_reader.py):
  stoker    stoker.Loader("s3://bench/stoker", shuffle="chunk") with its defaults
  files     boto3 GETs, one per image, shuffled order, a pool of --threads threads
  files-dl  the same GETs as training code usually makes them: a torch Dataset doing one boto3
            GET in __getitem__, a shuffling DataLoader with --dl-workers processes
  wds       the `webdataset` package: pipe:curl --aws-sigv4 per shard, shard order and a 1,000-
            sample buffer shuffled, torch DataLoader with --wds-workers processes
  wds-tar   no webdataset: --wds-workers threads stream shards (boto3 GET into tarfile 'r|')
  mds       mosaicml-streaming StreamingDataset(remote=s3://bench/mds, shuffle=True), cache
            emptied before each epoch (S3_ENDPOINT_URL = the gateway)
The per-reader order rotates each rep; the ratio stoker / peer is taken within a rep.

Modes:
  local  the gateway on this machine's loopback (scripts/s3-server, --rgw-log-level 0), readers
         beside it.
  netns  the netns testbed (tests/netns/testbed.py, needs root): the gateway runs inside host
         `storage` (on its 127.0.0.1); a stoker_delay_relay in `storage` exposes it at
         storage.ip:7481 adding --delay-ms each way; readers run in host `node`; both links
         tbf-shaped to --rate. Each rep also measures one TCP stream storage -> node (the link).
Peers run from $STOKER_BENCH_CACHE/venv-s3peers (bash bench/setup_peers.sh s3peers), stoker from
.venv. Results: $STOKER_BENCH_CACHE/results/s3-<mode>-*.json and a table on stdout.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests" / "netns"))
import benchlib  # noqa: E402
from benchlib import CACHE, log  # noqa: E402

PEERS = HERE / "s3_peers"
BUCKET = "bench"
RGW_PORT = 7480
RELAY_PORT = 7481


def parse_env(text: str) -> dict:
    env = {}
    for line in text.splitlines():
        words = shlex.split(line)
        if words[:1] == ["export"]:
            env.update(w.split("=", 1) for w in words[1:] if "=" in w)
    if "AWS_ENDPOINT_URL" not in env:
        raise SystemExit(f"s3-server printed no environment: {text!r}")
    return env


class Place:
    """Where commands run: this machine's namespace, or one testbed host."""

    def __init__(self, host=None):
        self.host = host

    def run(self, argv, env, timeout=900) -> subprocess.CompletedProcess:
        if self.host is None:
            return subprocess.run(argv, env=env, capture_output=True, text=True,
                                  timeout=timeout, stdin=subprocess.DEVNULL)
        return self.host.run(argv, env=env, check=False, timeout=timeout)


def reader_argv(name: str, args, venvs: dict, workdir: Path, seed: int) -> list[str]:
    exp = str(workdir / "expected.json")
    py_st, py_peer = venvs["stoker"], venvs["peers"]
    if name == "stoker":
        return [py_st, str(PEERS / "stoker_reader.py"), f"s3://{BUCKET}/stoker", exp,
                "--seed", str(seed)]
    if name == "files":
        return [py_peer, str(PEERS / "files_reader.py"), BUCKET, "files", exp,
                "--threads", str(args.threads), "--seed", str(seed)]
    if name == "files-dl":
        return [py_peer, str(PEERS / "files_dl_reader.py"), BUCKET, "files", exp,
                "--workers", str(args.dl_workers), "--seed", str(seed)]
    if name == "wds":
        return [py_peer, str(PEERS / "wds_reader.py"), BUCKET, "wds", exp, "--impl",
                "webdataset", "--workers", str(args.wds_workers), "--seed", str(seed)]
    if name == "wds-tar":
        return [py_peer, str(PEERS / "wds_reader.py"), BUCKET, "wds", exp, "--impl", "tarfile",
                "--workers", str(args.wds_workers), "--seed", str(seed)]
    if name == "mds":
        return [py_peer, str(PEERS / "mds_reader.py"), f"s3://{BUCKET}/mds", exp,
                "--cache", str(args.mds_cache), "--workers", str(args.mds_workers),
                "--seed", str(seed)]
    raise SystemExit(f"unknown reader {name}")


def prepare(place: Place, env: dict, args, venvs: dict, workdir: Path) -> dict:
    """Creates the bucket and uploads every layout. Returns seconds per step."""
    out = {}
    mk = ("import os,boto3\nfrom botocore.config import Config\n"
          "c=boto3.client('s3',endpoint_url=os.environ['AWS_ENDPOINT_URL'],"
          "config=Config(s3={'addressing_style':'path'}))\n"
          f"c.create_bucket(Bucket='{BUCKET}')\n")
    r = place.run([venvs["peers"], "-c", mk], env)
    if r.returncode != 0 and "BucketAlreadyOwnedByYou" not in r.stderr:
        raise SystemExit(f"create bucket: {r.stderr}")
    t = time.perf_counter()
    r = place.run([str(args.stoker_cli), "pack", str(args.tree), f"s3://{BUCKET}/stoker",
                   "--chunk-size", args.chunk_size, "-q", "--json"], env)
    if r.returncode != 0:
        raise SystemExit(f"stoker pack: {r.stderr}{r.stdout}")
    out["stoker_pack"] = time.perf_counter() - t
    out["stoker_pack_json"] = json.loads(r.stdout)
    steps = ["expected", "files", "wds"] + (["mds"] if "mds" in args.readers else [])
    r = place.run([venvs["peers"], str(PEERS / "prepare.py"), str(args.tree), str(workdir),
                   BUCKET, *steps, "--shards", str(args.shards)], env)
    if r.returncode != 0:
        raise SystemExit(f"prepare.py: {r.stderr}{r.stdout}")
    for line in r.stdout.splitlines():
        d = json.loads(line)
        out[d["step"]] = d["seconds"]
    log(f"prepared: {json.dumps({k: v for k, v in out.items() if k != 'stoker_pack_json'})}")
    return out


def gateway_cpu_seconds() -> float:
    """CPU time used so far by the Ceph processes behind the gateway (mon, OSD, radosgw), read
    from /proc: the namespaces of the netns mode share this machine's process table."""
    total = 0.0
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except (OSError, ValueError):
            continue
        name = stat[stat.find("(") + 1:stat.rfind(")")]
        if name in ("radosgw", "ceph-osd", "ceph-mon"):
            fields = stat[stat.rfind(")") + 2:].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def run_reps(place: Place, env: dict, args, venvs: dict, workdir: Path, link=None) -> list:
    reps = []
    readers = list(args.readers)
    for rep in range(args.reps):
        row = {"rep": rep, "order": readers[rep % len(readers):] + readers[:rep % len(readers)]}
        if link is not None:
            row["link"] = link()
            log(f"rep {rep}: link {row['link']['MBps']:.0f} MB/s")
        for name in row["order"]:
            argv = reader_argv(name, args, venvs, workdir, rep)
            ru, gw = resource.getrusage(resource.RUSAGE_CHILDREN), gateway_cpu_seconds()
            r = place.run(argv, env, timeout=args.timeout)
            ru_after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = {"reader_cpu_s": ru_after.ru_utime + ru_after.ru_stime - ru.ru_utime -
                   ru.ru_stime, "gateway_cpu_s": gateway_cpu_seconds() - gw}
            lines = [l for l in r.stdout.splitlines() if l.startswith("{")]
            if r.returncode != 0 or not lines:
                row[name] = {"error": f"rc {r.returncode}: {r.stderr[-1500:]}"}
                log(f"rep {rep}: {name} FAILED rc {r.returncode}: {r.stderr[-600:]}")
                continue
            d = json.loads(lines[-1])
            d.update(cpu)  # the whole process (start-up included) and the gateway meanwhile
            d["MBps"] = d["bytes"] / d["seconds"] / 1e6
            d["samples_per_s"] = d["samples"] / d["seconds"]
            row[name] = d
            log(f"rep {rep}: {name:8s} {d['samples_per_s']:8.0f} samples/s "
                f"{d['MBps']:7.1f} MB/s  CPU s reader {d['reader_cpu_s']:.1f} gateway "
                f"{d['gateway_cpu_s']:.1f}  ok={d['ok']}")
        if "stoker" in row and "MBps" in row.get("stoker", {}):
            row["ratio"] = {n: row["stoker"]["MBps"] / row[n]["MBps"] for n in readers
                            if n != "stoker" and "MBps" in row.get(n, {})}
        reps.append(row)
    return reps


def summarize(results: dict) -> str:
    reps = results["reps"]
    names = results["readers"]
    lines = [f"S3 epoch benchmark, mode {results['mode']}"
             + (f" (tbf {results['rate']}, +{2 * results['delay_ms']:g} ms RTT)"
                if results["mode"] == "netns" else " (loopback)"),
             f"{'reader':10s} {'samples/s':>10s} {'MB/s':>8s} {'stoker/x':>9s} "
             f"{'CPU-s reader':>12s} {'gateway':>8s}  all checked  "
             f"(medians of {len(reps)} reps; ratio = median of per-rep ratios)"]
    for n in names:
        ok = [r[n] for r in reps if "MBps" in r.get(n, {})]
        if not ok:
            lines.append(f"{n:10s} FAILED: {reps[0].get(n, {}).get('error', '?')[:200]}")
            continue
        sps = benchlib.median([d["samples_per_s"] for d in ok])
        mbps = benchlib.median([d["MBps"] for d in ok])
        ratios = [r["ratio"][n] for r in reps if n in r.get("ratio", {})]
        ratio = f"{benchlib.median(ratios):8.2f}x" if ratios and n != "stoker" else "        -"
        allok = all(d["ok"] for d in ok)
        rcpu = benchlib.median([d["reader_cpu_s"] for d in ok])
        gcpu = benchlib.median([d["gateway_cpu_s"] for d in ok])
        lines.append(f"{n:10s} {sps:10.0f} {mbps:8.1f} {ratio} {rcpu:12.1f} {gcpu:8.1f}  {allok}")
    if reps and "link" in reps[0]:
        lines.append(f"{'link':10s} {'':10s} "
                     f"{benchlib.median([r['link']['MBps'] for r in reps]):8.1f}  "
                     "(one TCP stream storage -> node, no relay)")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--mode", choices=("local", "netns"), default="local")
    ap.add_argument("--tree", type=Path,
                    default=CACHE / "decode" / "imagenet-20000-c100-s1-first25c")
    ap.add_argument("--readers", default="stoker,files,files-dl,wds,wds-tar,mds")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--chunk-size", default="16MiB")
    ap.add_argument("--shards", type=int, default=64)
    ap.add_argument("--threads", type=int, default=32, help="per-file GET threads")
    ap.add_argument("--dl-workers", type=int, default=8,
                    help="DataLoader workers of files-dl")
    ap.add_argument("--wds-workers", type=int, default=4)
    ap.add_argument("--mds-workers", type=int, default=0)
    ap.add_argument("--mds-cache", type=Path, default=Path("/dev/shm/stoker-s3-mds-cache"))
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--delay-ms", type=float, default=1.0)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--memstore-gb", type=float, default=6.0)
    ap.add_argument("--s3-dir", default="/tmp/stk-s3bench")
    args = ap.parse_args()
    args.readers = [r for r in args.readers.split(",") if r]
    args.stoker_cli = REPO / ".venv" / "bin" / "stoker"
    venvs = {"stoker": str(REPO / ".venv" / "bin" / "python"),
             "peers": str(CACHE / "venv-s3peers" / "bin" / "python")}
    if not Path(venvs["peers"]).exists():
        sys.exit("no venv-s3peers: run `bash bench/setup_peers.sh s3peers` first")
    if not (args.tree / "n00000000").is_dir():
        sys.exit(f"{args.tree}: run bench/run_decode.py first (it makes the subset)")
    workdir = CACHE / "s3"
    server = [sys.executable, str(REPO / "scripts" / "s3-server")]
    start = server + ["start", "--dir", args.s3_dir, "--port", str(RGW_PORT),
                      "--rgw-log-level", "0", "--memstore-gb", str(args.memstore_gb)]
    results = {"machine": benchlib.machine(), "mode": args.mode, "readers": args.readers,
               "chunk_size": args.chunk_size, "shards": args.shards, "threads": args.threads, "dl_workers": args.dl_workers,
               "wds_workers": args.wds_workers, "mds_workers": args.mds_workers,
               "dataset": str(args.tree)}
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "S3_"))}
    if args.mode == "local":
        r = subprocess.run(start, capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            sys.exit(f"s3-server start: {r.stderr}")
        env = dict(base_env, **parse_env(r.stdout))
        place = Place()
        try:
            results["prepare"] = prepare(place, env, args, venvs, workdir)
            results["reps"] = run_reps(place, env, args, venvs, workdir)
        finally:
            subprocess.run(server + ["stop", "--dir", args.s3_dir], capture_output=True)
    else:
        from testbed import Testbed, find_relay, transfer, wait_for_port
        relay_exe = find_relay()
        if relay_exe is None:
            sys.exit("stoker_delay_relay not built (STOKER_TESTS=ON)")
        results.update(rate=args.rate, delay_ms=args.delay_ms)
        with Testbed("stk-bench-s3", ["storage", "node"], rate=args.rate) as tb:
            storage, node = tb["storage"], tb["node"]
            r = storage.run(start, check=False, timeout=300)
            if r.returncode != 0:
                sys.exit(f"s3-server start in storage: {r.stderr}")
            env = dict(base_env, **parse_env(r.stdout))
            try:
                # prepare over the storage host's loopback: fast, unshaped
                results["prepare"] = prepare(Place(storage), env, args, venvs, workdir)
                relay = storage.popen([relay_exe, "--listen", f"{storage.ip}:{RELAY_PORT}",
                                       "--target", f"127.0.0.1:{RGW_PORT}",
                                       "--up-delay-ms", str(args.delay_ms),
                                       "--down-delay-ms", str(args.delay_ms)],
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
                relay.stdout.readline()
                wait_for_port(node, storage.ip, RELAY_PORT)
                node_env = dict(env, AWS_ENDPOINT_URL=f"http://{storage.ip}:{RELAY_PORT}")
                payload = results["prepare"]["stoker_pack_json"]["bytes"]

                def link():
                    t = transfer(storage, node, payload, port=5201, verify=False)
                    return {"bytes": t["bytes"], "seconds": t["seconds"],
                            "MBps": t["bytes"] / t["seconds"] / 1e6}
                results["reps"] = run_reps(Place(node), node_env, args, venvs, workdir, link)
            finally:
                storage.run(server + ["stop", "--dir", args.s3_dir], check=False, timeout=120)
    path = benchlib.save(f"s3-{args.mode}", results)
    print(summarize(results))
    print(f"({path})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
